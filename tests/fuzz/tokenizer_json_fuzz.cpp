// Fuzzes Tokenizer::from_files: a tokenizer.json and an optional tokenizer_config.json, given as
// the input's bytes before and after its first NUL (JSON holds no raw NUL). Both live in memfds.
//
// Checks: ModelError is the only exception (tokenizer.h documents it for invalid JSON and
// unsupported models, normalizers and pre-tokenizers); a tokenizer that loads encodes a few
// texts to ids inside vocab_size(), decodes them, and reports bytes for every id.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/loader/model_error.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

using namespace pagedserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const fuzz::MemFile tokenizer_json("tokenizer.json", input.substr(0, nul));
  std::optional<fuzz::MemFile> config;
  if (nul != std::string_view::npos) config.emplace("tokenizer_config.json", input.substr(nul + 1));

  std::optional<model::Tokenizer> tokenizer;
  try {
    tokenizer.emplace(model::Tokenizer::from_files(
        tokenizer_json.path(), config ? std::optional(config->path()) : std::nullopt));
  } catch (const model::ModelError&) {
    return 0;
  }
  const int vocab_size = tokenizer->vocab_size();
  FUZZ_CHECK(vocab_size >= 0, "negative vocab size");
  for (std::string_view text : {"Hello world", "  a\xc3\xa9\xe6\x97\xa5 12\n<s></s>", ""}) {
    for (bool special : {false, true}) {
      const std::vector<int32_t> ids = tokenizer->encode(text, special);
      for (int32_t id : ids) {
        FUZZ_CHECK(id >= 0 && id < vocab_size,
                   "id " + std::to_string(id) + " of " + std::to_string(vocab_size));
      }
      tokenizer->decode(ids, special);
    }
  }
  for (int32_t id = 0; id < std::min(vocab_size, 64); ++id) {
    tokenizer->token_bytes(id);
    tokenizer->token_bytes_after_text(id);
  }
  return 0;
}
