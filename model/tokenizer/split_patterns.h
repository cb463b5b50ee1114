// Hand-written matchers for the pre-tokenizer regexes that real byte-level BPE tokenizers use
// (GPT-2's, the Llama 3 / Qwen2 variants, and the one-character-class regexes of DeepSeek,
// Falcon and llama.cpp's "default"), so no regex engine or ICU is needed. Each one reproduces
// the leftmost-first, greedy-with-backtracking semantics of the original regex.
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
  // One character class, optionally after one whitespace, repeated; these do not match every
  // character, and the text between matches becomes pieces of its own (Split "Isolated").
  kLineBreak,                 // [\r\n]
  kDeepseekLlmLetters,        // \s?[A-Za-zµÀ-ÖØ-ö...]+ (an explicit list of letter ranges)
  kDeepseekLlmPunctuation,    // \s?[!-/:-~！-／：-～‘-‟　-。]+
  kTrailingWhitespace,        // \s+$
  kCjk,                       // [一-龥ࠀ-一가-퟿]+
  kDeepseekCoderLetters,      // \s?\p{L}+
  kDeepseekCoderPunctuation,  // \s?\p{P}+
  kNumbers,                   // \p{N}+
  kPunctuationAndSymbols,     // [\p{P}\$\+<=>\^~\|]+ (llama.cpp's "default")
  kFalconPunctuation,         // [\p{P}\$\+<=>\^~\|`]+
  kThreeAsciiDigits,          // [0-9][0-9][0-9]
};

// The regex a pattern implements, spelled as in tokenizer.json (JSON-unescaped).
std::string_view split_regex(SplitPattern pattern);

// Which of the known patterns a tokenizer.json Split regex is; nullopt when unknown.
std::optional<SplitPattern> recognize_split_regex(std::string_view regex);

// Byte ranges [begin, end) of the matches and of the text between them, in order, so the ranges
// tile `text` exactly (as Split with the Isolated behavior keeps both).
std::vector<std::pair<size_t, size_t>> split_by_pattern(std::string_view text,
                                                        SplitPattern pattern);

}  // namespace pagedserve::model::tokenizer
