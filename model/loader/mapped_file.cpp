// MappedFile: open, fstat and mmap with every failure named; see mapped_file.h.
#include "model/loader/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "model/loader/model_error.h"

namespace pagedserve::model {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& problem) {
  throw ModelError(path.string() + ": " + problem);
}

// Closes the descriptor on every path out of open(); the mapping outlives it.
struct FdGuard {
  int fd;
  ~FdGuard() { ::close(fd); }
};

}  // namespace

MappedFile MappedFile::open(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) fail(path, "file not found");
    fail(path, std::string("cannot open: ") + std::strerror(errno));
  }
  const FdGuard guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  MappedFile file;
  if (st.st_size == 0) return file;  // mmap refuses zero bytes; the readers say "too short"
  void* mapping = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping == MAP_FAILED) fail(path, std::string("mmap failed: ") + std::strerror(errno));
  file.mapping_ = mapping;
  file.bytes_ = static_cast<size_t>(st.st_size);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (mapping_ != nullptr) ::munmap(mapping_, bytes_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, bytes_);
}

}  // namespace pagedserve::model
