// Reads config.json and safetensors index files; see json_file.h.
#include "model/loader/json_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>

#include "model/loader/model_error.h"

namespace pagedserve::model::detail {

namespace {

// Small metadata files only: anything bigger is a wrong path, not a config.
constexpr std::uintmax_t kMaxJsonFileBytes = 64u << 20;
// config.json nests a few levels (rope_scaling, quantization_config); the index two.
constexpr int kMaxJsonFileDepth = 32;
constexpr size_t kMaxBriefChars = 80;

struct TooDeep {};

}  // namespace

nlohmann::json parse_json(const char* begin, const char* end, int max_depth,
                          const std::string& error_prefix) {
  using nlohmann::json;
  // The callback sees each container as it opens; throwing stops the parse before the deep
  // structure is built.
  const json::parser_callback_t limit_depth = [max_depth](int depth, json::parse_event_t event,
                                                          json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth) {
      throw TooDeep{};
    }
    return true;
  };
  try {
    return json::parse(begin, end, limit_depth);
  } catch (const TooDeep&) {
    throw ModelError(error_prefix + ": nesting deeper than " + std::to_string(max_depth) +
                     " levels");
  } catch (const json::exception& e) {
    throw ModelError(error_prefix + ": " + e.what());
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw ModelError(path.string() + ": file not found");
  if (!std::filesystem::is_regular_file(status)) {
    throw ModelError(path.string() + ": not a regular file");
  }
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw ModelError(path.string() + ": cannot read size: " + ec.message());
  if (size > kMaxJsonFileBytes) {
    throw ModelError(path.string() + ": file is " + std::to_string(size) +
                     " bytes, larger than the " + std::to_string(kMaxJsonFileBytes) +
                     "-byte limit for a JSON metadata file");
  }

  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(path.string() + ": cannot open: " + std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ModelError(path.string() + ": read failed");

  return parse_json(text.data(), text.data() + text.size(), kMaxJsonFileDepth,
                    path.string() + ": invalid JSON");
}

std::string json_kind(const nlohmann::json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "float";
  return value.type_name();
}

std::string json_brief(const nlohmann::json& value) {
  if (value.is_structured()) {
    for (const auto& item : value) {
      if (item.is_structured()) return json_kind(value);
    }
    if (value.size() > 8) return json_kind(value);
  }
  std::string text = value.dump();
  if (text.size() > kMaxBriefChars) return json_kind(value);
  return text;
}

}  // namespace pagedserve::model::detail
