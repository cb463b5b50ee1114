// The tokenizer.json "pre_tokenizer" stage: splits one section of normalized text into the
// words the BPE model merges independently (Digits, ByteLevel, Split with a known regex,
// Metaspace, and Sequences of them).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/split_patterns.h"

namespace pagedserve::model::tokenizer {

class PreTokenizer {
 public:
  // `config` is the "pre_tokenizer" value (null = the whole section is one word). Throws
  // ModelError for unsupported types or regexes.
  static PreTokenizer from_json(const nlohmann::json& config);

  // Appends the words of `section` to `words`. `at_text_start`: the section begins the input
  // (Metaspace's "first" prepend scheme only adds "▁" there).
  void pre_tokenize(std::string_view section, bool at_text_start,
                    std::vector<std::string>& words) const;

 private:
  enum class Kind { kDigits, kByteLevel, kSplit, kMetaspace };
  enum class PrependScheme { kAlways, kFirst, kNever };
  struct Step {
    Kind kind;
    bool individual_digits = false;              // kDigits
    bool add_prefix_space = false;               // kByteLevel
    bool use_regex = true;                       // kByteLevel
    SplitPattern pattern = SplitPattern::kGpt2;  // kSplit, or kByteLevel's regex
    std::string replacement;                     // kMetaspace: usually "▁"
    PrependScheme prepend_scheme = PrependScheme::kAlways;
    bool split_on_replacement = true;  // kMetaspace
  };
  void add_steps(const nlohmann::json& config);
  static void apply(const Step& step, std::string_view word, bool at_text_start,
                    std::vector<std::string>& out);

  std::vector<Step> steps_;
};

}  // namespace pagedserve::model::tokenizer
