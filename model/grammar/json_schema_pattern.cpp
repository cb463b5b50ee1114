// A JSON Schema `pattern` as an anchored regex over the characters a JSON string may hold
// unescaped, for regex_to_gbnf.
//
// `pattern` matches anywhere in the string (unanchored by spec): an alternative without `^`
// gets a leading "any characters", one without `$` a trailing one. The pattern's characters are
// matched against the string's content, but the grammar produces the JSON text, where `"`, `\`
// and control characters are escaped. So the regex is narrowed to characters that need no
// escaping: `.` and negated classes exclude them, positive classes drop them, `\s` becomes the
// space alone; a pattern that requires one of them (a literal `"`, `\\`, `\n`) is refused.
// The grammar thus accepts a subset of the valid strings: those whose content needs no escapes.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "model/grammar/json_schema_converter.h"

namespace pagedserve::model::grammar::json_schema_detail {
namespace {

const std::string kSafeChar = R"([^"\\\x00-\x1f])";

struct PatternWriter {
  std::string_view pattern;
  std::string pointer;
  size_t pos = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw GrammarError("json schema at " + pointer + ": pattern column " + std::to_string(pos + 1) +
                       ": " + what);
  }

  static bool is_safe(char32_t c) { return c >= 0x20 && c != '"' && c != '\\'; }

  static std::string class_char(char32_t c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      return std::string(1, static_cast<char>(c));
    }
    char buffer[16];
    std::snprintf(buffer, sizeof buffer, c < 0x80 ? "\\x%02X" : "\\u%04X",
                  static_cast<unsigned>(c));
    if (c <= 0xFFFF) return buffer;
    std::string utf8;  // beyond the BMP: the character itself
    utf8 += static_cast<char>(0xF0 | (c >> 18));
    utf8 += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    utf8 += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    utf8 += static_cast<char>(0x80 | (c & 0x3F));
    return utf8;
  }

  char32_t hex_escape(size_t count) {
    if (pos + count > pattern.size() ||
        !std::all_of(pattern.begin() + pos, pattern.begin() + pos + count,
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
      fail("bad hex escape");
    }
    char32_t value = std::stoul(std::string(pattern.substr(pos, count)), nullptr, 16);
    pos += count;
    return value;
  }

  char32_t utf8_char() {
    auto byte = static_cast<unsigned char>(pattern[pos]);
    int length = byte < 0x80 ? 1 : byte < 0xE0 ? 2 : byte < 0xF0 ? 3 : 4;
    char32_t cp = length == 1 ? byte : byte & (0x7F >> length);
    for (int k = 1; k < length && pos + k < pattern.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(pattern[pos + k]) & 0x3F);
    }
    pos += length;
    return cp;
  }

  // One class member after '\\' (pos on the escaped letter): its ranges.
  std::vector<std::pair<char32_t, char32_t>> class_escape() {
    char e = pattern[pos++];
    switch (e) {
      case 'd':
        return {{'0', '9'}};
      case 'w':
        return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
      case 's':
        return {{' ', ' '}, {'\t', '\r'}};
      case 'n':
        return {{'\n', '\n'}};
      case 't':
        return {{'\t', '\t'}};
      case 'r':
        return {{'\r', '\r'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case 'b':
        return {{'\b', '\b'}};
      case '0':
        return {{0, 0}};
      case 'x': {
        char32_t c = hex_escape(2);
        return {{c, c}};
      }
      case 'u': {
        char32_t c = hex_escape(4);
        return {{c, c}};
      }
      case 'D':
      case 'W':
      case 'S':
        fail(std::string("\\") + e + " inside a class");
      default:
        return {{static_cast<unsigned char>(e), static_cast<unsigned char>(e)}};
    }
  }

  // pos just after '['; returns the rewritten class, pos after its ']'.
  std::string char_class() {
    bool negated = pos < pattern.size() && pattern[pos] == '^';
    if (negated) ++pos;
    std::vector<std::pair<char32_t, char32_t>> ranges;
    while (true) {
      if (pos >= pattern.size()) fail("unterminated class");
      if (pattern[pos] == ']') break;
      std::vector<std::pair<char32_t, char32_t>> item;
      if (pattern[pos] == '\\' && ++pos < pattern.size()) {
        item = class_escape();
      } else {
        char32_t c = utf8_char();
        item = {{c, c}};
      }
      if (item.size() == 1 && item[0].first == item[0].second && pos + 1 < pattern.size() &&
          pattern[pos] == '-' && pattern[pos + 1] != ']') {
        ++pos;
        char32_t high =
            pattern[pos] == '\\' && ++pos < pattern.size() ? class_escape()[0].first : utf8_char();
        if (high < item[0].first) fail("class range out of order");
        item[0].second = high;
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    ++pos;
    return negated ? negated_class(ranges) : positive_class(ranges);
  }

  std::string negated_class(const std::vector<std::pair<char32_t, char32_t>>& ranges) {
    std::string out = "[^";
    for (auto [low, high] : ranges) {
      out += class_char(low) + (low == high ? "" : "-" + class_char(high));
    }
    return out + R"("\\\x00-\x1f])";
  }

  std::string positive_class(const std::vector<std::pair<char32_t, char32_t>>& ranges) {
    std::string out;
    for (auto [low, high] : ranges) {  // each range minus \x00-\x1f, '"' and '\'
      for (auto [cut_low, cut_high] :
           {std::pair<char32_t, char32_t>{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}) {
        char32_t a = std::max(low, cut_low), b = std::min(high, cut_high);
        if (a <= b) out += class_char(a) + (a == b ? "" : "-" + class_char(b));
      }
    }
    if (out.empty()) fail("class matches only characters that JSON escapes");
    return "[" + out + "]";
  }

  // An escape outside a class (pos on the escaped letter).
  std::string escape() {
    char e = pattern[pos];
    switch (e) {
      case 's':
        ++pos;
        return " ";
      case 'D':
        ++pos;
        return R"([^0-9"\\\x00-\x1f])";
      case 'W':
        ++pos;
        return R"([^0-9A-Za-z_"\\\x00-\x1f])";
      case 'S':
        ++pos;
        return R"([^ "\\\x00-\x1f])";
      case 'x':
      case 'u': {
        ++pos;
        char32_t c = hex_escape(e == 'x' ? 2 : 4);
        if (!is_safe(c)) fail("a character that JSON escapes");
        return "[" + class_char(c) + "]";
      }
      case '\\':
      case '"':
      case 'n':
      case 'r':
      case 't':
      case 'f':
      case 'v':
      case '0':
        fail("a character that JSON escapes");
      default:
        ++pos;
        return std::string("\\") + e;
    }
  }

  // The body of one top-level alternative (pos..end), rewritten.
  std::string body(size_t end) {
    std::string out;
    while (pos < end) {
      char c = pattern[pos];
      if (c == '\\') {
        if (++pos >= end) fail("trailing backslash");
        out += escape();
      } else if (c == '[') {
        ++pos;
        out += char_class();
      } else if (c == '.') {
        ++pos;
        out += kSafeChar;
      } else if (c == '"') {
        fail("a character that JSON escapes");
      } else if (c == '^' || c == '$') {
        fail("anchor inside the pattern (only at the start or end of an alternative)");
      } else {
        out += c, ++pos;
      }
    }
    return out;
  }
};

// The ends of the top-level alternatives of `pattern` (positions of '|' and the size).
std::vector<size_t> alternative_ends(std::string_view pattern) {
  std::vector<size_t> ends;
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      ends.push_back(i);
    }
  }
  ends.push_back(pattern.size());
  return ends;
}

}  // namespace

std::string json_content_regex(std::string_view pattern, const std::string& pointer) {
  PatternWriter writer{pattern, pointer};
  std::vector<std::string> alternatives;
  for (size_t end : alternative_ends(pattern)) {
    bool anchored_start = writer.pos < end && pattern[writer.pos] == '^';
    if (anchored_start) ++writer.pos;
    size_t backslashes = 0;
    for (size_t i = end - 1; end > writer.pos && i > writer.pos && pattern[i - 1] == '\\'; --i) {
      ++backslashes;
    }
    bool anchored_end = end > writer.pos && pattern[end - 1] == '$' && backslashes % 2 == 0;
    std::string body = writer.body(anchored_end ? end - 1 : end);
    writer.pos = end + 1;
    std::string any = kSafeChar + "*";
    alternatives.push_back((anchored_start ? "" : any) + (body.empty() ? "" : "(?:" + body + ")") +
                           (anchored_end ? "" : any));
  }
  if (alternatives.size() == 1) return alternatives[0];
  std::string out = "(?:";
  for (size_t i = 0; i < alternatives.size(); ++i) out += (i ? "|" : "") + alternatives[i];
  return out + ")";
}

}  // namespace pagedserve::model::grammar::json_schema_detail
