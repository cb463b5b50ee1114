// Value: the run-time value of the chat-template interpreter, modelled on the Python objects
// jinja2 works with (Undefined, None, bool, int, float, str, list, dict, callables), plus the
// conversions that must match Python exactly: str()/repr() text, truthiness, equality and
// json.dumps (for the tojson filter). Lists and dicts are shared by pointer like Python's;
// templates cannot mutate them (transformers renders in an immutable sandbox), except a
// namespace(), whose attributes `{% set ns.x = ... %}` may assign.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagedserve::model::chat {

class Value;
class Renderer;

// A run-time error without a source position: thrown by value operations, filters and
// methods; the evaluator rethrows it as a ChatTemplateError naming the line and column.
struct ValueError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Jinja2's default Undefined: falsy, renders as "", iterates as empty. `name` is only for
// error messages ("'foo' is undefined").
struct Undefined {
  std::string name;
};

using List = std::vector<Value>;

struct Dict {
  enum class Kind { kPlain, kNamespace, kLoop };
  Kind kind = Kind::kPlain;
  // Insertion order, like a Python dict; chat dicts are small so a linear scan beats hashing.
  std::vector<std::pair<std::string, Value>> items;

  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

// Positional and keyword arguments of a call, evaluated.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;

  // The argument at `index` or named `name`, or nullptr when absent.
  const Value* get(size_t index, std::string_view name) const;
};

// A builtin function or a macro. The renderer is passed so macros can render their body.
struct Callable {
  std::string name;
  std::function<Value(Renderer&, const CallArgs&)> fn;
};

class Value {
 public:
  using Storage =
      std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string,
                   std::shared_ptr<List>, std::shared_ptr<Dict>, std::shared_ptr<const Callable>>;

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(int64_t{i}) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<const Callable> c) : v_(std::move(c)) {}

  static Value list(List items = {}) { return Value(std::make_shared<List>(std::move(items))); }
  static Value dict(Dict d = {}) { return Value(std::make_shared<Dict>(std::move(d))); }

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<std::nullptr_t>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  // Python's numbers.Number includes bool.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Callable>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  const Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Dict& as_mutable_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const std::shared_ptr<List>& list_ptr() const { return std::get<std::shared_ptr<List>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  const Undefined& as_undefined() const { return std::get<Undefined>(v_); }
  // Numeric value of an int, float or bool as a double.
  double to_double() const;

  // Python truthiness.
  bool truthy() const;
  // The name Python gives the type in error messages ("str", "int", "list", ...).
  const char* type_name() const;
  // Same object (Python `is`) for containers, equal value otherwise.
  bool same_as(const Value& other) const;

  const Storage& storage() const { return v_; }

 private:
  Storage v_;
};

// Python `==` (1 == 1.0 == True; containers compare element-wise).
bool values_equal(const Value& a, const Value& b);

// What `{{ v }}` prints: Python str(); undefined prints "".
std::string to_output_string(const Value& v);
void append_output_string(const Value& v, std::string& out);
// Python repr(), used for items inside printed lists and dicts.
void append_repr(const Value& v, std::string& out);
// Python repr() of a float ("1.0", "0.1", "1e+16").
std::string format_python_float(double d);

struct JsonDumpOptions {
  std::optional<int> indent;  // none: one line with ", " and ": " separators
  bool sort_keys = false;
  bool ensure_ascii = false;  // transformers' tojson passes ensure_ascii=False
  std::optional<std::pair<std::string, std::string>> separators;
};
// Python json.dumps(v, ...); throws ChatTemplateError for values JSON cannot hold.
std::string dump_json(const Value& v, const JsonDumpOptions& options);

// Converts a request context into Values (objects keep their key order).
Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

// ---- UTF-8: Python indexes strings by code point, so length and slicing count them.
// Byte offset of each code point, then s.size(): count + 1 entries. Invalid UTF-8 bytes
// count as one code point each, so any byte string indexes safely.
std::vector<size_t> code_point_offsets(std::string_view s);
bool is_ascii(std::string_view s);
size_t code_point_count(std::string_view s);
// Splits into one string per code point.
std::vector<std::string> split_code_points(std::string_view s);

}  // namespace pagedserve::model::chat
