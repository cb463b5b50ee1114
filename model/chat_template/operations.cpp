// Python-semantics operations on Values; see operations.h. Integer arithmetic is checked:
// Python ints never overflow, so where int64 would, we fail loudly instead of wrapping.
#include "model/chat_template/operations.h"

#include <algorithm>
#include <cmath>

namespace pagedserve::model::chat {

namespace {

[[noreturn]] void fail(const std::string& message) { throw ValueError(message); }

std::string quoted_type(const Value& v) { return std::string("'") + v.type_name() + "'"; }

[[noreturn]] void fail_operands(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail(undefined_message(a));
  if (b.is_undefined()) fail(undefined_message(b));
  fail("unsupported operand types for " + std::string(op) + ": " + quoted_type(a) + " and " +
       quoted_type(b));
}

bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t integral(const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); }

// Call as check_overflow(__builtin_xxx_overflow(a, b, &r)), then use r: passing r alongside
// the flag would read it before the builtin writes it (argument order is unspecified).
void check_overflow(bool overflowed) {
  if (overflowed) fail("integer overflow (results beyond 64 bits are not supported)");
}

// Python's index normalisation: negative counts from the end; false when out of range.
bool normalize_index(int64_t& index, size_t size) {
  if (index < 0) index += static_cast<int64_t>(size);
  return index >= 0 && static_cast<uint64_t>(index) < size;
}

int64_t slice_bound(const Value& v, const char* what) {
  if (is_integral(v)) return integral(v);
  fail(std::string("slice ") + what + " must be an integer or none, not " + quoted_type(v));
}

// The indices obj[start:stop:step] selects, with Python's clamping rules.
std::vector<size_t> slice_indices(size_t size, const Value& start_v, const Value& stop_v,
                                  const Value& step_v) {
  auto absent = [](const Value& v) { return v.is_none() || v.is_undefined(); };
  int64_t step = absent(step_v) ? 1 : slice_bound(step_v, "step");
  if (step == 0) fail("slice step cannot be zero");
  const int64_t n = static_cast<int64_t>(size);
  // PySlice_AdjustIndices: negative bounds count from the end, then clamp to the range.
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (absent(v)) return fallback;
    int64_t i = slice_bound(v, "index");
    if (i < 0) return i < -n ? (step < 0 ? int64_t{-1} : int64_t{0}) : i + n;
    if (i >= n) return step < 0 ? n - 1 : n;
    return i;
  };
  int64_t start = clamp(start_v, step > 0 ? 0 : n - 1);
  // A step longer than the sequence picks at most one item; bounding it keeps i + step exact.
  step = std::clamp(step, -(n + 1), n + 1);
  int64_t stop = clamp(stop_v, step > 0 ? n : -1);
  std::vector<size_t> out;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) out.push_back(static_cast<size_t>(i));
  } else {
    for (int64_t i = start; i > stop; i += step) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

Value repeat(const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(times) > kMaxStringBytes / s.size())
      fail("string repetition result is too large");
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value(std::move(out));
  }
  const List& l = seq.as_list();
  if (!l.empty() && static_cast<uint64_t>(times) > kMaxListItems / l.size())
    fail("list repetition result is too large");
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), l.begin(), l.end());
  return Value::list(std::move(out));
}

Value arithmetic(std::string_view op, const Value& a, const Value& b) {
  if (is_integral(a) && is_integral(b)) {
    int64_t x = integral(a), y = integral(b), r = 0;
    if (op == "+" || op == "-" || op == "*") {
      check_overflow(op == "+"   ? __builtin_add_overflow(x, y, &r)
                     : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                 : __builtin_mul_overflow(x, y, &r));
      return Value(r);
    }
    if (op == "/") {
      if (y == 0) fail("division by zero");
      return Value(static_cast<double>(x) / static_cast<double>(y));
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail("integer division or modulo by zero");
      if (y == -1) {
        if (op == "%") return Value(int64_t{0});
        check_overflow(x == INT64_MIN);
        return Value(-x);
      }
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {  // floor, as Python does
        --q;
        m += y;
      }
      return op == "//" ? Value(q) : Value(m);
    }
    if (op == "**" && y >= 0) {
      int64_t result = 1;
      for (int64_t i = 0; i < y; ++i) {
        check_overflow(__builtin_mul_overflow(result, x, &result));
        if (result == 0 || result == 1) break;
      }
      return Value(result);
    }
  }
  double x = a.to_double(), y = b.to_double();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return Value(std::pow(x, y));
  if (y == 0.0) fail("float division by zero");
  if (op == "/") return Value(x / y);
  double m = std::fmod(x, y);
  if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
  if (op == "%") return Value(m);
  return Value(std::floor(x / y));  // "//"
}

}  // namespace

std::string undefined_message(const Value& v) {
  const std::string& name = v.as_undefined().name;
  return name.empty() ? "an undefined value was used" : "'" + name + "' is undefined";
}

Value get_attr(const Value& obj, std::string_view name) {
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  if (obj.is_undefined()) return obj;
  return Value(Undefined{std::string(name)});
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      return Value(Undefined{key.as_string()});
    }
  } else if (obj.is_list() && is_integral(key)) {
    int64_t i = integral(key);
    if (normalize_index(i, obj.as_list().size())) return obj.as_list()[static_cast<size_t>(i)];
  } else if (obj.is_string() && is_integral(key)) {
    const std::string& s = obj.as_string();
    int64_t i = integral(key);
    if (is_ascii(s)) {
      if (normalize_index(i, s.size())) return Value(std::string(1, s[static_cast<size_t>(i)]));
    } else {
      std::vector<size_t> offsets = code_point_offsets(s);
      if (normalize_index(i, offsets.size() - 1)) {
        size_t at = static_cast<size_t>(i);
        return Value(s.substr(offsets[at], offsets[at + 1] - offsets[at]));
      }
    }
  } else if (obj.is_undefined()) {
    return obj;
  }
  return Value(Undefined{key.is_string() ? key.as_string() : ""});
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_list()) {
    const List& list = obj.as_list();
    List out;
    for (size_t i : slice_indices(list.size(), start, stop, step)) out.push_back(list[i]);
    return Value::list(std::move(out));
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    std::string out;
    if (is_ascii(s)) {
      for (size_t i : slice_indices(s.size(), start, stop, step)) out += s[i];
    } else {
      std::vector<size_t> offsets = code_point_offsets(s);
      for (size_t i : slice_indices(offsets.size() - 1, start, stop, step)) {
        out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
      }
    }
    return Value(std::move(out));
  }
  if (obj.is_undefined()) return obj;
  fail(quoted_type(obj) + " object cannot be sliced");
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string out = to_output_string(a);
    append_output_string(b, out);
    return Value(std::move(out));
  }
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > kMaxStringBytes)
        fail("string concatenation result is too large");
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      List out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return Value::list(std::move(out));
    }
  } else if (op == "*") {
    if ((a.is_string() || a.is_list()) && is_integral(b)) return repeat(a, integral(b));
    if (is_integral(a) && (b.is_string() || b.is_list())) return repeat(b, integral(a));
  } else if (op == "%" && a.is_string()) {
    fail("printf-style string formatting ('...' % args) is not supported; use ~ or format()");
  }
  fail_operands(op, a, b);
}

Value negate(const Value& v) {
  if (is_integral(v)) {
    int64_t x = integral(v);
    check_overflow(x == INT64_MIN);
    return Value(-x);
  }
  if (v.is_float()) return Value(-v.as_float());
  if (v.is_undefined()) fail(undefined_message(v));
  fail("bad operand type for unary -: " + quoted_type(v));
}

int three_way(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (is_integral(a) && is_integral(b)) {
      int64_t x = integral(a), y = integral(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    double x = a.to_double(), y = b.to_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (int c = three_way(x[i], y[i])) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) fail(undefined_message(a));
  if (b.is_undefined()) fail(undefined_message(b));
  fail("ordering not supported between instances of " + quoted_type(a) + " and " + quoted_type(b));
}

bool compare(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  int c = three_way(a, b);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;  // ">="
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) {
      fail("'in <string>' requires string as left operand, not " + quoted_type(item));
    }
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.as_list()) {
      if (values_equal(v, item)) return true;
    }
    return false;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string());
  if (container.is_undefined()) return false;
  fail("argument of type " + quoted_type(container) + " is not iterable");
}

std::shared_ptr<const List> iterate(const Value& v) {
  if (v.is_list()) return v.list_ptr();
  auto out = std::make_shared<List>();
  if (v.is_dict()) {
    for (const auto& [key, value] : v.as_dict().items) out->push_back(Value(key));
  } else if (v.is_string()) {
    for (std::string& c : split_code_points(v.as_string())) out->push_back(Value(std::move(c)));
  } else if (!v.is_undefined()) {
    fail(quoted_type(v) + " object is not iterable");
  }
  return out;
}

int64_t length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(code_point_count(v.as_string()));
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  if (v.is_undefined()) return 0;
  fail("object of type " + quoted_type(v) + " has no len()");
}

}  // namespace pagedserve::model::chat
