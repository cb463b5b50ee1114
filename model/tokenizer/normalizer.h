// The tokenizer.json "normalizer" stage: the text rewrites applied before added-token matching
// (of normalized tokens) and pre-tokenization, e.g. SentencePiece's Prepend "▁" + Replace " ".
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pagedserve::model::tokenizer {

class Normalizer {
 public:
  // `config` is the "normalizer" value (null = identity). Throws ModelError for unsupported types.
  static Normalizer from_json(const nlohmann::json& config);

  std::string normalize(std::string_view text) const;

 private:
  enum class Kind { kPrepend, kReplace, kStrip };
  struct Step {
    Kind kind;
    std::string pattern;  // kReplace: the literal to find
    std::string content;  // kPrepend: the prefix; kReplace: the replacement
    bool strip_left = false;
    bool strip_right = false;
  };
  void add_steps(const nlohmann::json& config);

  std::vector<Step> steps_;
};

}  // namespace pagedserve::model::tokenizer
