// Jinja2's builtin filters, the subset chat templates use, with jinja2's argument
// names and defaults (e.g. `default(value, default_value='', boolean=false)`). Case mapping
// (upper, lower, title, capitalize) is ASCII-only: other characters pass through unchanged.
#include "model/chat_template/filters.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_map>

#include "model/chat_template/builtin_args.h"
#include "model/chat_template/operations.h"

namespace pagedserve::model::chat {

namespace {

[[noreturn]] void fail(const std::string& message) { throw ValueError(message); }

// jinja2's title filter: capitalise each piece between runs of -, whitespace, ( { [ <.
std::string title_filter(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char c : s) {
    bool delimiter = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
                     c == '\v' || c == '(' || c == '{' || c == '[' || c == '<';
    out += delimiter ? c : word_start ? ascii_upper(c) : ascii_lower(c);
    word_start = delimiter;
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out = map_chars(s, ascii_lower);
  if (!out.empty()) out[0] = ascii_upper(out[0]);
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Item lookup along a dotted path ("user.name", "items.0"), as jinja2's attribute= does.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t dot = std::min(path.find('.', begin), path.size());
    std::string part = path.substr(begin, dot - begin);
    int64_t index = 0;
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    bool numeric = !part.empty() && ec == std::errc() && ptr == part.data() + part.size();
    v = numeric ? get_item(v, Value(index)) : get_item(v, Value(part));
    begin = dot + 1;
  }
  return v;
}

// Applies attribute= and the case folding sort/unique/min/max use by default.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value key = attribute.is_string() ? attribute_path(item, attribute.as_string()) : item;
  if (!case_sensitive && key.is_string()) return Value(map_chars(key.as_string(), ascii_lower));
  return key;
}

// Arguments after the first `skip` positional ones, for select/selectattr's test arguments.
CallArgs rest_args(const CallArgs& args, size_t skip) {
  CallArgs rest;
  for (size_t i = skip; i < args.positional.size(); ++i)
    rest.positional.push_back(args.positional[i]);
  return rest;
}

Value select_items(const Value& input, const CallArgs& args, bool by_attribute, bool keep) {
  size_t test_index = by_attribute ? 1 : 0;
  std::string attribute = by_attribute ? str_arg(args, 0, "attribute", "") : "";
  const Value* test = args.get(test_index, "");
  if (test && !test->is_string()) fail("select: the test name must be a string");
  if (test && !is_known_test(test->as_string())) fail("unknown test '" + test->as_string() + "'");
  CallArgs test_args = rest_args(args, test_index + 1);
  List out;
  for (const auto iterated = iterate(input); const Value& item : *iterated) {
    Value v = by_attribute ? attribute_path(item, attribute) : item;
    bool passed = test ? apply_test(test->as_string(), v, test_args) : v.truthy();
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value map_items(const Value& input, const CallArgs& args) {
  List out;
  if (const Value* attribute = args.get(SIZE_MAX, "attribute")) {
    const Value* fallback = args.get(SIZE_MAX, "default");
    for (const auto iterated = iterate(input); const Value& item : *iterated) {
      Value v = attribute_path(item, to_output_string(*attribute));
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string())
    fail("map: expected a filter name or attribute=");
  const std::string& filter = args.positional[0].as_string();
  if (!is_known_filter(filter)) fail("unknown filter '" + filter + "'");
  CallArgs filter_args = rest_args(args, 1);
  filter_args.keywords = args.keywords;
  for (const auto iterated = iterate(input); const Value& item : *iterated)
    out.push_back(apply_filter(filter, item, filter_args));
  return Value::list(std::move(out));
}

Value to_int(const Value& v, const CallArgs& args) {
  Value fallback = arg(args, 0, "default", Value(int64_t{0}));
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t{v.as_bool()});
  if (v.is_float()) {
    double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value(static_cast<int64_t>(d));
  }
  if (!v.is_string()) return fallback;
  std::string s = strip_string(v.as_string(), nullptr, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  const char* first = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  int64_t i = 0;
  auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), i);
  if (!s.empty() && ec == std::errc() && ptr == s.data() + s.size()) return Value(i);
  double d = 0;
  auto [fptr, fec] = std::from_chars(first, s.data() + s.size(), d);
  if (s.empty() || fec != std::errc() || fptr != s.data() + s.size()) return fallback;
  return to_int(Value(d), args);
}

Value to_float(const Value& v, const CallArgs& args) {
  Value fallback = arg(args, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.to_double());
  if (!v.is_string()) return fallback;
  std::string s = strip_string(v.as_string(), nullptr, true, true);
  const char* first = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  double d = 0;
  auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), d);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return fallback;
  return Value(d);
}

Value tojson(const Value& v, const CallArgs& args) {
  JsonDumpOptions options;
  Value indent = arg(args, 0, "indent");
  if (indent.is_int())
    options.indent = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  options.sort_keys = arg(args, SIZE_MAX, "sort_keys").truthy();
  options.ensure_ascii = arg(args, SIZE_MAX, "ensure_ascii").truthy();
  Value separators = arg(args, SIZE_MAX, "separators");
  if (separators.is_list() && separators.as_list().size() == 2) {
    options.separators = std::make_pair(to_output_string(separators.as_list()[0]),
                                        to_output_string(separators.as_list()[1]));
  }
  return Value(dump_json(v, options));
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    std::vector<std::string> chars = split_code_points(s);
    for (size_t i = 0; i <= chars.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += to;
      if (i < chars.size()) out += chars[i];
    }
    return out;
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::string indent(const std::string& s, const CallArgs& args) {
  Value width = arg(args, 0, "width", Value(int64_t{4}));
  std::string pad = width.is_string()
                        ? width.as_string()
                        : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                          width.is_int() ? width.as_int() : 4, 0, 256)),
                                      ' ');
  bool first = arg(args, 1, "first").truthy();
  bool blank = arg(args, 2, "blank").truthy();
  std::string out;
  size_t begin = 0;
  bool first_line = true;
  const std::string text = s + "\n";  // as jinja2 does, so a trailing newline survives
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    std::string line = text.substr(begin, end - begin);
    if (!first_line) out += '\n';
    if ((!first_line || first) && (blank || !line.empty())) out += pad;
    out += line;
    first_line = false;
    begin = end + 1;
  }
  return out;
}

Value sorted(const Value& input, const CallArgs& args) {
  bool reverse = arg(args, 0, "reverse").truthy();
  bool case_sensitive = arg(args, 1, "case_sensitive").truthy();
  Value attribute = arg(args, 2, "attribute");
  List items = *iterate(input);
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    int c =
        three_way(sort_key(a, attribute, case_sensitive), sort_key(b, attribute, case_sensitive));
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(items));
}

Value extreme(const Value& input, const CallArgs& args, bool want_max) {
  bool case_sensitive = arg(args, 0, "case_sensitive").truthy();
  Value attribute = arg(args, 1, "attribute");
  auto items = iterate(input);
  if (items->empty()) return Value(Undefined{"min/max of an empty sequence"});
  const Value* best = &(*items)[0];
  for (const Value& item : *items) {
    int c = three_way(sort_key(item, attribute, case_sensitive),
                      sort_key(*best, attribute, case_sensitive));
    if (want_max ? c > 0 : c < 0) best = &item;
  }
  return *best;
}

using FilterFn = Value (*)(const Value&, const CallArgs&);

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"trim",
       [](const Value& v, const CallArgs& a) {
         const Value* chars = a.get(0, "chars");
         return Value(strip_string(to_output_string(v), chars, true, true));
       }},
      {"length", [](const Value& v, const CallArgs&) { return Value(length(v)); }},
      {"count", [](const Value& v, const CallArgs&) { return Value(length(v)); }},
      {"upper", [](const Value& v,
                   const CallArgs&) { return Value(map_chars(to_output_string(v), ascii_upper)); }},
      {"lower", [](const Value& v,
                   const CallArgs&) { return Value(map_chars(to_output_string(v), ascii_lower)); }},
      {"title",
       [](const Value& v, const CallArgs&) { return Value(title_filter(to_output_string(v))); }},
      {"capitalize",
       [](const Value& v, const CallArgs&) { return Value(capitalize(to_output_string(v))); }},
      {"default",
       [](const Value& v, const CallArgs& a) {
         bool boolean = arg(a, 1, "boolean").truthy();
         if (v.is_undefined() || (boolean && !v.truthy()))
           return arg(a, 0, "default_value", Value(""));
         return v;
       }},
      {"join",
       [](const Value& v, const CallArgs& a) {
         std::string sep = str_arg(a, 0, "d", "");
         Value attribute = arg(a, 1, "attribute");
         std::string out;
         bool first = true;
         for (const auto iterated = iterate(v); const Value& item : *iterated) {
           if (!first) out += sep;
           first = false;
           append_output_string(
               attribute.is_undefined() ? item : attribute_path(item, to_output_string(attribute)),
               out);
         }
         return Value(std::move(out));
       }},
      {"tojson", tojson},
      {"first",
       [](const Value& v, const CallArgs&) {
         auto items = iterate(v);
         return items->empty() ? Value(Undefined{"first item"}) : items->front();
       }},
      {"last",
       [](const Value& v, const CallArgs&) {
         auto items = iterate(v);
         return items->empty() ? Value(Undefined{"last item"}) : items->back();
       }},
      {"list", [](const Value& v, const CallArgs&) { return Value::list(*iterate(v)); }},
      {"string", [](const Value& v, const CallArgs&) { return Value(to_output_string(v)); }},
      {"int", to_int},
      {"float", to_float},
      {"items",
       [](const Value& v, const CallArgs&) {
         if (v.is_undefined()) return Value::list();
         if (!v.is_dict())
           fail(std::string("items: expected a mapping, got '") + v.type_name() + "'");
         List out;
         for (const auto& [key, value] : v.as_dict().items)
           out.push_back(Value::list({Value(key), value}));
         return Value::list(std::move(out));
       }},
      {"replace",
       [](const Value& v, const CallArgs& a) {
         return Value(replace_all(to_output_string(v), str_arg(a, 0, "old", ""),
                                  str_arg(a, 1, "new", ""), int_arg(a, 2, "count", -1)));
       }},
      {"selectattr",
       [](const Value& v, const CallArgs& a) { return select_items(v, a, true, true); }},
      {"rejectattr",
       [](const Value& v, const CallArgs& a) { return select_items(v, a, true, false); }},
      {"select", [](const Value& v, const CallArgs& a) { return select_items(v, a, false, true); }},
      {"reject",
       [](const Value& v, const CallArgs& a) { return select_items(v, a, false, false); }},
      {"map", map_items},
      {"safe", [](const Value& v, const CallArgs&) { return Value(to_output_string(v)); }},
      {"escape",
       [](const Value& v, const CallArgs&) { return Value(html_escape(to_output_string(v))); }},
      {"abs",
       [](const Value& v, const CallArgs&) {
         if (v.is_float()) return Value(std::fabs(v.as_float()));
         return v.is_number() && v.to_double() < 0 ? negate(v)
                                                   : binary_op("+", v, Value(int64_t{0}));
       }},
      {"round",
       [](const Value& v, const CallArgs& a) {
         if (!v.is_number())
           fail(std::string("round: expected a number, got '") + v.type_name() + "'");
         double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(
                                           int_arg(a, 0, "precision", 0), -15, 15)));
         std::string method = str_arg(a, 1, "method", "common");
         double x = v.to_double() * scale;
         double r = method == "ceil"    ? std::ceil(x)
                    : method == "floor" ? std::floor(x)
                                        : std::nearbyint(x);
         return Value(r / scale);
       }},
      {"reverse",
       [](const Value& v, const CallArgs&) {
         List items = *iterate(v);
         std::reverse(items.begin(), items.end());
         if (!v.is_string()) return Value::list(std::move(items));
         std::string out;
         for (const Value& c : items) out += c.as_string();
         return Value(std::move(out));
       }},
      {"sum",
       [](const Value& v, const CallArgs& a) {
         Value attribute = arg(a, 0, "attribute");
         Value total = arg(a, 1, "start", Value(int64_t{0}));
         for (const auto iterated = iterate(v); const Value& item : *iterated) {
           total = binary_op(
               "+", total,
               attribute.is_string() ? attribute_path(item, attribute.as_string()) : item);
         }
         return total;
       }},
      {"min", [](const Value& v, const CallArgs& a) { return extreme(v, a, false); }},
      {"max", [](const Value& v, const CallArgs& a) { return extreme(v, a, true); }},
      {"unique",
       [](const Value& v, const CallArgs& a) {
         bool case_sensitive = arg(a, 0, "case_sensitive").truthy();
         Value attribute = arg(a, 1, "attribute");
         List out, seen;
         for (const auto iterated = iterate(v); const Value& item : *iterated) {
           Value key = sort_key(item, attribute, case_sensitive);
           if (std::none_of(seen.begin(), seen.end(),
                            [&](const Value& s) { return values_equal(s, key); })) {
             seen.push_back(key);
             out.push_back(item);
           }
         }
         return Value::list(std::move(out));
       }},
      {"sort", sorted},
      {"dictsort",
       [](const Value& v, const CallArgs& a) {
         if (!v.is_dict()) fail("dictsort: expected a mapping");
         bool case_sensitive = arg(a, 0, "case_sensitive").truthy();
         bool by_value = str_arg(a, 1, "by", "key") == "value";
         bool reverse = arg(a, 2, "reverse").truthy();
         List pairs;
         for (const auto& [key, value] : v.as_dict().items)
           pairs.push_back(Value::list({Value(key), value}));
         std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
           size_t i = by_value ? 1 : 0;
           int c = three_way(sort_key(x.as_list()[i], Value(), case_sensitive),
                             sort_key(y.as_list()[i], Value(), case_sensitive));
           return reverse ? c > 0 : c < 0;
         });
         return Value::list(std::move(pairs));
       }},
      {"indent",
       [](const Value& v, const CallArgs& a) { return Value(indent(to_output_string(v), a)); }},
      {"attr",
       [](const Value& v, const CallArgs& a) { return get_attr(v, str_arg(a, 0, "name", "")); }},
      {"wordcount",
       [](const Value& v, const CallArgs&) {
         CallArgs none;
         return Value(static_cast<int64_t>(
             call_method(Value(to_output_string(v)), "split", none)->as_list().size()));
       }},
  };
  return table;
}

const std::unordered_map<std::string_view, std::string_view>& filter_aliases() {
  static const std::unordered_map<std::string_view, std::string_view> aliases = {
      {"d", "default"}, {"e", "escape"}, {"forceescape", "escape"}};
  return aliases;
}

std::string_view canonical_filter(std::string_view name) {
  auto it = filter_aliases().find(name);
  return it == filter_aliases().end() ? name : it->second;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return filter_table().count(canonical_filter(name)) > 0;
}

Value apply_filter(std::string_view name, const Value& input, const CallArgs& args) {
  auto it = filter_table().find(canonical_filter(name));
  if (it == filter_table().end()) fail("unknown filter '" + std::string(name) + "'");
  return it->second(input, args);
}

}  // namespace pagedserve::model::chat
