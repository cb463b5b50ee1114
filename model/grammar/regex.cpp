// regex_to_gbnf: a regular expression (the subset common to Python's re and ECMAScript) as one
// GBNF rule. Groups become parenthesized GBNF, classes become GBNF classes over code points,
// quantifiers map one to one, except that an unbounded repetition of something able to match
// empty repeats only its non-empty parts (GBNF would be left-recursive); what GBNF cannot
// express (backreferences, lookaround, word boundaries, anchors inside the pattern) is refused
// with the column.
#include <cstdio>

#include "model/grammar/grammar.h"
#include "model/grammar/utf8.h"

namespace pagedserve::model::grammar {

namespace {

using detail::CodePointRange;
using Ranges = std::vector<CodePointRange>;

constexpr int kMaxRepetition = 100'000;
constexpr const char* kAnyCodePoint = "[\\x00-\\U0010FFFF]";

Ranges digit_ranges() { return {{'0', '9'}}; }
Ranges word_ranges() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
Ranges space_ranges() {  // ECMAScript's WhiteSpace and LineTerminator
  return detail::normalize({{'\t', '\r'},
                            {' ', ' '},
                            {0xA0, 0xA0},
                            {0x1680, 0x1680},
                            {0x2000, 0x200A},
                            {0x2028, 0x2029},
                            {0x202F, 0x202F},
                            {0x205F, 0x205F},
                            {0x3000, 0x3000},
                            {0xFEFF, 0xFEFF}});
}

std::string class_char(uint32_t cp) {
  if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))
    return std::string(1, static_cast<char>(cp));
  char buf[16];
  if (cp < 0x100) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
  } else if (cp < 0x10000) {
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08X", cp);
  }
  return buf;
}

std::string gbnf_class(const Ranges& ranges) {
  if (ranges.empty()) return "[^\\x00-\\U0010FFFF]";  // matches nothing
  std::string out = "[";
  for (const CodePointRange& r : ranges) {
    out += class_char(r.lo);
    if (r.hi != r.lo) out += "-" + class_char(r.hi);
  }
  return out + "]";
}

std::string literal(uint32_t cp) {
  std::string utf8;
  detail::append_utf8(utf8, cp);
  return gbnf_literal(utf8);
}

// A translated subexpression X. When X can match empty, `pieces` are expressions that cannot,
// with (pieces)* == X*: an unbounded repetition of X becomes (p1 | ... | pk)*, since X* in GBNF
// (R ::= X R | "") is left-recursive when X is nullable. Each piece is a disjoint part of
// `text`, so they never cost more than the text itself.
struct Fragment {
  std::string text;
  bool nullable = false;
  std::vector<std::string> pieces;
};

// Appends f's generators under repetition: its pieces when it can match empty, else f itself.
void add_generators(std::vector<std::string>& out, Fragment&& f) {
  if (!f.nullable) {
    out.push_back(std::move(f.text));
    return;
  }
  for (std::string& piece : f.pieces) out.push_back(std::move(piece));
}

std::string join_alternatives(const std::vector<std::string>& alternatives) {
  std::string out;
  for (const std::string& a : alternatives) out += (out.empty() ? "" : " | ") + a;
  return out;
}

// item{min_times,max_times} (max_times -1: unbounded).
Fragment repeat(Fragment item, int min_times, int max_times) {
  Fragment out;
  out.nullable = min_times == 0 || max_times == 0 || item.nullable;
  if (max_times < 0 && item.nullable) {
    // X{m,} == X* when X matches empty (its m copies can be empty), and
    // X* == (pieces)*; the pieces cannot match empty, so GBNF has no left recursion.
    out.text = item.pieces.empty() ? "\"\"" : "(" + join_alternatives(item.pieces) + ")*";
    out.pieces = std::move(item.pieces);
    return out;
  }
  // A bounded repetition of a nullable X is a chain of distinct optional rules in GBNF, so
  // it stays as written: not recursive, and the same language.
  if (min_times == 0 && max_times == 1) {
    out.text = "(" + item.text + ")?";
  } else if (min_times == 0 && max_times < 0) {
    out.text = "(" + item.text + ")*";
  } else if (min_times == 1 && max_times < 0) {
    out.text = "(" + item.text + ")+";
  } else {
    out.text = "(" + item.text + "){" + std::to_string(min_times) + "," +
               (max_times < 0 ? "" : std::to_string(max_times)) + "}";
  }
  // (X{m,n})* == X* when X{m,n} matches empty and n >= 1; X{0,0} matches only empty.
  if (out.nullable && max_times != 0) add_generators(out.pieces, std::move(item));
  return out;
}

class RegexTranslator {
 public:
  explicit RegexTranslator(std::string_view pattern) : p_(pattern) {}

  // The GBNF alternatives of the whole pattern; unanchored: each top-level alternative may be
  // surrounded by any text unless it starts with ^ / ends with $.
  std::string translate(bool anchored) {
    std::string out;
    for (;;) {
      bool starts = false, ends = false;
      if (peek() == '^') ++pos_, starts = true;
      std::string seq = parse_sequence(true, &ends).text;
      if (!anchored && !starts) seq = std::string(kAnyCodePoint) + "* " + seq;
      if (!anchored && !ends) seq += std::string(" ") + kAnyCodePoint + "*";
      out += seq.empty() ? "\"\"" : seq;
      if (at_end()) break;
      if (peek() == ')') fail(pos_, "unbalanced ')'");
      ++pos_;  // '|'
      out += " | ";
    }
    return out;
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& message) const {
    throw GrammarError("regex column " + std::to_string(at + 1) + ": " + message);
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0'; }

  Fragment parse_alternation();
  Fragment parse_sequence(bool top, bool* ends_anchored);
  Fragment parse_atom();
  Fragment parse_group();
  bool parse_quantifier(int& min_times, int& max_times);
  uint32_t parse_char();
  std::string parse_escape();
  std::string parse_class();
  // Escapes meaning a set (\d \w \s and negations): true and the ranges.
  bool shorthand(char c, Ranges& out) const;
  uint32_t parse_hex(size_t digits, size_t start);

  std::string_view p_;
  size_t pos_ = 0;
};

Fragment RegexTranslator::parse_alternation() {
  std::vector<Fragment> branches;
  for (;;) {
    branches.push_back(parse_sequence(false, nullptr));
    if (peek() != '|') break;
    ++pos_;
  }
  Fragment out{"(", false, {}};
  for (size_t i = 0; i < branches.size(); ++i) {
    const Fragment& b = branches[i];
    if (i > 0) out.text += " | ";
    out.text += b.text.empty() ? "\"\"" : b.text;
    out.nullable = out.nullable || b.nullable;
  }
  out.text += ")";
  // (A | B)* == (generators of A | generators of B)*.
  if (out.nullable)
    for (Fragment& b : branches) add_generators(out.pieces, std::move(b));
  return out;
}

Fragment RegexTranslator::parse_sequence(bool top, bool* ends_anchored) {
  Fragment out{"", true, {}};  // the empty sequence matches empty
  while (!at_end() && peek() != '|' && peek() != ')') {
    const size_t start = pos_;
    if (peek() == '$') {
      ++pos_;
      if (top && (at_end() || peek() == '|')) {
        *ends_anchored = true;
        break;
      }
      fail(start, "anchor '$' is only supported at the end of the pattern");
    }
    if (peek() == '^') fail(start, "anchor '^' is only supported at the start of the pattern");
    Fragment atom = parse_atom();
    int min_times = 1, max_times = 1;
    if (parse_quantifier(min_times, max_times)) {
      if (peek() == '?') ++pos_;  // lazy: the same language
      int more_min = 0, more_max = 0;
      const size_t extra = pos_;
      if (parse_quantifier(more_min, more_max))
        fail(extra, "nothing to repeat (possessive or doubled quantifier)");
      atom = repeat(std::move(atom), min_times, max_times);
    }
    if (!out.text.empty()) out.text += ' ';
    out.text += atom.text;
    // (X1 ... Xn)* == (X1 | ... | Xn)* when every Xi matches empty, so the pieces add up;
    // one element that cannot match empty makes the sequence a generator of its own.
    if (!atom.nullable) {
      out.nullable = false;
      out.pieces.clear();
    } else if (out.nullable) {
      add_generators(out.pieces, std::move(atom));
    }
  }
  return out;
}

bool RegexTranslator::parse_quantifier(int& min_times, int& max_times) {
  const size_t start = pos_;
  const char c = peek();
  if (c == '*' || c == '+' || c == '?') {
    ++pos_;
    min_times = c == '+' ? 1 : 0;
    max_times = c == '?' ? 1 : -1;
    return true;
  }
  if (c != '{') return false;
  size_t i = pos_ + 1;
  const auto number = [&](int& value) {
    const size_t from = i;
    long v = 0;
    while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
      v = v * 10 + (p_[i++] - '0');
      if (v > kMaxRepetition) fail(from, "repetition bound over " + std::to_string(kMaxRepetition));
    }
    value = static_cast<int>(v);
    return i > from;
  };
  if (i < p_.size() && p_[i] == ',') fail(start, "repetition '{,n}' is not portable; write {0,n}");
  if (!number(min_times)) return false;  // a literal '{'
  max_times = min_times;
  if (i < p_.size() && p_[i] == ',') {
    ++i;
    if (!number(max_times)) max_times = -1;
  }
  if (i >= p_.size() || p_[i] != '}') return false;
  pos_ = i + 1;
  if (max_times >= 0 && max_times < min_times)
    fail(start, "repetition {" + std::to_string(min_times) + "," + std::to_string(max_times) +
                    "}: minimum exceeds maximum");
  return true;
}

Fragment RegexTranslator::parse_atom() {
  const size_t start = pos_;
  const char c = peek();
  int lo = 0, hi = 0;
  if (c == '*' || c == '+' || c == '?' || parse_quantifier(lo, hi)) {
    fail(start, "nothing to repeat");
  }
  if (c == '(') return parse_group();
  if (c == '[') return {parse_class(), false, {}};
  if (c == '.') {
    ++pos_;
    return {"[^\\n]", false, {}};
  }
  if (c == '\\') return {parse_escape(), false, {}};
  return {literal(parse_char()), false, {}};
}

Fragment RegexTranslator::parse_group() {
  const size_t start = pos_++;
  if (peek() == '?') {
    const char k = peek(1);
    if (k == ':') {
      pos_ += 2;
    } else if (k == '=' || k == '!' || (k == '<' && (peek(2) == '=' || peek(2) == '!'))) {
      fail(start, "lookaround is not supported");
    } else if (k == 'P' && peek(2) == '=') {
      fail(start, "backreferences are not supported");
    } else if (k == '<' || (k == 'P' && peek(2) == '<')) {
      pos_ += k == 'P' ? 3 : 2;
      while (!at_end() && peek() != '>') ++pos_;
      if (at_end()) fail(start, "unterminated group name");
      ++pos_;
    } else {
      fail(start, "unsupported group '(?" + std::string(1, k) + "'");
    }
  }
  Fragment inner = parse_alternation();
  if (peek() != ')') fail(start, "unbalanced '('");
  ++pos_;
  return inner;
}

uint32_t RegexTranslator::parse_hex(size_t digits, size_t start) {
  uint32_t v = 0;
  for (size_t k = 0; k < digits; ++k) {
    const char h = peek();
    const int d = (h >= '0' && h <= '9')   ? h - '0'
                  : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                           : -1;
    if (d < 0) fail(start, "bad hex escape");
    v = v * 16 + static_cast<uint32_t>(d);
    ++pos_;
  }
  if (v >= 0xD800 && v <= 0xDFFF) fail(start, "surrogate code point");
  return v;
}

// One literal code point, escaped or not (the caller handled set escapes).
uint32_t RegexTranslator::parse_char() {
  const size_t start = pos_;
  if (peek() != '\\') {
    uint32_t cp = 0;
    const int len = detail::decode_utf8(p_, pos_, cp);
    if (len == 0) fail(start, "invalid UTF-8");
    pos_ += len;
    return cp;
  }
  ++pos_;
  if (at_end()) fail(start, "pattern ends in '\\'");
  const char e = p_[pos_++];
  switch (e) {
    case 'n':
      return '\n';
    case 't':
      return '\t';
    case 'r':
      return '\r';
    case 'f':
      return '\f';
    case 'v':
      return '\v';
    case '0':
      return 0;
    case 'x':
      return parse_hex(2, start);
    case 'u':
      return parse_hex(4, start);
    case 'b':
      fail(start, "word boundary '\\b' is not supported");
    case 'B':
      fail(start, "'\\B' is not supported");
    default:
      break;
  }
  if (e >= '1' && e <= '9') fail(start, "backreferences are not supported");
  if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || static_cast<uint8_t>(e) >= 0x80)
    fail(start, std::string("unsupported escape '\\") + e + "'");
  return static_cast<uint8_t>(e);  // escaped punctuation: itself
}

bool RegexTranslator::shorthand(char c, Ranges& out) const {
  switch (c) {
    case 'd':
      out = digit_ranges();
      return true;
    case 'w':
      out = word_ranges();
      return true;
    case 's':
      out = space_ranges();
      return true;
    case 'D':
      out = detail::complement(digit_ranges());
      return true;
    case 'W':
      out = detail::complement(word_ranges());
      return true;
    case 'S':
      out = detail::complement(space_ranges());
      return true;
    default:
      return false;
  }
}

std::string RegexTranslator::parse_escape() {
  Ranges set;
  if (shorthand(peek(1), set)) {
    pos_ += 2;
    return gbnf_class(set);
  }
  return literal(parse_char());
}

std::string RegexTranslator::parse_class() {
  const size_t start = pos_++;
  const bool negated = peek() == '^';
  if (negated) ++pos_;
  if (peek() == ']') fail(pos_, "']' at the start of a class is ambiguous; escape it");
  Ranges ranges;
  while (peek() != ']') {
    if (at_end()) fail(start, "unterminated character class");
    const size_t item = pos_;
    Ranges set;
    if (peek() == '\\' && shorthand(peek(1), set)) {
      pos_ += 2;
      ranges.insert(ranges.end(), set.begin(), set.end());
      if (peek() == '-' && peek(1) != ']') fail(item, "a range cannot start at a class escape");
      continue;
    }
    const bool backspace = peek() == '\\' && peek(1) == 'b';
    if (backspace) pos_ += 2;
    const uint32_t lo = backspace ? 0x08 : parse_char();
    uint32_t hi = lo;
    if (peek() == '-' && peek(1) != ']' && pos_ + 1 < p_.size()) {
      ++pos_;
      if (peek() == '\\' && shorthand(peek(1), set))
        fail(item, "a range cannot end at a class escape");
      hi = parse_char();
      if (hi < lo) fail(item, "character range is out of order");
    }
    ranges.push_back({lo, hi});
  }
  ++pos_;
  ranges = detail::normalize(std::move(ranges));
  return gbnf_class(negated ? detail::complement(ranges) : ranges);
}

bool is_rule_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  return true;
}

}  // namespace

std::string regex_to_gbnf(std::string_view pattern, std::string_view rule_prefix) {
  return regex_to_gbnf(pattern, rule_prefix, true);
}

std::string regex_to_gbnf(std::string_view pattern, std::string_view rule_prefix, bool anchored) {
  if (!is_rule_name(rule_prefix))
    throw GrammarError("regex: rule name '" + std::string(rule_prefix) + "' is not a GBNF name");
  if (pattern.size() > kMaxGrammarBytes) throw GrammarError("regex: pattern too long");
  return std::string(rule_prefix) + " ::= " + RegexTranslator(pattern).translate(anchored) + "\n";
}

}  // namespace pagedserve::model::grammar
