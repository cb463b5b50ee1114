// parse_gbnf: GBNF text (llama.cpp's grammars/README.md) -> Grammar, through GrammarBuilder.
// Also the small writers of GBNF text: gbnf_literal and choice_to_gbnf.
#include <cstdio>

#include "model/grammar/grammar_ir.h"

namespace pagedserve::model::grammar {

namespace {

using detail::CodePointRange;
using detail::Sequence;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  std::shared_ptr<const Grammar> parse(std::string_view root) {
    if (size_t bad = detail::find_invalid_utf8(text_); bad != std::string_view::npos)
      fail(bad, "invalid UTF-8");
    skip_space(true);
    while (pos_ < text_.size()) {
      parse_rule();
      skip_space(true);
    }
    return builder_.finish(root, [this](size_t at, const std::string& msg) { fail(at, msg); });
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& message) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw GrammarError("grammar line " + std::to_string(line) + ", column " +
                       std::to_string(column) + ": " + message);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (!at_end() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(text_[pos_])) ++pos_;
    if (pos_ == start) fail(start, "expected a rule name");
    return text_.substr(start, pos_ - start);
  }

  void parse_rule() {
    const size_t start = pos_;
    const std::string name(parse_name());
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") fail(pos_, "expected '::='");
    pos_ += 3;
    skip_space(true);
    std::vector<Sequence> alternatives = parse_alternatives(name, false);
    if (!builder_.define(name, std::move(alternatives)))
      fail(start, "rule '" + name + "' is defined twice");
    skip_space(false);
    if (!at_end() && peek() != '\n' && peek() != '\r')
      fail(pos_, std::string("unexpected '") + peek() + "'");
  }

  std::vector<Sequence> parse_alternatives(const std::string& rule, bool nested) {
    std::vector<Sequence> alternatives;
    alternatives.push_back(parse_sequence(rule, nested));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alternatives.push_back(parse_sequence(rule, nested));
    }
    return alternatives;
  }

  Sequence parse_sequence(const std::string& rule, bool nested);
  void parse_item(Sequence& out, const std::string& rule);
  void parse_repetition(Sequence& out, size_t item_start, const std::string& rule);
  // One code point, escaped or raw. Surrogates only as class range ends (they match nothing).
  uint32_t parse_char(bool in_class = false);
  int parse_int();

  std::string_view text_;
  size_t pos_ = 0;
  detail::GrammarBuilder builder_;
};

Sequence GbnfParser::parse_sequence(const std::string& rule, bool nested) {
  Sequence out;
  size_t item_start = std::string::npos;  // where the last item's elements begin in `out`
  while (!at_end()) {
    const char c = peek();
    if (c == '"' || c == '[' || c == '.' || c == '(' || is_name_char(c)) {
      item_start = out.size();
      parse_item(out, rule);
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (item_start == std::string::npos)
        fail(pos_, std::string("expected an item before '") + c + "'");
      parse_repetition(out, item_start, rule);
      item_start = std::string::npos;
    } else {
      break;
    }
    skip_space(nested);
  }
  return out;
}

void GbnfParser::parse_item(Sequence& out, const std::string& rule) {
  const size_t start = pos_;
  const char c = peek();
  if (c == '"') {
    ++pos_;
    std::string bytes;
    while (peek() != '"') {
      if (at_end()) fail(start, "unterminated string literal");
      detail::append_utf8(bytes, parse_char());
    }
    ++pos_;
    builder_.append_literal(out, bytes);
  } else if (c == '[') {
    ++pos_;
    const bool negated = peek() == '^';
    if (negated) ++pos_;
    std::vector<CodePointRange> ranges;
    while (peek() != ']') {
      if (at_end()) fail(start, "unterminated character class");
      const size_t range_start = pos_;
      const uint32_t lo = parse_char(true);
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char(true);
        if (hi < lo) fail(range_start, "character range is out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    ranges = detail::normalize(std::move(ranges));
    if (negated) ranges = detail::complement(ranges);
    builder_.append_class(out, std::move(ranges), rule);
  } else if (c == '.') {
    ++pos_;
    builder_.append_class(out, {{0, detail::kMaxCodePoint}}, rule);
  } else if (c == '(') {
    ++pos_;
    skip_space(true);
    std::vector<Sequence> alternatives = parse_alternatives(rule, true);
    if (peek() != ')') fail(pos_, at_end() ? "expected ')' before the end" : "expected ')'");
    ++pos_;
    if (alternatives.size() == 1) {
      out.insert(out.end(), alternatives[0].begin(), alternatives[0].end());
    } else {
      out.push_back({detail::ElementKind::kRule, builder_.helper(rule, std::move(alternatives))});
    }
  } else {
    const std::string_view name = parse_name();
    out.push_back({detail::ElementKind::kRule, builder_.reference(name, start)});
  }
}

void GbnfParser::parse_repetition(Sequence& out, size_t item_start, const std::string& rule) {
  Sequence item(out.begin() + static_cast<std::ptrdiff_t>(item_start), out.end());
  out.resize(item_start);
  const char c = text_[pos_++];
  int min_times = 0, max_times = -1;
  if (c == '+') {
    min_times = 1;
  } else if (c == '?') {
    max_times = 1;
  } else if (c == '{') {
    const size_t start = pos_ - 1;
    skip_space(true);
    min_times = max_times = parse_int();
    skip_space(true);
    if (peek() == ',') {
      ++pos_;
      skip_space(true);
      max_times = (peek() >= '0' && peek() <= '9') ? parse_int() : -1;
      skip_space(true);
    }
    if (peek() != '}') fail(pos_, "expected '}'");
    ++pos_;
    if (max_times >= 0 && max_times < min_times)
      fail(start, "repetition {" + std::to_string(min_times) + "," + std::to_string(max_times) +
                      "}: minimum exceeds maximum");
  }
  builder_.append_repetition(out, std::move(item), min_times, max_times, rule);
}

int GbnfParser::parse_int() {
  constexpr int kMaxRepetition = 100'000;
  const size_t start = pos_;
  long value = 0;
  while (peek() >= '0' && peek() <= '9') {
    value = value * 10 + (peek() - '0');
    if (value > kMaxRepetition)
      fail(start, "repetition bound over " + std::to_string(kMaxRepetition));
    ++pos_;
  }
  if (pos_ == start) fail(pos_, "expected a number");
  return static_cast<int>(value);
}

uint32_t GbnfParser::parse_char(bool in_class) {
  const size_t start = pos_;
  if (peek() != '\\') {
    uint32_t cp = 0;
    pos_ += detail::decode_utf8(text_, pos_, cp);  // text already checked valid
    return cp;
  }
  ++pos_;
  if (at_end()) fail(start, "unterminated escape");
  const char e = text_[pos_++];
  int digits = 0;
  switch (e) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case '\\':
    case '"':
    case '[':
    case ']':
      return static_cast<uint8_t>(e);
    case 'x':
      digits = 2;
      break;
    case 'u':
      digits = 4;
      break;
    case 'U':
      digits = 8;
      break;
    default:
      fail(start, std::string("unknown escape '\\") + e + "'");
  }
  uint32_t cp = 0;
  for (int i = 0; i < digits; ++i) {
    const int v = hex_value(peek());
    if (v < 0)
      fail(start,
           std::string("escape '\\") + e + "' needs " + std::to_string(digits) + " hex digits");
    cp = cp * 16 + static_cast<uint32_t>(v);
    ++pos_;
  }
  if (cp > detail::kMaxCodePoint) fail(start, "code point over U+10FFFF");
  if (cp >= 0xD800 && cp <= 0xDFFF && !in_class)
    fail(start, "surrogate code point (not valid UTF-8)");
  return cp;
}

}  // namespace

std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root) {
  if (text.size() > kMaxGrammarBytes)
    throw GrammarError("grammar of " + std::to_string(text.size()) +
                       " bytes is over the limit of " + std::to_string(kMaxGrammarBytes));
  return GbnfParser(text).parse(root);
}

std::string gbnf_literal(std::string_view text) {
  if (detail::find_invalid_utf8(text) != std::string_view::npos)
    throw GrammarError("literal text is not valid UTF-8");
  std::string out = "\"";
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (b < 0x20 || b == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", b);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string choice_to_gbnf(std::span<const std::string> choices) {
  if (choices.empty()) throw GrammarError("choice: the list of choices is empty");
  std::string out = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += " | ";
    out += gbnf_literal(choices[i]);
  }
  return out + "\n";
}

}  // namespace pagedserve::model::grammar
