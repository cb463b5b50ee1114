// Fuzzes a GGUF file (header, typed metadata, tensor infos, data) through GgufFile::open, then
// what the engine reads from an opened file: every typed metadata getter on every key, a view
// of every tensor, the tokenizer (Tokenizer::from_gguf) and the model config and tensor map
// (open_gguf_checkpoint). The bytes live in a memfd.
//
// Checks: ModelError is the only exception anywhere (gguf.h: "a truncated or hostile file gives
// a ModelError naming the file and the problem, never an out-of-bounds read or an absurd
// allocation"); a tensor's bytes lie within the file and a small one converts to num_elements
// floats; a tokenizer built from the metadata encodes text to ids inside its vocabulary.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/loader/gguf.h"
#include "model/loader/llama_weights.h"
#include "model/loader/model_error.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

using namespace pagedserve;

namespace {

template <class Get>
void try_getter(Get get) {
  try {
    get();
  } catch (const model::ModelError&) {
    // a key read as the wrong type: documented
  }
}

void read_metadata(const model::GgufFile& file) {
  for (const auto& entry : file.metadata()) {
    const std::string& key = entry.first;  // (clang 14 lambdas cannot capture a binding)
    try_getter([&] { return file.get_string(key); });
    try_getter([&] { return file.get_int(key); });
    try_getter([&] { return file.get_float(key); });
    try_getter([&] { return file.get_bool(key); });
    try_getter([&] { return file.get_string_array(key); });
    try_getter([&] { return file.get_int_array(key); });
    try_getter([&] { return file.get_float_array(key); });
  }
}

void read_tensors(const model::GgufFile& file, size_t file_size) {
  for (const auto& [name, tensor] : file.tensors()) {
    FUZZ_CHECK(tensor.offset <= file_size && tensor.num_bytes <= file_size - tensor.offset,
               name + ": data past the end of the file");
    model::TensorView view;
    try {
      view = file.view(tensor);
    } catch (const model::ModelError&) {
      continue;  // a type the engine does not compute with
    }
    FUZZ_CHECK(view.num_bytes == tensor.num_bytes, name);
    if (view.num_bytes <= (1 << 16)) {
      const std::vector<float> values = model::to_f32(view);
      FUZZ_CHECK(static_cast<int64_t>(values.size()) == view.num_elements(), name);
    }
  }
}

void use_tokenizer(const model::GgufFile& file) {
  std::optional<model::Tokenizer> tokenizer;
  try {
    tokenizer.emplace(model::Tokenizer::from_gguf(file));
  } catch (const model::ModelError&) {
    return;
  }
  for (std::string_view text : {"Hello world", " \xc3\xa9t\xc3\xa9 \xe6\x97\xa5\n\t12"}) {
    const std::vector<int32_t> ids = tokenizer->encode(text);
    for (int32_t id : ids) {
      FUZZ_CHECK(id >= 0 && id < tokenizer->vocab_size(), "id " + std::to_string(id));
    }
    tokenizer->decode(ids);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::MemFile file("model.gguf",
                           std::string_view(reinterpret_cast<const char*>(data), size));
  std::unique_ptr<model::GgufFile> opened;
  try {
    opened = model::GgufFile::open(file.path());
  } catch (const model::ModelError&) {
    return 0;
  }
  read_metadata(*opened);
  read_tensors(*opened, size);
  use_tokenizer(*opened);
  try {
    model::open_gguf_checkpoint(file.path());
  } catch (const model::ModelError&) {
  }
  return 0;
}
