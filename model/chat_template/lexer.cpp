// Lexer for the Jinja subset; see lexer.h. The whitespace rules follow jinja2's lexer:
//  - `{%-`/`{{-`/`{#-` strip all whitespace before the tag; `-%}`/`-}}`/`-#}` strip all
//    whitespace after it.
//  - trim_blocks: one "\n" right after `%}` or `#}` is dropped (not after `}}`; `+%}` opts out).
//  - lstrip_blocks: spaces and tabs between a line start and `{%`/`{#` are dropped (`{%+`
//    opts out). A "line start" is a newline in the preceding text, or the template start, or
//    the end of a tag whose own whitespace removal ended on a newline.
#include "model/chat_template/lexer.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "model/chat_template/chat_template_error.h"

namespace pagedserve::model::chat {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// Longest first so "//" wins over "/".
constexpr const char* kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                      "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                      "]",  "{",  "}",  ",",  ".",  ":",  "|"};

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& options) : options_(options) {
    // jinja2 normalises every newline to "\n" and drops a single trailing newline
    // (keep_trailing_newline=False), before anything else sees the source.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos));
        break;
      }
      const char kind = src_[tag + 1];
      const char marker = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      std::string text = src_.substr(pos, tag - pos);
      if (marker == '-') {
        text.erase(std::find_if_not(text.rbegin(), text.rend(), is_space).base(), text.end());
      } else if (marker != '+' && kind != '{' && options_.lstrip_blocks) {
        lstrip_before_tag(text, line_starting);
      }
      emit_text(std::move(text));
      size_t body = tag + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
      size_t end = kind == '#'                                  ? skip_comment(tag, body)
                   : kind == '%' && is_raw_start(body, nullptr) ? lex_raw(tag, body)
                                                                : lex_tag(tag, body, kind);
      pos = end_whitespace(end, kind != '{');
      line_starting = pos > end_of_delimiter_ && src_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{TokenKind::kEof, "", 0, 0.0, pos_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  SourcePos pos_at(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    return SourcePos{static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    throw ChatTemplateError(
        ChatTemplateError::Kind::kParse,
        "chat template syntax error at " + describe(pos_at(offset)) + ": " + message);
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  void lstrip_before_tag(std::string& text, bool line_starting) const {
    size_t line_begin = text.rfind('\n');
    line_begin = line_begin == std::string::npos ? 0 : line_begin + 1;
    if (line_begin == 0 && !line_starting) return;
    bool blank = std::all_of(text.begin() + static_cast<std::ptrdiff_t>(line_begin), text.end(),
                             [](char c) { return c == ' ' || c == '\t'; });
    if (blank) text.resize(line_begin);
  }

  void emit_text(std::string text) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenKind::kText, std::move(text), 0, 0.0, {}});
  }

  // After a tag's closing delimiter (ending at `end`, the marker recorded in end_marker_):
  // applies `-` stripping or trim_blocks and returns where the next text starts.
  size_t end_whitespace(size_t end, bool is_block_or_comment) {
    end_of_delimiter_ = end;
    size_t pos = end;
    if (end_marker_ == '-') {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
    } else if (end_marker_ != '+' && is_block_or_comment && options_.trim_blocks &&
               pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    return pos;
  }

  size_t skip_comment(size_t tag, size_t body) {
    size_t close = src_.find("#}", body);
    if (close == std::string::npos) fail(tag, "unclosed comment '{#'");
    end_marker_ =
        close > body && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : '\0';
    return close + 2;
  }

  // Whether `{%` body at `p` is "raw" (or "endraw" when `end_word`), returning the offset
  // after its closing `%}` through `after` and recording its closing marker.
  bool is_raw_start(size_t p, size_t* after, const char* word = "raw") {
    while (p < src_.size() && is_space(src_[p])) ++p;
    size_t len = std::strlen(word);
    if (src_.compare(p, len, word) != 0) return false;
    p += len;
    if (p < src_.size() && is_name_char(src_[p])) return false;
    while (p < src_.size() && is_space(src_[p])) ++p;
    char marker = '\0';
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) marker = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) return false;
    if (after) {
      *after = p + 2;
      end_marker_ = marker;
    }
    return true;
  }

  size_t lex_raw(size_t tag, size_t body) {
    size_t content_begin = 0;
    is_raw_start(body, &content_begin);
    content_begin = end_whitespace(content_begin, true);
    for (size_t i = find_tag(content_begin); i != std::string::npos; i = find_tag(i + 1)) {
      if (src_[i + 1] != '%') continue;
      char marker = i + 2 < src_.size() ? src_[i + 2] : '\0';
      size_t after = 0;
      if (!is_raw_start(i + 2 + ((marker == '-' || marker == '+') ? 1 : 0), &after, "endraw"))
        continue;
      std::string text = src_.substr(content_begin, i - content_begin);
      if (marker == '-') {
        text.erase(std::find_if_not(text.rbegin(), text.rend(), is_space).base(), text.end());
      }
      emit_text(std::move(text));
      return after;
    }
    fail(tag, "unclosed '{% raw %}' (missing '{% endraw %}')");
  }

  // Tokenises the expression inside `{{ }}` or `{% %}` up to its closing delimiter, which
  // only counts outside brackets so `{{ {'a': {'b': 1}} }}` works.
  size_t lex_tag(size_t tag, size_t p, char kind) {
    const bool is_var = kind == '{';
    const char* close = is_var ? "}}" : "%}";
    tokens_.push_back(
        Token{is_var ? TokenKind::kVarBegin : TokenKind::kBlockBegin, "", 0, 0.0, pos_at(tag)});
    std::vector<char> brackets;
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) {
        fail(tag,
             std::string("unclosed '") + (is_var ? "{{" : "{%") + "' (missing '" + close + "')");
      }
      if (brackets.empty()) {
        char marker = src_[p];
        size_t skip = (marker == '-' || marker == '+') ? 1 : 0;
        if (src_.compare(p + skip, 2, close) == 0) {
          end_marker_ = skip ? marker : '\0';
          tokens_.push_back(
              Token{is_var ? TokenKind::kVarEnd : TokenKind::kBlockEnd, "", 0, 0.0, pos_at(p)});
          return p + skip + 2;
        }
      }
      p = lex_one(p, brackets);
    }
  }

  size_t lex_one(size_t p, std::vector<char>& brackets) {
    const char c = src_[p];
    Token token;
    token.pos = pos_at(p);
    if (is_name_start(c)) {
      size_t e = p;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      token.kind = TokenKind::kName;
      token.text = src_.substr(p, e - p);
      tokens_.push_back(std::move(token));
      return e;
    }
    if (is_digit(c)) return lex_number(p, std::move(token));
    if (c == '\'' || c == '"') return lex_string(p, std::move(token));
    for (const char* op : kOperators) {
      size_t len = std::strlen(op);
      if (src_.compare(p, len, op) != 0) continue;
      if (len == 1 && (c == '(' || c == '[' || c == '{')) {
        brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (len == 1 && (c == ')' || c == ']' || c == '}')) {
        if (brackets.empty() || brackets.back() != c)
          fail(p, std::string("unexpected '") + c + "'");
        brackets.pop_back();
      }
      token.kind = TokenKind::kOperator;
      token.text = op;
      tokens_.push_back(std::move(token));
      return p + len;
    }
    fail(p, std::string("unexpected character '") + c + "'");
  }

  size_t lex_number(size_t p, Token token) {
    auto digits = [&](size_t q) {
      while (q < src_.size() && (is_digit(src_[q]) || src_[q] == '_')) ++q;
      return q;
    };
    size_t e = digits(p);
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      is_float = true;
      e = digits(e + 1);
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        is_float = true;
        e = digits(q);
      }
    }
    std::string text = src_.substr(p, e - p);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    const char* first = text.data();
    const char* last = text.data() + text.size();
    std::from_chars_result res{};
    if (is_float) {
      token.kind = TokenKind::kFloat;
      res = std::from_chars(first, last, token.float_value);
    } else {
      token.kind = TokenKind::kInt;
      res = std::from_chars(first, last, token.int_value);
    }
    if (res.ec != std::errc() || res.ptr != last) fail(p, "invalid number '" + text + "'");
    tokens_.push_back(std::move(token));
    return e;
  }

  // Python string-literal escapes (jinja2 decodes literals with "unicode-escape").
  size_t lex_string(size_t p, Token token) {
    const char quote = src_[p];
    std::string value;
    size_t i = p + 1;
    while (true) {
      if (i >= src_.size()) fail(p, "unterminated string literal");
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        value += c;
        ++i;
        continue;
      }
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          int width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int k = 0; k < width; ++k) {
            int h = i < src_.size() ? hex_value(src_[i]) : -1;
            if (h < 0) fail(i, std::string("truncated \\") + e + " escape in string literal");
            cp = cp * 16 + static_cast<uint32_t>(h);
            ++i;
          }
          if (cp > 0x10ffff) fail(i, "escape outside the Unicode range in string literal");
          append_utf8(cp, value);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[i++] - '0');
            }
            append_utf8(cp, value);
          } else {
            value += '\\';  // Python keeps unknown escapes verbatim
            value += e;
          }
      }
    }
    token.kind = TokenKind::kString;
    token.text = std::move(value);
    tokens_.push_back(std::move(token));
    return i + 1;
  }

  LexOptions options_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  char end_marker_ = '\0';       // '-', '+' or none, of the tag that just closed
  size_t end_of_delimiter_ = 0;  // offset just past that tag's closing delimiter
};

}  // namespace

std::string describe(const SourcePos& pos) {
  return "line " + std::to_string(pos.line) + ", column " + std::to_string(pos.column);
}

std::vector<Token> tokenize(std::string_view source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace pagedserve::model::chat
