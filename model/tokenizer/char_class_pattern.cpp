// CharClassPattern: a small parser for the one-class regex subset and its leftmost-first search.
#include "model/tokenizer/char_class_pattern.h"

#include <stdexcept>
#include <string>

#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::model::tokenizer {
namespace {

[[noreturn]] void unsupported(std::string_view regex, std::string_view what) {
  throw std::invalid_argument("CharClassPattern: " + std::string(what) + " in regex " +
                              std::string(regex));
}

}  // namespace

CharClassPattern CharClassPattern::parse(std::string_view regex) {
  CharClassPattern pattern;
  std::string_view rest = regex;
  if (rest.starts_with(R"(\s?)")) {
    pattern.optional_leading_whitespace_ = true;
    rest.remove_prefix(3);
  }
  // The atom: a bracketed class, \p{X} or \s.
  size_t atom_end = 0;
  if (rest.starts_with('[')) {
    atom_end = rest.find(']', 1);
    while (atom_end != std::string_view::npos && rest[atom_end - 1] == '\\') {
      atom_end = rest.find(']', atom_end + 1);
    }
    if (atom_end == std::string_view::npos) unsupported(regex, "unterminated class");
    ++atom_end;
  } else if (rest.starts_with(R"(\p{)")) {
    atom_end = rest.find('}') + 1;
  } else if (rest.starts_with(R"(\s)")) {
    atom_end = 2;
  } else {
    unsupported(regex, "no character class");
  }
  const std::string_view atom = rest.substr(0, atom_end);
  const std::string_view items = atom.starts_with('[') ? atom.substr(1, atom.size() - 2) : atom;
  for (size_t pos = 0; pos < items.size();) {
    char32_t cp = 0;
    if (items[pos] == '\\' && pos + 1 < items.size()) {
      const char escaped = items[pos + 1];
      if (escaped == 'p') {
        const size_t close = items.find('}', pos);
        const std::string_view name = items.substr(pos + 3, close - pos - 3);
        if (name == "L") {
          pattern.letters_ = true;
        } else if (name == "N") {
          pattern.numbers_ = true;
        } else if (name == "P") {
          pattern.punctuation_ = true;
        } else {
          unsupported(regex, "unknown property");
        }
        pos = close + 1;
        continue;
      }
      if (escaped == 's') {
        pattern.whitespace_ = true;
        pos += 2;
        continue;
      }
      cp = escaped == 'r' ? U'\r' : escaped == 'n' ? U'\n' : static_cast<char32_t>(escaped);
      pos += 2;
    } else {
      const unicode::DecodedChar c = unicode::decode_utf8(items, pos);
      cp = c.cp;
      pos += c.num_bytes;
    }
    Range range{cp, cp};
    if (pos + 1 < items.size() && items[pos] == '-') {
      const unicode::DecodedChar last = unicode::decode_utf8(items, pos + 1);
      range.last = last.cp;
      pos += 1 + last.num_bytes;
    }
    pattern.ranges_.push_back(range);
  }
  rest.remove_prefix(atom_end);
  // The same atom written out again (`[0-9][0-9][0-9]`) counts repetitions.
  size_t count = 1;
  while (rest.starts_with(atom)) {
    ++count;
    rest.remove_prefix(atom.size());
  }
  pattern.min_count_ = count;
  pattern.max_count_ = count;
  if (rest.starts_with('+')) {
    pattern.max_count_ = 0;
    rest.remove_prefix(1);
  }
  if (rest == "$") {
    pattern.at_end_ = true;
    rest.remove_prefix(1);
  }
  if (!rest.empty()) unsupported(regex, "trailing syntax");
  return pattern;
}

bool CharClassPattern::contains(char32_t cp) const {
  for (const Range& range : ranges_) {
    if (cp >= range.first && cp <= range.last) return true;
  }
  if (letters_ && unicode::is_letter(cp)) return true;
  if (numbers_ && unicode::is_number(cp)) return true;
  if (punctuation_ && unicode::is_punctuation(cp)) return true;
  return whitespace_ && unicode::is_whitespace(cp);
}

size_t CharClassPattern::class_run(const std::vector<char32_t>& chars, size_t i) const {
  size_t end = i;
  while (end < chars.size() && (max_count_ == 0 || end - i < max_count_) && contains(chars[end])) {
    ++end;
  }
  return end - i;
}

size_t CharClassPattern::match_at(const std::vector<char32_t>& chars, size_t i) const {
  // \s? is greedy: with the whitespace first, then backing off to start the class at i.
  if (optional_leading_whitespace_ && unicode::is_whitespace(chars[i]) &&
      class_run(chars, i + 1) >= min_count_) {
    return i + 1 + class_run(chars, i + 1);
  }
  const size_t run = class_run(chars, i);
  return run >= min_count_ ? i + run : 0;
}

std::vector<std::pair<size_t, size_t>> CharClassPattern::split(std::string_view text) const {
  std::vector<char32_t> chars;
  std::vector<size_t> offsets;  // byte offset of each code point, plus the end
  for (size_t pos = 0; pos < text.size();) {
    const unicode::DecodedChar c = unicode::decode_utf8(text, pos);
    chars.push_back(c.cp);
    offsets.push_back(pos);
    pos += c.num_bytes;
  }
  offsets.push_back(text.size());

  std::vector<std::pair<size_t, size_t>> pieces;
  size_t piece_start = 0;  // code point index where the unmatched text begins
  const auto emit = [&](size_t begin, size_t end) {
    if (end > begin) pieces.emplace_back(offsets[begin], offsets[end]);
  };
  if (at_end_) {
    // Only the run that reaches the end can match; its leftmost start is where it begins.
    size_t start = chars.size();
    while (start > 0 && contains(chars[start - 1])) --start;
    if (chars.size() - start >= min_count_) {
      emit(0, start);
      emit(start, chars.size());
    } else {
      emit(0, chars.size());
    }
    return pieces;
  }
  for (size_t i = 0; i < chars.size();) {
    const size_t end = match_at(chars, i);
    if (end == 0) {
      ++i;
      continue;
    }
    emit(piece_start, i);
    emit(i, end);
    piece_start = i = end;
  }
  emit(piece_start, chars.size());
  return pieces;
}

}  // namespace pagedserve::model::tokenizer
