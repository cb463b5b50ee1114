// Tokenizer::from_model: picks the tokenizer source the way the weight loader picks the
// weights (model/loader/llama_weights.h find_gguf_file), so a model path means one thing.
#include "model/loader/gguf.h"
#include "model/loader/llama_weights.h"
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::model {

Tokenizer Tokenizer::from_model(const std::filesystem::path& model_path) {
  std::error_code ec;
  if (std::filesystem::exists(model_path / "tokenizer.json", ec)) return from_dir(model_path);
  if (const auto gguf = find_gguf_file(model_path)) return from_gguf(*GgufFile::open(*gguf));
  return from_dir(model_path);
}

}  // namespace pagedserve::model
