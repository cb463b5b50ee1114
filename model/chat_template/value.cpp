// Value semantics that must match Python byte for byte: truthiness, equality, str()/repr()
// text (including float repr), json.dumps for tojson, and JSON-to-Value conversion.
#include "model/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace pagedserve::model::chat {

namespace {

// Containers nest at most this deep in conversions so hostile input cannot blow the stack.
constexpr int kMaxNesting = 256;

[[noreturn]] void fail(const std::string& message) { throw ValueError(message); }

void append_hex(unsigned value, int digits, std::string& out) {
  static const char* kHex = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; --i) out += kHex[(value >> (4 * i)) & 0xf];
}

// Decodes one code point at s[i]; invalid bytes decode as themselves, one byte long.
uint32_t decode_utf8(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (len <= 1 || i + len > s.size()) {
    ++i;
    return b;
  }
  uint32_t cp = b & (0x7f >> len);
  for (int k = 1; k < len; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if ((c >> 6) != 2) {
      ++i;
      return b;
    }
    cp = (cp << 6) | (c & 0x3f);
  }
  i += len;
  return cp;
}

void append_json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t start = i;
      uint32_t cp = decode_utf8(s, i);
      if (!ensure_ascii) {
        out.append(s.substr(start, i - start));
      } else if (cp >= 0x10000) {
        cp -= 0x10000;
        out += "\\u";
        append_hex(0xd800 + (cp >> 10), 4, out);
        out += "\\u";
        append_hex(0xdc00 + (cp & 0x3ff), 4, out);
      } else {
        out += "\\u";
        append_hex(cp, 4, out);
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += "\\u";
          append_hex(c, 4, out);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void append_string_repr(std::string_view s, std::string& out) {
  char quote = (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos)
                   ? '"'
                   : '\'';
  out += quote;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      append_hex(c, 2, out);
    } else {
      out += ch;
    }
  }
  out += quote;
}

void append_repr_nested(const Value& v, std::string& out, int depth);

void append_str(const Value& v, std::string& out, int depth) {
  if (depth > kMaxNesting) fail("value nests too deeply to print");
  const auto& s = v.storage();
  if (v.is_undefined()) return;
  if (v.is_none()) {
    out += "None";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "True" : "False";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    out += format_python_float(v.as_float());
  } else if (v.is_string()) {
    out += v.as_string();
  } else if (v.is_list()) {
    out += '[';
    bool first = true;
    for (const Value& item : v.as_list()) {
      if (!first) out += ", ";
      first = false;
      append_repr_nested(item, out, depth + 1);
    }
    out += ']';
  } else if (v.is_dict()) {
    const Dict& d = v.as_dict();
    out += d.kind == Dict::Kind::kNamespace ? "Namespace(" : "{";
    bool first = true;
    for (const auto& [key, item] : d.items) {
      if (!first) out += ", ";
      first = false;
      if (d.kind == Dict::Kind::kNamespace) {
        out += key + "=";
      } else {
        append_string_repr(key, out);
        out += ": ";
      }
      append_repr_nested(item, out, depth + 1);
    }
    out += d.kind == Dict::Kind::kNamespace ? ")" : "}";
  } else if (std::holds_alternative<std::shared_ptr<const Callable>>(s)) {
    out += "<function " + v.as_callable().name + ">";
  }
}

void append_repr_nested(const Value& v, std::string& out, int depth) {
  if (v.is_string()) {
    append_string_repr(v.as_string(), out);
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else {
    append_str(v, out, depth);
  }
}

void dump_json_into(const Value& v, const JsonDumpOptions& opt, int depth, std::string& out) {
  if (depth > kMaxNesting) fail("tojson: value nests too deeply");
  const std::string item_sep = opt.separators ? opt.separators->first : opt.indent ? "," : ", ";
  const std::string key_sep = opt.separators ? opt.separators->second : ": ";
  auto newline = [&](int level) {
    if (!opt.indent) return;
    out += '\n';
    out.append(static_cast<size_t>(std::max(0, *opt.indent)) * level, ' ');
  };
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    double d = v.as_float();
    out += std::isnan(d)   ? "NaN"
           : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                           : format_python_float(d);
  } else if (v.is_string()) {
    append_json_string(v.as_string(), opt.ensure_ascii, out);
  } else if (v.is_list()) {
    const List& list = v.as_list();
    if (list.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < list.size(); ++i) {
      if (i > 0) out += item_sep;
      newline(depth + 1);
      dump_json_into(list[i], opt, depth + 1, out);
    }
    newline(depth);
    out += ']';
  } else if (v.is_dict() && v.as_dict().kind == Dict::Kind::kPlain) {
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& item : v.as_dict().items) items.push_back(&item);
    if (items.empty()) {
      out += "{}";
      return;
    }
    if (opt.sort_keys) {
      std::stable_sort(items.begin(), items.end(),
                       [](auto* a, auto* b) { return a->first < b->first; });
    }
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += item_sep;
      newline(depth + 1);
      append_json_string(items[i]->first, opt.ensure_ascii, out);
      out += key_sep;
      dump_json_into(items[i]->second, opt, depth + 1, out);
    }
    newline(depth);
    out += '}';
  } else {
    fail(std::string("tojson: object of type '") + v.type_name() + "' is not JSON serializable");
  }
}

template <typename Json>
Value convert_json(const Json& j, int depth) {
  if (depth > kMaxNesting) fail("context JSON nests too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value(nullptr);
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List list;
      list.reserve(j.size());
      for (const auto& item : j) list.push_back(convert_json(item, depth + 1));
      return Value::list(std::move(list));
    }
    case nlohmann::json::value_t::object: {
      Dict dict;
      dict.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        dict.items.emplace_back(it.key(), convert_json(it.value(), depth + 1));
      }
      return Value::dict(std::move(dict));
    }
    default:
      return Value(nullptr);  // binary and discarded values have no Jinja meaning
  }
}

}  // namespace

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keywords) {
    if (k == name) return &v;
  }
  return nullptr;
}

double Value::to_double() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return as_float();
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_float() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  if (is_dict()) return as_dict().kind != Dict::Kind::kPlain || !as_dict().items.empty();
  return true;
}

const char* Value::type_name() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list()) return "list";
  if (is_dict()) {
    switch (as_dict().kind) {
      case Dict::Kind::kNamespace:
        return "Namespace";
      case Dict::Kind::kLoop:
        return "LoopContext";
      default:
        return "dict";
    }
  }
  return "function";
}

bool Value::same_as(const Value& other) const {
  if (is_list() && other.is_list()) return &as_list() == &other.as_list();
  if (is_dict() && other.is_dict()) return &as_dict() == &other.as_dict();
  if (is_callable() && other.is_callable()) return &as_callable() == &other.as_callable();
  if (is_bool() != other.is_bool()) return false;  // `1 is true` is false in Python
  return values_equal(*this, other);
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    auto as_int = [](const Value& v) { return v.is_bool() ? int64_t{v.as_bool()} : v.as_int(); };
    return as_int(a) == as_int(b);
  }
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_list() && b.is_list()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!values_equal(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const Dict& x = a.as_dict();
    const Dict& y = b.as_dict();
    if (x.kind != Dict::Kind::kPlain || y.kind != Dict::Kind::kPlain) return &x == &y;
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [key, value] : x.items) {
      const Value* other = y.find(key);
      if (!other || !values_equal(value, *other)) return false;
    }
    return true;
  }
  if (a.is_callable() && b.is_callable()) return &a.as_callable() == &b.as_callable();
  return false;
}

std::string to_output_string(const Value& v) {
  std::string out;
  append_output_string(v, out);
  return out;
}

void append_output_string(const Value& v, std::string& out) { append_str(v, out, 0); }

void append_repr(const Value& v, std::string& out) { append_repr_nested(v, out, 0); }

std::string format_python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then laid out the way Python's repr does: positional for
  // exponents in [-4, 16), scientific with a two-digit exponent otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exp = std::stoi(sci.substr(e + 1));
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return sign + out;
  }
  std::string mantissa = digits.substr(0, 1);
  if (digits.size() > 1) mantissa += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + mantissa + exp_buf;
}

std::string dump_json(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  dump_json_into(v, options, 0, out);
  return out;
}

Value from_json(const nlohmann::json& j) { return convert_json(j, 0); }
Value from_json(const nlohmann::ordered_json& j) { return convert_json(j, 0); }

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    offsets.push_back(i);
    decode_utf8(s, i);
  }
  offsets.push_back(s.size());
  return offsets;
}

size_t code_point_count(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return code_point_offsets(s).size() - 1;
}

std::vector<std::string> split_code_points(std::string_view s) {
  std::vector<std::string> out;
  std::vector<size_t> offsets = code_point_offsets(s);
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    out.emplace_back(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
  }
  return out;
}

}  // namespace pagedserve::model::chat
