// MappedFile: a whole file mapped read-only, unmapped on destruction. Shared by the
// safetensors and GGUF readers, whose tensors are views into the mapping.
#pragma once

#include <cstddef>
#include <filesystem>

namespace pagedserve::model {

class MappedFile {
 public:
  // Throws ModelError "<path>: file not found", "...: cannot open: <why>", "...: not a regular
  // file" or "...: mmap failed: <why>". An empty file maps to no bytes.
  static MappedFile open(const std::filesystem::path& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return static_cast<const std::byte*>(mapping_); }
  size_t size() const { return bytes_; }

 private:
  void* mapping_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace pagedserve::model
