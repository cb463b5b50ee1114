// The GPT-2 / Llama 3 / Qwen2 pre-tokenizer regexes as direct scanners over code points. Each
// alternative is tried in the regex's order at the current position; the first that matches
// wins (leftmost-first), and greedy runs back off exactly as the regex engine would. The
// one-class patterns (DeepSeek, Falcon, llama.cpp's default) are parsed from their regex text
// into a CharClassPattern (char_class_pattern.h) and searched for leftmost matches.
#include "model/tokenizer/split_patterns.h"

#include <array>

#include "model/tokenizer/char_class_pattern.h"
#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::model::tokenizer {
namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The one-class patterns, in SplitPattern order from kLineBreak. Non-ASCII characters are
// written as themselves (U+3000 and U+D7FF, invisible ones, as escapes).
constexpr std::array<std::string_view, 11> kCharClassRegexes = {
    R"([\r\n])",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-"
    "ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1F7Dᾀ-ᾴᾶ-ᾼ\u1FBEῂ-ῄῆ-ῌῐ-\u1FD3ῖ-\u1FDBῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-"
    "ℝℤ\u2126ℨ\u212A-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-"
    "𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟\u3000-。]+",
    R"(\s+$)",
    "[一-龥ࠀ-一가-\uD7FF]+",
    R"(\s?\p{L}+)",
    R"(\s?\p{P}+)",
    R"(\p{N}+)",
    R"([\p{P}\$\+<=>\^~\|]+)",
    R"([\p{P}\$\+<=>\^~\|`]+)",
    R"([0-9][0-9][0-9])",
};
constexpr size_t kFirstCharClassPattern = static_cast<size_t>(SplitPattern::kLineBreak);

const CharClassPattern& char_class_pattern(SplitPattern pattern) {
  static const std::array<CharClassPattern, kCharClassRegexes.size()> parsed = [] {
    std::array<CharClassPattern, kCharClassRegexes.size()> out;
    for (size_t i = 0; i < out.size(); ++i) out[i] = CharClassPattern::parse(kCharClassRegexes[i]);
    return out;
  }();
  return parsed[static_cast<size_t>(pattern) - kFirstCharClassPattern];
}

struct CodePoint {
  char32_t cp;
  unicode::Category category;
  bool whitespace;
  size_t byte_offset;
};

class Scanner {
 public:
  Scanner(std::string_view text, SplitPattern pattern) : pattern_(pattern) {
    for (size_t pos = 0; pos < text.size();) {
      const unicode::DecodedChar c = unicode::decode_utf8(text, pos);
      chars_.push_back({c.cp, unicode::category(c.cp), unicode::is_whitespace(c.cp), pos});
      pos += c.num_bytes;
    }
    end_offset_ = text.size();
  }

  std::vector<std::pair<size_t, size_t>> run() {
    std::vector<std::pair<size_t, size_t>> pieces;
    for (size_t i = 0; i < chars_.size();) {
      size_t end = match_at(i);
      if (end <= i) end = i + 1;  // unreachable for these patterns; never loop forever
      pieces.emplace_back(chars_[i].byte_offset, offset(end));
      i = end;
    }
    return pieces;
  }

 private:
  size_t offset(size_t index) const {
    return index < chars_.size() ? chars_[index].byte_offset : end_offset_;
  }
  bool is_letter(size_t i) const {
    return i < chars_.size() && chars_[i].category == unicode::kLetter;
  }
  bool is_number(size_t i) const {
    return i < chars_.size() && chars_[i].category == unicode::kNumber;
  }
  bool is_space(size_t i) const { return i < chars_.size() && chars_[i].whitespace; }
  bool is_char(size_t i, char32_t c) const { return i < chars_.size() && chars_[i].cp == c; }
  bool is_crlf(size_t i) const { return is_char(i, '\r') || is_char(i, '\n'); }
  // [^\s\p{L}\p{N}]
  bool is_other(size_t i) const {
    return i < chars_.size() && !chars_[i].whitespace && chars_[i].category == unicode::kOther;
  }
  char32_t lower(size_t i) const {
    const char32_t c = chars_[i].cp;
    return (pattern_ != SplitPattern::kGpt2 && c >= 'A' && c <= 'Z') ? c + 32 : c;
  }

  size_t run_while(size_t i, bool (Scanner::*pred)(size_t) const) const {
    while ((this->*pred)(i)) ++i;
    return i;
  }

  // 's|'t|'re|'ve|'m|'ll|'d (case-insensitive for the Llama 3 family); returns the end or 0.
  size_t contraction(size_t i) const {
    if (!is_char(i, '\'') || i + 1 >= chars_.size()) return 0;
    const char32_t a = lower(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 >= chars_.size()) return 0;
    const char32_t b = lower(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
  }

  size_t match_at(size_t i) const {
    if (size_t end = contraction(i)) return end;
    return pattern_ == SplitPattern::kGpt2 ? match_gpt2(i) : match_llama3(i);
  }

  // \s+(?!\S)|\s+ : a whitespace run leaves its last space to the word after it.
  size_t trailing_whitespace(size_t i) const {
    const size_t run_end = run_while(i, &Scanner::is_space);
    if (run_end == i) return 0;
    if (run_end == chars_.size() || run_end - i == 1) return run_end;
    return run_end - 1;
  }

  size_t match_gpt2(size_t i) const {
    const size_t after_space = is_char(i, ' ') ? i + 1 : i;
    if (is_letter(after_space)) return run_while(after_space, &Scanner::is_letter);
    if (is_number(after_space)) return run_while(after_space, &Scanner::is_number);
    if (is_other(after_space)) return run_while(after_space, &Scanner::is_other);
    return trailing_whitespace(i);
  }

  size_t match_llama3(size_t i) const {
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (is_letter(i)) return run_while(i, &Scanner::is_letter);
    if (i < chars_.size() && !is_crlf(i) && !is_number(i) && is_letter(i + 1)) {
      return run_while(i + 1, &Scanner::is_letter);
    }
    // \p{N}{1,3} or \p{N}
    if (is_number(i)) {
      const size_t max_digits = pattern_ == SplitPattern::kQwen2 ? 1 : 3;
      size_t end = i;
      while (end - i < max_digits && is_number(end)) ++end;
      return end;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    const size_t after_space = is_char(i, ' ') ? i + 1 : i;
    if (is_other(after_space)) {
      return run_while(run_while(after_space, &Scanner::is_other), &Scanner::is_crlf);
    }
    // \s*[\r\n]+ : ends after the last line break of the whitespace run.
    const size_t run_end = run_while(i, &Scanner::is_space);
    for (size_t k = run_end; k > i; --k) {
      if (is_crlf(k - 1)) return k;
    }
    return trailing_whitespace(i);
  }

  SplitPattern pattern_;
  std::vector<CodePoint> chars_;
  size_t end_offset_ = 0;
};

}  // namespace

std::string_view split_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kGpt2:
      return kGpt2Regex;
    case SplitPattern::kLlama3:
      return kLlama3Regex;
    case SplitPattern::kQwen2:
      return kQwen2Regex;
    default:
      return kCharClassRegexes[static_cast<size_t>(pattern) - kFirstCharClassPattern];
  }
}

std::optional<SplitPattern> recognize_split_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  if (regex == kQwen2Regex) return SplitPattern::kQwen2;
  for (size_t i = 0; i < kCharClassRegexes.size(); ++i) {
    if (regex == kCharClassRegexes[i]) return static_cast<SplitPattern>(kFirstCharClassPattern + i);
  }
  return std::nullopt;
}

std::vector<std::pair<size_t, size_t>> split_by_pattern(std::string_view text,
                                                        SplitPattern pattern) {
  if (static_cast<size_t>(pattern) < kFirstCharClassPattern) return Scanner(text, pattern).run();
  return char_class_pattern(pattern).split(text);
}

}  // namespace pagedserve::model::tokenizer
