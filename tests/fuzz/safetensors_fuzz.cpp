// Fuzzes a .safetensors file (8-byte header length, JSON header, data) through
// SafetensorsFile::open, as the loader maps model.safetensors. The bytes live in a memfd.
//
// Checks: the only exception is ModelError (documented for every malformed header); an opened
// file's tensors each cover exactly tensor_bytes(dtype, shape) bytes inside the file, and a
// small one converts to num_elements floats (reading every byte, so a range past the mapping
// faults here).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/loader/model_error.h"
#include "model/loader/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

using namespace pagedserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fuzz::MemFile file("model.safetensors",
                           std::string_view(reinterpret_cast<const char*>(data), size));
  std::unique_ptr<model::SafetensorsFile> opened;
  try {
    opened = model::SafetensorsFile::open(file.path());
  } catch (const model::ModelError&) {
    return 0;
  }
  for (const auto& [name, tensor] : opened->tensors()) {
    const std::optional<uint64_t> expected = model::tensor_bytes(tensor.dtype, tensor.shape);
    FUZZ_CHECK(expected && *expected == tensor.num_bytes, name + ": byte count and shape differ");
    FUZZ_CHECK(tensor.num_bytes <= size, name + ": more bytes than the file");
    if (tensor.num_bytes <= (1 << 16)) {
      const std::vector<float> values = model::to_f32(tensor);
      FUZZ_CHECK(static_cast<int64_t>(values.size()) == tensor.num_elements(), name);
    }
  }
  return 0;
}
