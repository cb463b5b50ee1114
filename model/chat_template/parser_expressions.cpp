// Recursive-descent parser, expression half. Precedence, loosest first, as in jinja2:
// `a if c else b`, or, and, not, comparisons (chained), + -, ~, * / // %, **, unary - +, then
// primary with postfix (.attr, [index], [a:b:c], (call)) and the filter / test chain
// (`|f(...)`, `is [not] t`), which therefore binds tighter than any operator.
#include "model/chat_template/filters.h"
#include "model/chat_template/parser_impl.h"

namespace pagedserve::model::chat {

ExprPtr Parser::make_expr(ExprKind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

ExprPtr Parser::make_unary(ExprKind kind, SourcePos pos, ExprPtr operand) {
  auto e = make_expr(kind, pos);
  e->children.push_back(std::move(operand));
  return e;
}

ExprPtr Parser::make_binary(ExprKind kind, SourcePos pos, std::string op, ExprPtr a, ExprPtr b) {
  auto e = make_expr(kind, pos);
  e->name = std::move(op);
  e->children.push_back(std::move(a));
  e->children.push_back(std::move(b));
  return e;
}

// An expression, or a bare tuple `a, b` (as in `{% set a, b = 1, 2 %}`), as a list.
ExprPtr Parser::parse_tuple(bool allow_condition) {
  SourcePos pos = peek().pos;
  ExprPtr first = parse_expr(allow_condition);
  if (!is_op(",")) return first;
  auto tuple = make_expr(ExprKind::kList, pos);
  tuple->children.push_back(std::move(first));
  while (accept_op(",")) {
    if (peek().kind == TokenKind::kVarEnd || peek().kind == TokenKind::kBlockEnd) break;
    tuple->children.push_back(parse_expr(allow_condition));
  }
  return tuple;
}

ExprPtr Parser::parse_expr(bool allow_condition) {
  DepthGuard guard(*this);
  ExprPtr e = parse_or();
  while (allow_condition && is_name("if")) {
    auto cond = make_expr(ExprKind::kCondition, next().pos);
    cond->children.push_back(std::move(e));
    cond->children.push_back(parse_or());
    cond->children.push_back(accept_name("else") ? parse_expr() : nullptr);
    e = std::move(cond);
  }
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr e = parse_and();
  while (is_name("or")) {
    SourcePos pos = next().pos;
    e = make_binary(ExprKind::kOr, pos, "or", std::move(e), parse_and());
  }
  return e;
}

ExprPtr Parser::parse_and() {
  ExprPtr e = parse_not();
  while (is_name("and")) {
    SourcePos pos = next().pos;
    e = make_binary(ExprKind::kAnd, pos, "and", std::move(e), parse_not());
  }
  return e;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    SourcePos pos = next().pos;
    return make_unary(ExprKind::kNot, pos, parse_not());
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  SourcePos pos = peek().pos;
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (peek().kind == TokenKind::kOperator &&
        (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == "<=" ||
         peek().text == ">" || peek().text == ">=")) {
      op = next().text;
    } else if (is_name("in")) {
      next();
      op = "in";
    } else if (is_name("not") && is_name("in", 1)) {
      next();
      next();
      op = "not in";
    } else {
      break;
    }
    if (!cmp) {
      cmp = make_expr(ExprKind::kCompare, pos);
      cmp->children.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->children.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr Parser::parse_math1() {
  ExprPtr e = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& op = next();
    e = make_binary(ExprKind::kBinary, op.pos, op.text, std::move(e), parse_concat());
  }
  return e;
}

ExprPtr Parser::parse_concat() {
  ExprPtr e = parse_math2();
  while (is_op("~")) {
    const Token& op = next();
    e = make_binary(ExprKind::kBinary, op.pos, "~", std::move(e), parse_math2());
  }
  return e;
}

ExprPtr Parser::parse_math2() {
  ExprPtr e = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& op = next();
    e = make_binary(ExprKind::kBinary, op.pos, op.text, std::move(e), parse_pow());
  }
  return e;
}

ExprPtr Parser::parse_pow() {
  ExprPtr e = parse_unary();
  while (is_op("**")) {
    const Token& op = next();
    e = make_binary(ExprKind::kBinary, op.pos, "**", std::move(e), parse_unary());
  }
  return e;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    const Token& op = next();
    e = make_unary(op.text == "-" ? ExprKind::kNegate : ExprKind::kPlus, op.pos,
                   parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  return with_filter ? parse_filter_chain(std::move(e)) : std::move(e);
}

ExprPtr Parser::parse_primary() {
  const Token& t = peek();
  SourcePos pos = t.pos;
  if (t.kind == TokenKind::kName) {
    std::string name = next().text;
    auto lit = make_expr(ExprKind::kLiteral, pos);
    if (name == "true" || name == "True") {
      lit->literal = Value(true);
    } else if (name == "false" || name == "False") {
      lit->literal = Value(false);
    } else if (name == "none" || name == "None") {
      lit->literal = Value(nullptr);
    } else {
      auto e = make_expr(ExprKind::kName, pos);
      e->name = std::move(name);
      return e;
    }
    return lit;
  }
  if (t.kind == TokenKind::kString) {
    std::string text;
    while (peek().kind == TokenKind::kString) text += next().text;  // "a" "b" concatenates
    auto e = make_expr(ExprKind::kLiteral, pos);
    e->literal = Value(std::move(text));
    return e;
  }
  if (t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat) {
    auto e = make_expr(ExprKind::kLiteral, pos);
    e->literal = t.kind == TokenKind::kInt ? Value(t.int_value) : Value(t.float_value);
    next();
    return e;
  }
  if (accept_op("(")) {
    if (accept_op(")")) return make_expr(ExprKind::kList, pos);  // empty tuple
    ExprPtr e = parse_expr();
    if (is_op(",")) {
      auto tuple = make_expr(ExprKind::kList, pos);
      tuple->children.push_back(std::move(e));
      while (accept_op(",") && !is_op(")")) tuple->children.push_back(parse_expr());
      e = std::move(tuple);
    }
    expect_op(")");
    return e;
  }
  if (accept_op("[")) {
    auto list = make_expr(ExprKind::kList, pos);
    while (!accept_op("]")) {
      if (!list->children.empty()) expect_op(",");
      if (accept_op("]")) break;
      list->children.push_back(parse_expr());
    }
    return list;
  }
  if (accept_op("{")) {
    auto dict = make_expr(ExprKind::kDict, pos);
    while (!accept_op("}")) {
      if (!dict->keys.empty()) expect_op(",");
      if (accept_op("}")) break;
      dict->keys.push_back(parse_expr());
      expect_op(":");
      dict->children.push_back(parse_expr());
    }
    return dict;
  }
  fail_expected("an expression");
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    SourcePos pos = peek().pos;
    if (accept_op(".")) {
      if (peek().kind == TokenKind::kInt) {  // `items.0` is items[0]
        auto index = make_expr(ExprKind::kLiteral, peek().pos);
        index->literal = Value(next().int_value);
        e = make_binary(ExprKind::kGetItem, pos, "", std::move(e), std::move(index));
      } else {
        auto attr = make_unary(ExprKind::kGetAttr, pos, std::move(e));
        attr->name = expect_name();
        e = std::move(attr);
      }
    } else if (accept_op("[")) {
      e = parse_subscript(std::move(e), pos);
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr object, SourcePos pos) {
  ExprPtr start = is_op(":") ? nullptr : parse_expr();
  if (!accept_op(":")) {
    if (is_op(",")) unsupported(peek().pos, "tuple subscript");
    expect_op("]");
    return make_binary(ExprKind::kGetItem, pos, "", std::move(object), std::move(start));
  }
  auto slice = make_expr(ExprKind::kSlice, pos);
  slice->children.push_back(std::move(object));
  slice->children.push_back(std::move(start));
  slice->children.push_back(is_op(":") || is_op("]") ? nullptr : parse_expr());
  ExprPtr step;
  if (accept_op(":") && !is_op("]")) step = parse_expr();
  slice->children.push_back(std::move(step));
  expect_op("]");
  return slice;
}

// Parses `(args)` into e's children (after the callee or filter input) and keywords.
void Parser::parse_args(Expr& e) {
  expect_op("(");
  bool first = true;
  while (!accept_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (accept_op(")")) break;
    if (is_op("*") || is_op("**")) unsupported(peek().pos, "*args / **kwargs in a call");
    if (peek().kind == TokenKind::kName && is_op("=", 1)) {
      std::string key = next().text;
      next();
      e.keywords.emplace_back(std::move(key), parse_expr());
    } else {
      if (!e.keywords.empty()) fail(peek().pos, "positional argument after keyword argument");
      e.children.push_back(parse_expr());
    }
  }
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto call = make_unary(ExprKind::kCall, peek().pos, std::move(callee));
  parse_args(*call);
  return call;
}

ExprPtr Parser::parse_filter(ExprPtr input) {
  SourcePos pos = peek().pos;
  std::string name = expect_name();
  if (!is_known_filter(name)) fail(pos, "unknown filter '" + name + "'");
  auto filter = make_unary(ExprKind::kFilter, pos, std::move(input));
  filter->name = std::move(name);
  if (is_op("(")) parse_args(*filter);
  return filter;
}

ExprPtr Parser::parse_filter_chain(ExprPtr e) {
  while (true) {
    if (accept_op("|")) {
      e = parse_filter(std::move(e));
    } else if (is_name("is")) {
      SourcePos pos = next().pos;
      bool negated = accept_name("not");
      std::string name = expect_name();
      if (!is_known_test(name)) fail(pos, "unknown test '" + name + "'");
      auto test = make_unary(ExprKind::kTest, pos, std::move(e));
      test->name = std::move(name);
      test->negated = negated;
      const Token& t = peek();
      if (is_op("(")) {
        parse_args(*test);
      } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
                  t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat || is_op("[") ||
                  is_op("{")) &&
                 !is_name("else") && !is_name("or") && !is_name("and")) {
        // `x is divisibleby 3`, `x is sameas none`: one bare argument.
        test->children.push_back(parse_postfix(parse_primary()));
      }
      e = std::move(test);
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}
}  // namespace pagedserve::model::chat
