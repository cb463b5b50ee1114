// Operations on Values with jinja2/Python semantics: attribute and item access (lenient: a
// miss gives Undefined), slicing, arithmetic, comparison, membership, iteration and length.
// Shared by the evaluator, the filters and the methods; all throw ValueError on type errors.
#pragma once

#include <memory>
#include <string_view>

#include "model/chat_template/value.h"

namespace pagedserve::model::chat {

// Limits that keep a hostile template or request from exhausting memory.
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;
inline constexpr size_t kMaxListItems = size_t{1} << 20;

// obj.name: a dict's key, else Undefined (also on Undefined itself, unlike jinja2's strict
// default, so optional fields of optional fields read as undefined rather than failing).
Value get_attr(const Value& obj, std::string_view name);
// obj[key]: dict key, list/str index (negative counts from the end); misses give Undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on a list or str; each bound may be none/undefined (omitted).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// op is one of + - * / // % ** ~.
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value negate(const Value& v);
// op is one of == != < <= > >= in "not in".
bool compare(std::string_view op, const Value& a, const Value& b);
// `item in container`.
bool contains(const Value& container, const Value& item);
// Python's ordering for sort/min/max and `<`; throws for incomparable types.
int three_way(const Value& a, const Value& b);

// The items a for loop visits: a list's items, a dict's keys, a str's characters, nothing
// for Undefined. Lists are returned without copying.
std::shared_ptr<const List> iterate(const Value& v);
// len(v); Undefined has length 0.
int64_t length(const Value& v);

// "'x' is undefined" style message for using an Undefined where a value is needed.
std::string undefined_message(const Value& v);

}  // namespace pagedserve::model::chat
