// Parser's class, shared by the two files that implement it: parser.cpp (statements and
// token helpers) and parser_expressions.cpp (expressions). Internal to the chat-template
// library; the entry point is parse_program() in parser.h. One Parser per parse, on the
// calling thread.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/chat_template/ast.h"
#include "model/chat_template/chat_template_error.h"

namespace pagedserve::model::chat {

// Nesting beyond this is garbage, not a chat template; stop before the stack does.
inline constexpr int kMaxParseDepth = 200;

// Builds a Program from tokens. One instance per parse, used on the calling thread only.
class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Program run() {
    Program program;
    std::string end;
    program.body = parse_body({}, &end, "");
    return program;
  }

 private:
  // ---- token helpers
  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string token_text(const Token& t) {
    switch (t.kind) {
      case TokenKind::kText:
        return "template text";
      case TokenKind::kVarBegin:
        return "'{{'";
      case TokenKind::kVarEnd:
        return "'}}'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kString:
        return "string literal";
      case TokenKind::kInt:
      case TokenKind::kFloat:
        return "number";
      case TokenKind::kEof:
        return "end of template";
      default:
        return "'" + t.text + "'";
    }
  }

  [[noreturn]] void fail(const SourcePos& pos, const std::string& message) const {
    throw ChatTemplateError(ChatTemplateError::Kind::kParse,
                            "chat template syntax error at " + describe(pos) + ": " + message);
  }
  [[noreturn]] void unsupported(const SourcePos& pos, const std::string& construct) const {
    throw ChatTemplateError(ChatTemplateError::Kind::kParse,
                            "unsupported Jinja construct '" + construct + "' at " + describe(pos));
  }
  [[noreturn]] void fail_expected(const std::string& what) const {
    fail(peek().pos, "expected " + what + ", found " + token_text(peek()));
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail_expected(std::string("'") + op + "'");
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::kName) fail_expected("a name");
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::kBlockEnd) fail_expected("'%}'");
    next();
  }

  struct DepthGuard {
    DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxParseDepth)
        parser.fail(parser.peek().pos, "template nests too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // ---- statements (parser.cpp)
  Body parse_body(std::initializer_list<const char*> end_tags, std::string* end,
                  const std::string& opener, SourcePos opened_at = {});
  StmtPtr make_stmt(StmtKind kind, SourcePos pos);
  StmtPtr parse_statement();
  StmtPtr parse_if(SourcePos pos);
  std::vector<std::string> parse_targets();
  StmtPtr parse_for(SourcePos pos);
  StmtPtr parse_set(SourcePos pos);
  StmtPtr parse_macro(SourcePos pos);
  StmtPtr parse_filter_block(SourcePos pos);

  // ---- expressions (parser_expressions.cpp)
  ExprPtr make_expr(ExprKind kind, SourcePos pos);
  ExprPtr make_unary(ExprKind kind, SourcePos pos, ExprPtr operand);
  ExprPtr make_binary(ExprKind kind, SourcePos pos, std::string op, ExprPtr a, ExprPtr b);
  ExprPtr parse_tuple(bool allow_condition = true);
  ExprPtr parse_expr(bool allow_condition = true);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr object, SourcePos pos);
  void parse_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filter(ExprPtr input);
  ExprPtr parse_filter_chain(ExprPtr e);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace pagedserve::model::chat
