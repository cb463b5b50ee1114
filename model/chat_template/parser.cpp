// Recursive-descent parser for the Jinja subset, statement half; see parser.h and
// parser_impl.h. Block statements parse their bodies with parse_body() until their end tag,
// so an unclosed block is reported at its opening tag.
#include "model/chat_template/parser.h"

#include "model/chat_template/parser_impl.h"

namespace pagedserve::model::chat {

// Parses statements until `{% <one of end_tags>`, consuming that keyword (the caller
// parses the rest of its tag). `opener` names the unclosed block for the error message.
Body Parser::parse_body(std::initializer_list<const char*> end_tags, std::string* end,
                        const std::string& opener, SourcePos opened_at) {
  DepthGuard guard(*this);
  Body body;
  while (true) {
    const Token& t = peek();
    if (t.kind == TokenKind::kEof) {
      if (end_tags.size() == 0) return body;
      fail(opened_at,
           "unclosed '{% " + opener + " %}' (missing '{% " + *(end_tags.end() - 1) + " %}')");
    }
    if (t.kind == TokenKind::kText) {
      auto stmt = make_stmt(StmtKind::kText, t.pos);
      stmt->text = next().text;
      body.push_back(std::move(stmt));
    } else if (t.kind == TokenKind::kVarBegin) {
      auto stmt = make_stmt(StmtKind::kOutput, next().pos);
      stmt->expr = parse_tuple();
      if (peek().kind != TokenKind::kVarEnd) fail_expected("'}}'");
      next();
      body.push_back(std::move(stmt));
    } else if (t.kind == TokenKind::kBlockBegin) {
      next();
      const Token& keyword = peek();
      if (keyword.kind != TokenKind::kName) fail_expected("a statement name after '{%'");
      for (const char* tag : end_tags) {
        if (keyword.text == tag) {
          *end = next().text;
          return body;
        }
      }
      body.push_back(parse_statement());
    } else {
      fail(t.pos, "unexpected " + token_text(t));
    }
  }
}

StmtPtr Parser::make_stmt(StmtKind kind, SourcePos pos) {
  auto stmt = std::make_unique<Stmt>();
  stmt->kind = kind;
  stmt->pos = pos;
  return stmt;
}

StmtPtr Parser::parse_statement() {
  const Token& keyword = next();
  const std::string& k = keyword.text;
  if (k == "if") return parse_if(keyword.pos);
  if (k == "for") return parse_for(keyword.pos);
  if (k == "set") return parse_set(keyword.pos);
  if (k == "macro") return parse_macro(keyword.pos);
  if (k == "filter") return parse_filter_block(keyword.pos);
  if (k == "break" || k == "continue") {
    if (loop_depth_ == 0) fail(keyword.pos, "'" + k + "' outside of a loop");
    auto stmt = make_stmt(k == "break" ? StmtKind::kBreak : StmtKind::kContinue, keyword.pos);
    expect_block_end();
    return stmt;
  }
  if (k == "generation") {
    // transformers' AssistantTracker extension: marks assistant text for masks; for
    // rendering it is transparent.
    auto stmt = make_stmt(StmtKind::kScope, keyword.pos);
    expect_block_end();
    std::string end;
    stmt->body = parse_body({"endgeneration"}, &end, "generation", keyword.pos);
    expect_block_end();
    return stmt;
  }
  if (k.rfind("end", 0) == 0 || k == "elif" || k == "else") {
    fail(keyword.pos, "unexpected '{% " + k + " %}' with no open block it could close");
  }
  unsupported(keyword.pos, "{% " + k + " %}");
}

StmtPtr Parser::parse_if(SourcePos pos) {
  auto stmt = make_stmt(StmtKind::kIf, pos);
  std::string end = "elif";
  while (end == "elif") {
    ExprPtr condition = parse_expr();
    expect_block_end();
    Body body = parse_body({"elif", "else", "endif"}, &end, "if", pos);
    stmt->branches.emplace_back(std::move(condition), std::move(body));
  }
  if (end == "else") {
    expect_block_end();
    stmt->else_body = parse_body({"endif"}, &end, "if", pos);
  }
  expect_block_end();
  return stmt;
}

std::vector<std::string> Parser::parse_targets() {
  std::vector<std::string> targets;
  bool parens = accept_op("(");
  do {
    targets.push_back(expect_name());
  } while (accept_op(","));
  if (parens) expect_op(")");
  return targets;
}

StmtPtr Parser::parse_for(SourcePos pos) {
  auto stmt = make_stmt(StmtKind::kFor, pos);
  stmt->targets = parse_targets();
  if (!accept_name("in")) fail_expected("'in'");
  stmt->expr = parse_tuple(/*allow_condition=*/false);
  if (accept_name("if")) stmt->condition = parse_expr();
  if (is_name("recursive")) unsupported(peek().pos, "recursive for loop");
  expect_block_end();
  ++loop_depth_;
  std::string end;
  stmt->body = parse_body({"else", "endfor"}, &end, "for", pos);
  --loop_depth_;
  if (end == "else") {
    expect_block_end();
    stmt->else_body = parse_body({"endfor"}, &end, "for", pos);
  }
  expect_block_end();
  return stmt;
}

StmtPtr Parser::parse_set(SourcePos pos) {
  auto stmt = make_stmt(StmtKind::kSet, pos);
  std::string first = expect_name();
  stmt->targets.push_back(first);
  if (accept_op(".")) {
    stmt->attr = expect_name();
  } else {
    while (accept_op(",")) stmt->targets.push_back(expect_name());
  }
  if (accept_op("=")) {
    stmt->expr = parse_tuple();
    expect_block_end();
    return stmt;
  }
  if (stmt->targets.size() != 1 || !stmt->attr.empty() || peek().kind != TokenKind::kBlockEnd) {
    if (is_op("|")) unsupported(peek().pos, "filtered {% set %} block");
    fail_expected("'=' in '{% set %}'");
  }
  next();
  stmt->kind = StmtKind::kSetBlock;
  std::string end;
  stmt->body = parse_body({"endset"}, &end, "set", pos);
  expect_block_end();
  return stmt;
}

StmtPtr Parser::parse_macro(SourcePos pos) {
  auto stmt = make_stmt(StmtKind::kMacro, pos);
  stmt->text = expect_name();
  expect_op("(");
  while (!accept_op(")")) {
    if (!stmt->params.empty()) expect_op(",");
    if (accept_op(")")) break;  // trailing comma
    stmt->params.push_back(expect_name());
    stmt->defaults.push_back(accept_op("=") ? parse_expr() : nullptr);
  }
  expect_block_end();
  int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;  // `break` inside a macro cannot reach an enclosing loop
  std::string end;
  stmt->body = parse_body({"endmacro"}, &end, "macro", pos);
  loop_depth_ = saved_loop_depth;
  if (peek().kind == TokenKind::kName) next();  // `{% endmacro name %}` is allowed
  expect_block_end();
  return stmt;
}

StmtPtr Parser::parse_filter_block(SourcePos pos) {
  auto stmt = make_stmt(StmtKind::kFilterBlock, pos);
  // The chain's innermost input is null: the evaluator feeds the rendered body there.
  ExprPtr chain = nullptr;
  do {
    chain = parse_filter(std::move(chain));
  } while (accept_op("|"));
  stmt->expr = std::move(chain);
  expect_block_end();
  std::string end;
  stmt->body = parse_body({"endfilter"}, &end, "filter", pos);
  expect_block_end();
  return stmt;
}
Program parse_program(std::string_view source) { return Parser(tokenize(source)).run(); }

}  // namespace pagedserve::model::chat
