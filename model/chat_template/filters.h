// The builtin library: filters (`x|name(args)`) in filters.cpp, tests (`x is name`) in
// jinja_tests.cpp, and Python str/dict methods plus global functions (range, namespace,
// raise_exception, ...) in methods.cpp. Names are checked at parse time, so an unknown
// filter fails before rendering.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "model/chat_template/value.h"

namespace pagedserve::model::chat {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// Throw ValueError on bad input; the evaluator adds the source position.
Value apply_filter(std::string_view name, const Value& input, const CallArgs& args);
bool apply_test(std::string_view name, const Value& input, const CallArgs& args);

// obj.name(args) for the str and dict methods templates use. nullopt when obj's type has no
// method of that name here (the caller reports it).
std::optional<Value> call_method(const Value& obj, std::string_view name, const CallArgs& args);

// A global function by name (range, namespace, dict, raise_exception, strftime_now), or
// nullptr. The values are shared, immutable and safe to use from any thread.
const Value* find_global(std::string_view name);

// Python str.strip/lstrip/rstrip: `chars` none strips whitespace.
std::string strip_string(const std::string& s, const Value* chars, bool left, bool right);

}  // namespace pagedserve::model::chat
