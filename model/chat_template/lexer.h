// Lexer: turns template source into a flat token stream (text runs, tag delimiters and the
// expression tokens inside tags). It owns all whitespace handling, because jinja2 does it in
// its lexer too: newline normalisation, dropping one trailing newline, `-` and `+` markers,
// and the trim_blocks / lstrip_blocks behaviour that transformers' apply_chat_template turns
// on. Comments and {% raw %} blocks are resolved here and never reach the parser.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagedserve::model::chat {

struct SourcePos {
  int line = 1;
  int column = 1;
};

enum class TokenKind {
  kText,        // literal template text, whitespace control already applied
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword
  kString,      // text = the unescaped value
  kInt,         // int_value
  kFloat,       // float_value
  kOperator,    // text = the operator, e.g. "//", "==", "("
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  SourcePos pos;
};

struct LexOptions {
  bool trim_blocks = true;    // drop the first newline after a block tag
  bool lstrip_blocks = true;  // drop spaces and tabs before a block tag at line start
};

// Throws ChatTemplateError (kParse) naming line and column on malformed input.
std::vector<Token> tokenize(std::string_view source, const LexOptions& options = {});

// "line 3, column 7", for error messages.
std::string describe(const SourcePos& pos);

}  // namespace pagedserve::model::chat
