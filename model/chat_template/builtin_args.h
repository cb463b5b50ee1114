// Small helpers shared by the builtin filters, tests and methods: reading a call's
// arguments by position or keyword (jinja2 accepts either) with defaults, and ASCII case
// mapping.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include "model/chat_template/value.h"

namespace pagedserve::model::chat {

[[noreturn]] inline void fail_value(const std::string& message) { throw ValueError(message); }

inline Value arg(const CallArgs& args, size_t index, std::string_view name,
                 Value fallback = Value()) {
  const Value* v = args.get(index, name);
  return v ? *v : fallback;
}

inline int64_t int_arg(const CallArgs& args, size_t index, std::string_view name,
                       int64_t fallback) {
  const Value* v = args.get(index, name);
  if (!v || v->is_none() || v->is_undefined()) return fallback;
  if (v->is_int()) return v->as_int();
  if (v->is_bool()) return v->as_bool();
  fail_value("argument '" + std::string(name) + "' must be an integer, not '" + v->type_name() +
             "'");
}

inline std::string str_arg(const CallArgs& args, size_t index, std::string_view name,
                           std::string fallback) {
  const Value* v = args.get(index, name);
  return v && !v->is_undefined() && !v->is_none() ? to_output_string(*v) : fallback;
}

inline char ascii_upper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }
inline char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

inline std::string map_chars(std::string s, char (*fn)(char)) {
  std::transform(s.begin(), s.end(), s.begin(), fn);
  return s;
}

}  // namespace pagedserve::model::chat
