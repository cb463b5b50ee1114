// Tree-walking evaluator; see evaluator.h. Scoping follows jinja2: `set` writes the innermost
// scope, a for loop body is a fresh scope each iteration (so assignments inside a loop do not
// leak out, which is why templates use namespace()), and `if` opens no scope.
#include "model/chat_template/evaluator.h"

#include <algorithm>

#include "model/chat_template/chat_template_error.h"
#include "model/chat_template/filters.h"
#include "model/chat_template/operations.h"

namespace pagedserve::model::chat {

namespace {

// Nested macro calls allowed (templates recurse to print nested JSON schemas).
constexpr int kMaxMacroDepth = 32;

[[noreturn]] void fail_at(const SourcePos& pos, const std::string& message) {
  throw ChatTemplateError(ChatTemplateError::Kind::kRender,
                          "chat template error at " + describe(pos) + ": " + message);
}

Value make_loop(int64_t index0, const List& items) {
  const auto n = static_cast<int64_t>(items.size());
  Dict loop;
  loop.kind = Dict::Kind::kLoop;
  loop.items = {
      {"index0", Value(index0)},
      {"index", Value(index0 + 1)},
      {"revindex0", Value(n - index0 - 1)},
      {"revindex", Value(n - index0)},
      {"first", Value(index0 == 0)},
      {"last", Value(index0 == n - 1)},
      {"length", Value(n)},
      {"depth", Value(int64_t{1})},
      {"depth0", Value(int64_t{0})},
      {"previtem",
       index0 > 0 ? items[static_cast<size_t>(index0 - 1)] : Value(Undefined{"previtem"})},
      {"nextitem",
       index0 + 1 < n ? items[static_cast<size_t>(index0 + 1)] : Value(Undefined{"nextitem"})},
  };
  return Value::dict(std::move(loop));
}

}  // namespace

Renderer::Renderer(Value context, std::optional<std::tm> now)
    : context_(std::move(context)), now_(now) {
  frames_.emplace_back();
}

std::string Renderer::render(const Program& program) {
  std::string out;
  exec(program.body, out);
  return out;
}

// ---- statements

Renderer::Flow Renderer::exec(const Body& body, std::string& out) {
  for (const StmtPtr& stmt : body) {
    Flow flow = exec_stmt(*stmt, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec_stmt(const Stmt& s, std::string& out) {
  try {
    return exec_stmt_inner(s, out);
  } catch (const ValueError& err) {
    fail_at(s.pos, err.what());
  }
}

Renderer::Flow Renderer::exec_stmt_inner(const Stmt& s, std::string& out) {
  switch (s.kind) {
    case StmtKind::kText:
      out += s.text;
      break;
    case StmtKind::kOutput:
      append_output_string(eval(*s.expr), out);
      if (out.size() > kMaxStringBytes) fail_at(s.pos, "rendered text is too large");
      break;
    case StmtKind::kIf:
      for (const auto& [condition, body] : s.branches) {
        if (eval(*condition).truthy()) return exec(body, out);
      }
      return exec(s.else_body, out);
    case StmtKind::kFor:
      exec_for(s, out);
      break;
    case StmtKind::kSet:
      exec_set(s);
      break;
    case StmtKind::kSetBlock: {
      std::string text;
      exec(s.body, text);
      assign(s.targets[0], Value(std::move(text)));
      break;
    }
    case StmtKind::kMacro: {
      const Stmt* macro = &s;
      assign(s.text, Value(std::make_shared<const Callable>(
                         Callable{s.text, [macro](Renderer& r, const CallArgs& args) {
                                    return r.call_macro(*macro, args);
                                  }})));
      break;
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kFilterBlock: {
      std::string text;
      exec(s.body, text);
      Value input(std::move(text));
      append_output_string(eval_filter(*s.expr, &input), out);
      break;
    }
    case StmtKind::kScope:
      return exec(s.body, out);
  }
  return Flow::kNormal;
}

void Renderer::exec_for(const Stmt& s, std::string& out) {
  Value iterable = eval(*s.expr);
  std::shared_ptr<const List> items = iterate(iterable);
  if (s.condition) {  // `for x in xs if cond`: filtered first, so loop.length counts the kept
    auto kept = std::make_shared<List>();
    for (const Value& item : *items) {
      frames_.emplace_back();
      bind_targets(s.targets, item);
      bool keep = eval(*s.condition).truthy();
      frames_.pop_back();
      if (keep) kept->push_back(item);
    }
    items = kept;
  }
  for (size_t i = 0; i < items->size(); ++i) {
    frames_.emplace_back();
    bind_targets(s.targets, (*items)[i]);
    frames_.back().vars.emplace_back("loop", make_loop(static_cast<int64_t>(i), *items));
    Flow flow = exec(s.body, out);
    frames_.pop_back();
    if (flow == Flow::kBreak) break;
  }
  if (items->empty()) exec(s.else_body, out);
}

void Renderer::exec_set(const Stmt& s) {
  Value value = eval(*s.expr);
  if (s.attr.empty()) {
    bind_targets(s.targets, value);
    return;
  }
  Value target = lookup(s.targets[0]);
  if (!target.is_dict() || target.as_dict().kind != Dict::Kind::kNamespace) {
    fail_at(s.pos, "cannot assign attribute '" + s.attr + "' on '" + s.targets[0] +
                       "': it is not a namespace()");
  }
  target.as_mutable_dict().set(s.attr, std::move(value));
}

void Renderer::bind_targets(const std::vector<std::string>& targets, const Value& value) {
  if (targets.size() == 1) {
    assign(targets[0], value);
    return;
  }
  std::shared_ptr<const List> items =
      value.is_list() || value.is_string() ? iterate(value) : nullptr;
  if (!items || items->size() != targets.size()) {
    throw ValueError("cannot unpack " + std::string(value.type_name()) + " into " +
                     std::to_string(targets.size()) + " names");
  }
  for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], (*items)[i]);
}

Value Renderer::call_macro(const Stmt& macro, const CallArgs& args) {
  if (macro_depth_ >= kMaxMacroDepth) {
    throw ValueError("macro '" + macro.text + "' nested more than " +
                     std::to_string(kMaxMacroDepth) + " calls deep");
  }
  if (args.positional.size() > macro.params.size()) {
    throw ValueError("macro '" + macro.text + "' takes " + std::to_string(macro.params.size()) +
                     " arguments, " + std::to_string(args.positional.size()) + " given");
  }
  for (const auto& [key, unused] : args.keywords) {
    if (std::find(macro.params.begin(), macro.params.end(), key) == macro.params.end()) {
      throw ValueError("macro '" + macro.text + "' has no parameter '" + key + "'");
    }
  }
  ++macro_depth_;
  frames_.push_back(Frame{{}, true});
  for (size_t i = 0; i < macro.params.size(); ++i) {
    const Value* given = args.get(i, macro.params[i]);
    Value v = given               ? *given
              : macro.defaults[i] ? eval(*macro.defaults[i])
                                  : Value(Undefined{macro.params[i]});
    assign(macro.params[i], std::move(v));
  }
  std::string text;
  exec(macro.body, text);
  frames_.pop_back();
  --macro_depth_;
  return Value(std::move(text));
}

// ---- variables

Value Renderer::lookup(const std::string& name) const {
  for (size_t i = frames_.size(); i-- > 0;) {
    for (const auto& [key, value] : frames_[i].vars) {
      if (key == name) return value;
    }
    if (frames_[i].isolated) i = 1;  // continue with frames_[0], the template level
  }
  if (context_.is_dict()) {
    if (const Value* v = context_.as_dict().find(name)) return *v;
  }
  if (const Value* global = find_global(name)) return *global;
  return Value(Undefined{name});
}

void Renderer::assign(const std::string& name, Value value) {
  auto& vars = frames_.back().vars;
  for (auto& [key, v] : vars) {
    if (key == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

// ---- expressions

Value Renderer::eval(const Expr& e) {
  try {
    return eval_node(e);
  } catch (const ValueError& err) {
    fail_at(e.pos, err.what());
  }
}

Value Renderer::eval_node(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kGetAttr:
      return get_attr(eval(*e.children[0]), e.name);
    case ExprKind::kGetItem:
      return get_item(eval(*e.children[0]), eval(*e.children[1]));
    case ExprKind::kSlice: {
      auto part = [&](size_t i) { return e.children[i] ? eval(*e.children[i]) : Value(nullptr); };
      Value obj = eval(*e.children[0]);
      return slice(obj, part(1), part(2), part(3));
    }
    case ExprKind::kCall:
      return eval_call(e);
    case ExprKind::kFilter:
      return eval_filter(e, nullptr);
    case ExprKind::kTest: {
      Value v = eval(*e.children[0]);
      bool result = apply_test(e.name, v, eval_args(e, 1));
      return Value(result != e.negated);
    }
    case ExprKind::kNot:
      return Value(!eval(*e.children[0]).truthy());
    case ExprKind::kNegate:
      return negate(eval(*e.children[0]));
    case ExprKind::kPlus: {
      Value v = eval(*e.children[0]);
      if (!v.is_number())
        throw ValueError(std::string("bad operand type for unary +: '") + v.type_name() + "'");
      return v.is_bool() ? Value(int64_t{v.as_bool()}) : v;
    }
    case ExprKind::kBinary: {
      Value a = eval(*e.children[0]);
      return binary_op(e.name, a, eval(*e.children[1]));
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.children[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.children[i + 1]);
        if (!compare(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.children[0]);
      return a.truthy() ? eval(*e.children[1]) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.children[0]);
      return a.truthy() ? a : eval(*e.children[1]);
    }
    case ExprKind::kCondition:
      if (eval(*e.children[1]).truthy()) return eval(*e.children[0]);
      return e.children[2] ? eval(*e.children[2]) : Value(Undefined{});
    case ExprKind::kList: {
      List items;
      items.reserve(e.children.size());
      for (const ExprPtr& child : e.children) items.push_back(eval(*child));
      return Value::list(std::move(items));
    }
    case ExprKind::kDict: {
      Dict dict;
      for (size_t i = 0; i < e.keys.size(); ++i) {
        Value key = eval(*e.keys[i]);
        if (!key.is_string()) throw ValueError("dict literal keys must be strings");
        dict.set(key.as_string(), eval(*e.children[i]));
      }
      return Value::dict(std::move(dict));
    }
  }
  throw ValueError("unknown expression");
}

CallArgs Renderer::eval_args(const Expr& e, size_t first_arg) {
  CallArgs args;
  for (size_t i = first_arg; i < e.children.size(); ++i) {
    args.positional.push_back(e.children[i] ? eval(*e.children[i]) : Value());
  }
  for (const auto& [key, expr] : e.keywords) args.keywords.emplace_back(key, eval(*expr));
  return args;
}

Value Renderer::eval_filter(const Expr& e, const Value* block_input) {
  // In a {% filter %} chain the innermost filter has no input expression: it receives the
  // rendered block.
  Value input;
  if (!e.children[0]) {
    input = *block_input;
  } else if (block_input && e.children[0]->kind == ExprKind::kFilter) {
    input = eval_filter(*e.children[0], block_input);
  } else {
    input = eval(*e.children[0]);
  }
  return apply_filter(e.name, input, eval_args(e, 1));
}

Value Renderer::eval_call(const Expr& e) {
  const Expr& callee = *e.children[0];
  Value fn;
  if (callee.kind == ExprKind::kGetAttr) {
    Value obj = eval(*callee.children[0]);
    CallArgs args = eval_args(e, 1);
    if (obj.is_dict() && obj.as_dict().kind == Dict::Kind::kLoop && callee.name == "cycle") {
      if (args.positional.empty()) throw ValueError("loop.cycle() needs at least one value");
      int64_t index0 = obj.as_dict().find("index0")->as_int();
      return args.positional[static_cast<size_t>(index0) % args.positional.size()];
    }
    if (std::optional<Value> result = call_method(obj, callee.name, args)) return *result;
    fn = get_attr(obj, callee.name);
    if (fn.is_callable()) return fn.as_callable().fn(*this, args);
    if (obj.is_undefined())
      throw ValueError("cannot call '" + callee.name + "()' on an undefined value (" +
                       undefined_message(obj) + ")");
    throw ValueError("unsupported method '" + callee.name + "' on '" + obj.type_name() + "'");
  }
  fn = eval(callee);
  if (!fn.is_callable()) {
    if (fn.is_undefined()) throw ValueError(undefined_message(fn) + " (called as a function)");
    throw ValueError(std::string("'") + fn.type_name() + "' object is not callable");
  }
  return fn.as_callable().fn(*this, eval_args(e, 1));
}

}  // namespace pagedserve::model::chat
