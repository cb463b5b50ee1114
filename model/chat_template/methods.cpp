// Python str and dict methods that chat templates call (`content.strip()`, `msg.get('x')`,
// `'{}'.format(x)`), and the global functions transformers provides: range, namespace, dict,
// raise_exception and strftime_now. Whitespace is Python's str.isspace() set (Unicode
// included: NBSP, U+2028, ideographic space, ...); case mapping is ASCII-only.
#include <algorithm>
#include <cctype>
#include <ctime>
#include <unordered_map>

#include "model/chat_template/chat_template_error.h"
#include "model/chat_template/evaluator.h"
#include "model/chat_template/filters.h"
#include "model/chat_template/operations.h"

namespace pagedserve::model::chat {

namespace {

[[noreturn]] void fail(const std::string& message) { throw ValueError(message); }

bool is_py_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

// One code point's UTF-8 bytes (as split_code_points gives them) against Python's
// str.isspace(): ASCII whitespace, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000.
bool is_py_space_code_point(std::string_view cp) {
  if (cp.size() == 1) return is_py_space(cp[0]);
  uint32_t value = 0;
  if (cp.size() == 2) {
    value = ((cp[0] & 0x1fu) << 6) | (cp[1] & 0x3fu);
  } else if (cp.size() == 3) {
    value = ((cp[0] & 0x0fu) << 12) | ((cp[1] & 0x3fu) << 6) | (cp[2] & 0x3fu);
  } else {
    return false;  // nothing above U+FFFF is whitespace
  }
  return value == 0x85 || value == 0xa0 || value == 0x1680 ||
         (value >= 0x2000 && value <= 0x200a) || value == 0x2028 || value == 0x2029 ||
         value == 0x202f || value == 0x205f || value == 0x3000;
}

std::string string_arg(const CallArgs& args, size_t index, const char* name, const char* method) {
  const Value* v = args.get(index, name);
  if (!v || !v->is_string()) {
    fail(std::string(method) + "() argument '" + name + "' must be a string");
  }
  return v->as_string();
}

int64_t maxsplit_arg(const CallArgs& args) {
  const Value* v = args.get(1, "maxsplit");
  return v && v->is_int() ? v->as_int() : -1;
}

// Python str.split / str.rsplit. sep none splits on whitespace runs and drops empties.
Value split(const std::string& s, const Value* sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!sep || sep->is_none()) {
    // Split the left or right end first by walking the code points in that direction.
    std::vector<std::string> cps = split_code_points(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    const auto join = [&](size_t begin, size_t end) {
      std::string out;
      for (size_t k = begin; k < end; ++k) out += cps[k];
      return out;
    };
    size_t i = 0;
    while (true) {
      while (i < cps.size() && is_py_space_code_point(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = cps.size();
        while (end > i && is_py_space_code_point(cps[end - 1])) --end;
        parts.push_back(join(i, end));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !is_py_space_code_point(cps[j])) ++j;
      parts.push_back(join(i, j));
      i = j;
    }
    if (from_right) {
      // Each part was joined from reversed code points: reverse them back, code point-wise.
      for (std::string& p : parts) {
        std::vector<std::string> part_cps = split_code_points(p);
        std::reverse(part_cps.begin(), part_cps.end());
        p.clear();
        for (const std::string& c : part_cps) p += c;
      }
      std::reverse(parts.begin(), parts.end());
    }
  } else {
    if (!sep->is_string()) fail("split() separator must be a string or none");
    const std::string& d = sep->as_string();
    if (d.empty()) fail("split(): empty separator");
    if (!from_right) {
      size_t pos = 0;
      for (size_t hit; (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
                       (hit = s.find(d, pos)) != std::string::npos;
           pos = hit + d.size()) {
        parts.push_back(s.substr(pos, hit - pos));
      }
      parts.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = end >= d.size() ? s.rfind(d, end - d.size()) : std::string::npos;
        if (hit == std::string::npos) break;
        parts.push_back(s.substr(hit + d.size(), end - hit - d.size()));
        end = hit;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
  }
  List out;
  for (std::string& p : parts) out.push_back(Value(std::move(p)));
  return Value::list(std::move(out));
}

bool affix_matches(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) fail("startswith/endswith argument must be a string or a tuple of strings");
    const std::string& t = a.as_string();
    if (t.size() > s.size()) return false;
    return prefix ? s.compare(0, t.size(), t) == 0
                  : s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  return one(affix);
}

// Python str.format with automatic ({}), numbered ({0}) and named ({name}) fields; no specs.
std::string format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') fail("format(): single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("format(): single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      fail("format(): format specs, conversions and attribute fields are not supported");
    }
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
      ++auto_index;
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return d >= '0' && d <= '9'; })) {
      size_t index = field.size() > 6 ? SIZE_MAX : std::stoul(field);
      v = index < args.positional.size() ? &args.positional[index] : nullptr;
    } else {
      v = args.get(SIZE_MAX, field);
    }
    if (!v) fail("format(): no argument for field '{" + field + "}'");
    append_output_string(*v, out);
    i = close;
  }
  return out;
}

std::string python_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char c : s) {
    bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
    if (lower && !prev_cased) c = static_cast<char>(c - 32);
    if (upper && prev_cased) c = static_cast<char>(c + 32);
    out += c;
    prev_cased = lower || upper;
  }
  return out;
}

std::optional<Value> string_method(const std::string& s, std::string_view name,
                                   const CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return Value(strip_string(s, args.get(0, "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* affix = args.get(0, "prefix");
    if (!affix) fail(std::string(name) + "() takes at least 1 argument");
    return Value(affix_matches(s, *affix, name == "startswith"));
  }
  if (name == "split" || name == "rsplit") {
    return split(s, args.get(0, "sep"), maxsplit_arg(args), name == "rsplit");
  }
  if (name == "splitlines") {
    List lines;
    for (size_t begin = 0; begin < s.size();) {
      size_t end = s.find_first_of("\r\n", begin);
      if (end == std::string::npos) end = s.size();
      lines.push_back(Value(s.substr(begin, end - begin)));
      begin = end + ((end + 1 < s.size() && s[end] == '\r' && s[end + 1] == '\n') ? 2 : 1);
    }
    return Value::list(std::move(lines));
  }
  if (name == "upper" || name == "lower" || name == "capitalize") {
    return apply_filter(name, Value(s), CallArgs{});
  }
  if (name == "title") return Value(python_title(s));
  if (name == "replace") {
    CallArgs filter_args;
    filter_args.positional = {Value(string_arg(args, 0, "old", "replace")),
                              Value(string_arg(args, 1, "new", "replace"))};
    if (const Value* count = args.get(2, "count")) filter_args.positional.push_back(*count);
    return apply_filter("replace", Value(s), filter_args);
  }
  if (name == "format") return Value(format(s, args));
  if (name == "join") {
    const Value* items = args.get(0, "iterable");
    if (!items) fail("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const auto iterated = iterate(*items); const Value& item : *iterated) {
      if (!item.is_string()) fail("join(): sequence item must be a string");
      if (!first) out += s;
      first = false;
      out += item.as_string();
    }
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    std::string sub = string_arg(args, 0, "sub", std::string(name).c_str());
    if (name == "count") {
      int64_t n = 0;
      if (sub.empty()) return Value(static_cast<int64_t>(code_point_count(s)) + 1);
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    size_t hit = name == "find" ? s.find(sub) : s.rfind(sub);
    if (hit == std::string::npos) return Value(int64_t{-1});
    return Value(static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, hit))));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::string affix = string_arg(args, 0, "affix", std::string(name).c_str());
    if (!affix_matches(s, Value(affix), name == "removeprefix")) return Value(s);
    return Value(name == "removeprefix" ? s.substr(affix.size())
                                        : s.substr(0, s.size() - affix.size()));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "islower" || name == "isupper") {
    if (s.empty()) return Value(false);
    if (name == "islower" || name == "isupper") {
      bool lower = name == "islower";
      bool any_cased = std::any_of(
          s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
      return Value(any_cased && std::none_of(s.begin(), s.end(), [&](char c) {
                     return lower ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z');
                   }));
    }
    auto ok = [&](char ch) {
      auto c = static_cast<unsigned char>(ch);
      if (name == "isdigit") return std::isdigit(c) != 0;
      if (name == "isalpha") return std::isalpha(c) != 0;
      if (name == "isalnum") return std::isalnum(c) != 0;
      return is_py_space(ch);
    };
    if (name == "isspace" && !is_ascii(s)) {
      const std::vector<std::string> cps = split_code_points(s);
      return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), is_py_space_code_point));
    }
    return Value(std::all_of(s.begin(), s.end(), ok));
  }
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& obj, std::string_view name, const CallArgs& args) {
  const Dict& d = obj.as_dict();
  if (name == "get") {
    const Value* key = args.get(0, "key");
    if (!key) fail("get() takes at least 1 argument");
    const Value* found = key->is_string() ? d.find(key->as_string()) : nullptr;
    if (found) return *found;
    const Value* fallback = args.get(1, "default");
    return fallback ? *fallback : Value(nullptr);
  }
  if (name == "items") return apply_filter("items", obj, CallArgs{});
  if (name == "keys" || name == "values") {
    List out;
    for (const auto& [key, value] : d.items) out.push_back(name == "keys" ? Value(key) : value);
    return Value::list(std::move(out));
  }
  return std::nullopt;
}

Value make_function(std::string name, std::function<Value(Renderer&, const CallArgs&)> fn) {
  return Value(std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)}));
}

Value range(Renderer&, const CallArgs& args) {
  for (const Value& v : args.positional) {
    if (!v.is_int()) fail("range() arguments must be integers");
  }
  int64_t start = 0, stop = 0, step = 1;
  const auto& p = args.positional;
  if (p.size() == 1) {
    stop = p[0].as_int();
  } else if (p.size() == 2 || p.size() == 3) {
    start = p[0].as_int();
    stop = p[1].as_int();
    if (p.size() == 3) step = p[2].as_int();
  } else {
    fail("range() takes 1 to 3 integer arguments");
  }
  if (step == 0) fail("range() step must not be zero");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (out.size() >= kMaxListItems) fail("range() is too long");
    out.emplace_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return Value::list(std::move(out));
}

Value make_dict(const CallArgs& args, Dict::Kind kind) {
  Dict d;
  d.kind = kind;
  if (!args.positional.empty()) {
    if (args.positional.size() > 1 || !args.positional[0].is_dict()) {
      fail("namespace()/dict() take one mapping and keyword arguments");
    }
    d.items = args.positional[0].as_dict().items;
  }
  for (const auto& [key, value] : args.keywords) d.set(key, value);
  return Value::dict(std::move(d));
}

// C strftime of `pinned`, or of the system clock's local time when none is pinned.
std::string strftime_now(const std::string& fmt, const std::optional<std::tm>& pinned) {
  std::tm local{};
  if (pinned) {
    local = *pinned;
  } else {
    std::time_t now = std::time(nullptr);
    localtime_r(&now, &local);
  }
  if (fmt.empty()) return "";
  for (size_t size = 256; size <= 65536; size *= 4) {
    std::string buf(size, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &local);
    if (n > 0) return buf.substr(0, n);
  }
  return "";
}

}  // namespace

std::string strip_string(const std::string& s, const Value* chars, bool left, bool right) {
  auto strip_it = [&](auto in_set) {
    size_t begin = 0, end = s.size();
    if (left)
      while (begin < end && in_set(s[begin])) ++begin;
    if (right)
      while (end > begin && in_set(s[end - 1])) --end;
    return s.substr(begin, end - begin);
  };
  const bool whitespace = !chars || chars->is_none() || chars->is_undefined();
  if (whitespace && is_ascii(s)) return strip_it(is_py_space);
  if (!whitespace && !chars->is_string()) fail("strip() argument must be a string or none");
  const std::string set = whitespace ? std::string() : chars->as_string();
  if (whitespace || !is_ascii(set)) {
    // Multi-byte characters: strip whole code points, not bytes.
    std::vector<std::string> cps = split_code_points(s), strip_set = split_code_points(set);
    auto in = [&](const std::string& c) {
      if (whitespace) return is_py_space_code_point(c);
      return std::find(strip_set.begin(), strip_set.end(), c) != strip_set.end();
    };
    size_t begin = 0, end = cps.size();
    if (left)
      while (begin < end && in(cps[begin])) ++begin;
    if (right)
      while (end > begin && in(cps[end - 1])) --end;
    std::string out;
    for (size_t i = begin; i < end; ++i) out += cps[i];
    return out;
  }
  return strip_it([&](char c) { return set.find(c) != std::string::npos; });
}

std::optional<Value> call_method(const Value& obj, std::string_view name, const CallArgs& args) {
  if (obj.is_string()) return string_method(obj.as_string(), name, args);
  if (obj.is_dict() && obj.as_dict().kind == Dict::Kind::kPlain)
    return dict_method(obj, name, args);
  return std::nullopt;
}

const Value* find_global(std::string_view name) {
  static const std::unordered_map<std::string_view, Value> globals = {
      {"range", make_function("range", range)},
      {"namespace", make_function("namespace",
                                  [](Renderer&, const CallArgs& a) {
                                    return make_dict(a, Dict::Kind::kNamespace);
                                  })},
      {"dict",
       make_function(
           "dict", [](Renderer&, const CallArgs& a) { return make_dict(a, Dict::Kind::kPlain); })},
      {"raise_exception", make_function("raise_exception",
                                        [](Renderer&, const CallArgs& a) -> Value {
                                          const Value* message = a.get(0, "message");
                                          throw ChatTemplateError(ChatTemplateError::Kind::kRaised,
                                                                  message
                                                                      ? to_output_string(*message)
                                                                      : "raise_exception() called");
                                        })},
      {"strftime_now", make_function("strftime_now",
                                     [](Renderer& r, const CallArgs& a) {
                                       const Value* fmt = a.get(0, "format");
                                       return Value(strftime_now(
                                           fmt ? to_output_string(*fmt) : "%Y-%m-%d", r.now()));
                                     })},
  };
  auto it = globals.find(name);
  return it == globals.end() ? nullptr : &it->second;
}

}  // namespace pagedserve::model::chat
