// Hand-written matchers for the pre-tokenizer regexes that real byte-level BPE tokenizers use
// (GPT-2's, and the Llama 3 / Qwen2 variants), so no regex engine or ICU is needed. Each one
// reproduces the leftmost-first, greedy-with-backtracking semantics of the original regex.
#pragma once

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace pagedserve::model::tokenizer {

enum class SplitPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3 with \p{N} (single digits) instead of \p{N}{1,3}.
  kQwen2,
};

// Which of the known patterns a tokenizer.json Split regex is; nullopt when unknown.
std::optional<SplitPattern> recognize_split_regex(std::string_view regex);

// Byte ranges [begin, end) of the matches, in order. The patterns match every character, so the
// ranges tile `text` exactly.
std::vector<std::pair<size_t, size_t>> split_by_pattern(std::string_view text,
                                                        SplitPattern pattern);

}  // namespace pagedserve::model::tokenizer
