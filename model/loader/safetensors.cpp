// One memory-mapped .safetensors file (SafetensorsFile) and the dtype helpers (dtype_name,
// dtype_size, to_f32); see safetensors.h. The header is untrusted input: every length, offset
// and shape is checked before a TensorView pointing into the mapping is handed out, so a
// truncated or hostile file yields a ModelError and never an out-of-bounds read.
#include "model/loader/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/loader/json_file.h"
#include "model/loader/mapped_file.h"
#include "model/loader/model_error.h"
#include "model/loader/shape_string.h"

namespace pagedserve::model {

namespace {

using nlohmann::json;

// The reference implementation's cap; real headers are well under 1 MiB, so anything larger
// is corruption and must not make us parse hundreds of megabytes of garbage.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr size_t kHeaderLengthBytes = 8;

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& problem) {
  throw ModelError(path.string() + ": " + problem);
}

uint64_t read_le_u64(const std::byte* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | std::to_integer<uint64_t>(p[i]);
  return value;
}

// Non-negative JSON integer, or nullopt for anything else (negative, float, string...).
std::optional<uint64_t> as_unsigned(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return std::nullopt;
}

struct ParsedEntry {
  TensorView view;
  uint64_t begin = 0;  // byte offsets within the data section
  uint64_t end = 0;
};

std::optional<DType> parse_dtype(const std::string& name) {
  if (name == "F32") return DType::F32;
  if (name == "F16") return DType::F16;
  if (name == "BF16") return DType::BF16;
  return std::nullopt;
}

// Validates one header entry against the data section [data, data + data_bytes).
ParsedEntry parse_entry(const std::filesystem::path& path, const std::string& name,
                        const json& entry, const std::byte* data, uint64_t data_bytes) {
  const std::string where = "tensor " + name;
  if (!entry.is_object()) fail(path, where + ": header entry must be an object");

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) fail(path, where + ": missing dtype");
  if (!dtype_it->is_string()) fail(path, where + ": dtype must be a string");
  const auto& dtype_text = dtype_it->get_ref<const std::string&>();
  const std::optional<DType> dtype = parse_dtype(dtype_text);
  if (!dtype) {
    fail(path,
         "unsupported dtype " + dtype_text + " for " + where + " (supported: F32, F16, BF16)");
  }

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) fail(path, where + ": missing shape");
  if (!shape_it->is_array()) fail(path, where + ": shape must be an array");
  ParsedEntry parsed;
  uint64_t elements = 1;
  bool overflow = false;
  for (const json& dim : *shape_it) {
    const std::optional<uint64_t> size = as_unsigned(dim);
    if (!size || *size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(path,
           where + ": shape entries must be non-negative integers, got " + detail::json_brief(dim));
    }
    parsed.view.shape.push_back(static_cast<int64_t>(*size));
    overflow = overflow || __builtin_mul_overflow(elements, *size, &elements);
  }
  uint64_t expected_bytes = 0;
  overflow = overflow || __builtin_mul_overflow(elements, dtype_size(*dtype), &expected_bytes);

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) fail(path, where + ": missing data_offsets");
  if (!offsets_it->is_array() || offsets_it->size() != 2 || !as_unsigned((*offsets_it)[0]) ||
      !as_unsigned((*offsets_it)[1])) {
    fail(path, where + ": data_offsets must be two non-negative integers, got " +
                   detail::json_brief(*offsets_it));
  }
  parsed.begin = *as_unsigned((*offsets_it)[0]);
  parsed.end = *as_unsigned((*offsets_it)[1]);
  const std::string range =
      "[" + std::to_string(parsed.begin) + ", " + std::to_string(parsed.end) + "]";
  if (parsed.begin > parsed.end) fail(path, where + ": data_offsets " + range + " are reversed");
  if (parsed.end > data_bytes) {
    fail(path, where + ": data_offsets " + range + " out of range: the data section has " +
                   std::to_string(data_bytes) + " bytes");
  }
  if (overflow || expected_bytes != parsed.end - parsed.begin) {
    fail(path, where + ": shape " + detail::shape_string(parsed.view.shape) + " of " + dtype_text +
                   " needs " +
                   (overflow ? std::string("more than 2^64") : std::to_string(expected_bytes)) +
                   " bytes but data_offsets " + range + " hold " +
                   std::to_string(parsed.end - parsed.begin));
  }

  parsed.view.name = name;
  parsed.view.dtype = *dtype;
  parsed.view.data = data + parsed.begin;
  parsed.view.num_bytes = static_cast<size_t>(expected_bytes);
  parsed.view.file = path;
  return parsed;
}

// The format packs tensors back to back: sorted by offset, each must start where the previous
// ended and the last must end at the end of the file. Anything else is corruption (or an
// attempt to alias one tensor's bytes as another's).
void check_layout(const std::filesystem::path& path, std::vector<const ParsedEntry*> entries,
                  uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const ParsedEntry* a, const ParsedEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const ParsedEntry* previous = nullptr;
  for (const ParsedEntry* entry : entries) {
    if (entry->begin < covered) {
      fail(path, "tensor " + entry->view.name + " overlaps tensor " + previous->view.name +
                     " (data_offsets start at " + std::to_string(entry->begin) +
                     ", before the previous tensor ends at " + std::to_string(covered) + ")");
    }
    if (entry->begin > covered) {
      fail(path, "gap in data section: bytes " + std::to_string(covered) + ".." +
                     std::to_string(entry->begin) + " before tensor " + entry->view.name +
                     " belong to no tensor");
    }
    covered = entry->end;
    previous = entry;
  }
  if (covered != data_bytes) {
    fail(path, "data section has " + std::to_string(data_bytes) + " bytes but tensors cover " +
                   std::to_string(covered) + " (trailing bytes)");
  }
}

// Reads the length prefix and JSON header of a mapped file of `file_bytes` bytes (at least 8)
// and validates every entry and the layout of the data section.
std::vector<ParsedEntry> parse_header(const std::filesystem::path& path, const std::byte* base,
                                      uint64_t file_bytes) {
  const uint64_t header_bytes = read_le_u64(base);
  if (header_bytes == 0) fail(path, "header length is 0 (no JSON header)");
  if (header_bytes > kMaxHeaderBytes) {
    fail(path, "header length " + std::to_string(header_bytes) + " exceeds the " +
                   std::to_string(kMaxHeaderBytes) + "-byte limit (corrupt file?)");
  }
  if (header_bytes > file_bytes - kHeaderLengthBytes) {
    fail(path, "header length " + std::to_string(header_bytes) + " exceeds file size " +
                   std::to_string(file_bytes) + " (truncated?)");
  }
  const auto* header_text = reinterpret_cast<const char*>(base + kHeaderLengthBytes);
  // A valid header nests three levels (entry -> shape); a little slack for __metadata__.
  constexpr int kMaxHeaderDepth = 8;
  const json header = detail::parse_json(header_text, header_text + header_bytes, kMaxHeaderDepth,
                                         path.string() + ": header is not valid JSON");
  if (!header.is_object()) {
    fail(path, "header must be a JSON object, got " + detail::json_kind(header));
  }

  const std::byte* data = base + kHeaderLengthBytes + header_bytes;
  const uint64_t data_bytes = file_bytes - kHeaderLengthBytes - header_bytes;
  std::vector<ParsedEntry> entries;
  entries.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "__metadata__ must be a JSON object");
      continue;
    }
    entries.push_back(parse_entry(path, name, entry, data, data_bytes));
  }
  std::vector<const ParsedEntry*> order;
  order.reserve(entries.size());
  for (const ParsedEntry& entry : entries) order.push_back(&entry);
  check_layout(path, std::move(order), data_bytes);
  return entries;
}

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  MappedFile mapped = MappedFile::open(path);
  const auto file_bytes = static_cast<uint64_t>(mapped.size());
  if (file_bytes < kHeaderLengthBytes) {
    fail(path, "file is " + std::to_string(file_bytes) +
                   " bytes, too short for the 8-byte header length (truncated?)");
  }

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = std::move(mapped);
  const std::byte* base = file->mapping_.data();

  for (ParsedEntry& entry : parse_header(path, base, file_bytes)) {
    std::string name = entry.view.name;
    file->tensors_.emplace(std::move(name), std::move(entry.view));
  }
  return file;
}

SafetensorsFile::~SafetensorsFile() = default;

}  // namespace pagedserve::model
