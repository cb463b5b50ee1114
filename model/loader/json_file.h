// Reading a small JSON file (config.json, model.safetensors.index.json) into nlohmann::json,
// with every failure turned into a ModelError that names the file. Private to model/loader.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace pagedserve::model::detail {

// Parses untrusted JSON text, refusing nesting deeper than `max_depth`: a header of a million
// '[' would otherwise build a million nested arrays (gigabytes) and later overflow the stack
// in recursive code such as dump(). Throws ModelError "<error_prefix>: <why>", e.g.
// "x.safetensors: header is not valid JSON: nesting deeper than 8 levels".
nlohmann::json parse_json(const char* begin, const char* end, int max_depth,
                          const std::string& error_prefix);

// Throws ModelError "<path>: file not found", "<path>: cannot read ...", or
// "<path>: invalid JSON: ..." (nlohmann's message says where the parse stopped).
nlohmann::json read_json_file(const std::filesystem::path& path);

// A short rendering of a value for an error message: small scalars and flat containers as
// JSON, anything longer or nested as its kind, so a hostile value cannot flood the message.
std::string json_brief(const nlohmann::json& value);

// "string", "number", "array", ...: for "field X must be Y, got Z" messages.
std::string json_kind(const nlohmann::json& value);

}  // namespace pagedserve::model::detail
