// Jinja2's builtin tests (`x is defined`, `x is divisibleby 3`, ...), the subset chat
// templates use, with jinja2's argument names. `mapping` is true only for plain dicts, not
// namespace() or loop objects, as in jinja2.
#include <algorithm>
#include <iterator>

#include "model/chat_template/builtin_args.h"
#include "model/chat_template/filters.h"
#include "model/chat_template/operations.h"

namespace pagedserve::model::chat {

namespace {

[[noreturn]] void fail(const std::string& message) { throw ValueError(message); }

int compare_arg(const Value& v, const CallArgs& args) {
  const Value* other = args.get(0, "b");
  if (!other) fail("comparison test needs an argument");
  return three_way(v, *other);
}

bool run_test(std::string_view name, const Value& v, const CallArgs& args) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict() && v.as_dict().kind == Dict::Kind::kPlain;
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.is_callable();
  if (name == "lower")
    return v.is_string() && map_chars(v.as_string(), ascii_lower) == v.as_string();
  if (name == "upper")
    return v.is_string() && map_chars(v.as_string(), ascii_upper) == v.as_string();
  if (name == "escaped") return false;
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int()) fail(std::string("test '") + std::string(name) + "' needs an integer");
    int64_t divisor = name == "divisibleby" ? int_arg(args, 0, "num", 1) : 2;
    if (divisor == 0) fail("divisibleby 0");
    int64_t rem = divisor == -1 ? 0 : v.as_int() % divisor;
    return name == "odd" ? rem != 0 : rem == 0;
  }
  if (name == "sameas") return v.same_as(arg(args, 0, "other"));
  if (name == "in") return contains(arg(args, 0, "seq"), v);
  if (name == "equalto" || name == "eq" || name == "==") return values_equal(v, arg(args, 0, "b"));
  if (name == "ne" || name == "!=") return !values_equal(v, arg(args, 0, "b"));
  if (name == "lt" || name == "lessthan" || name == "<") return compare_arg(v, args) < 0;
  if (name == "le" || name == "<=") return compare_arg(v, args) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare_arg(v, args) > 0;
  if (name == "ge" || name == ">=") return compare_arg(v, args) >= 0;
  fail("unknown test '" + std::string(name) + "'");
}

constexpr std::string_view kTests[] = {
    "defined",  "undefined", "none",    "string",  "number",   "integer",     "float",
    "boolean",  "true",      "false",   "mapping", "iterable", "sequence",    "callable",
    "lower",    "upper",     "escaped", "odd",     "even",     "divisibleby", "sameas",
    "in",       "equalto",   "eq",      "==",      "ne",       "!=",          "lt",
    "lessthan", "<",         "le",      "<=",      "gt",       "greaterthan", ">",
    "ge",       ">="};

}  // namespace

bool is_known_test(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

bool apply_test(std::string_view name, const Value& input, const CallArgs& args) {
  return run_test(name, input, args);
}

}  // namespace pagedserve::model::chat
