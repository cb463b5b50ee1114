// Shared fixtures for the net/protocol tests: the real SmolLM2 tokenizer and chat template
// (../shared/tokenizers/smollm2-135m-instruct) and stories260K (no template: the default
// ChatML one), loaded once per test binary, wrapped as ServedModels.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"
#include "net/protocol/served_model.h"
#include "tests/test_paths.h"

namespace pagedserve::net::testing {

inline std::filesystem::path smollm_dir() {
  return pagedserve::testing::shared_dir() / "tokenizers" / "smollm2-135m-instruct";
}

inline const model::Tokenizer& smollm_tokenizer() {
  static const model::Tokenizer kTokenizer = model::Tokenizer::from_dir(smollm_dir());
  return kTokenizer;
}

inline const model::Tokenizer& stories_tokenizer() {
  static const model::Tokenizer kTokenizer =
      model::Tokenizer::from_dir(pagedserve::testing::stories260k_dir());
  return kTokenizer;
}

inline ServedModel smollm_model(int max_model_len = 2048) {
  ServedModel served =
      make_served_model("smollm2", smollm_dir(), smollm_tokenizer(), max_model_len);
  served.created = 1700000000;
  return served;
}

inline ServedModel stories_model(int max_model_len = 512) {
  ServedModel served = make_served_model("stories260K", pagedserve::testing::stories260k_dir(),
                                         stories_tokenizer(), max_model_len);
  served.created = 1700000000;
  return served;
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

}  // namespace pagedserve::net::testing
