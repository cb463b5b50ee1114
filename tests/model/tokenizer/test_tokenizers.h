// Shared fixtures for the tokenizer tests: the real tokenizers under ../shared, each loaded once
// per test binary (loading is the slow part under sanitizers), and a JSONL reader.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "tests/test_paths.h"

namespace pagedserve::model::testing {

inline std::filesystem::path tokenizers_dir() {
  return pagedserve::testing::shared_dir() / "tokenizers";
}

inline const Tokenizer& llama2_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_dir(tokenizers_dir() / "llama2");
  return tokenizer;
}

inline const Tokenizer& smollm2_tokenizer() {
  static const Tokenizer tokenizer =
      Tokenizer::from_dir(tokenizers_dir() / "smollm2-135m-instruct");
  return tokenizer;
}

inline const Tokenizer& stories260k_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_dir(pagedserve::testing::stories260k_dir());
  return tokenizer;
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

inline std::vector<int32_t> ids_of(const nlohmann::json& j) {
  return j.get<std::vector<int32_t>>();
}

}  // namespace pagedserve::model::testing
