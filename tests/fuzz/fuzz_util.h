// Helpers every libFuzzer harness shares: where ../shared is, an in-memory file for APIs that
// only read paths (memfd, reached as /proc/self/fd/N), and FUZZ_CHECK, which turns a broken
// invariant into a crash libFuzzer records with its input.
//
// The harnesses' contract: an exception the API documents for bad input is a normal outcome;
// a crash, a sanitizer report, any other exception, a failed FUZZ_CHECK or a timeout is a bug.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace pagedserve::fuzz {

// PAGEDSERVE_SHARED in the environment, else the folder configured at build time.
inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("PAGEDSERVE_SHARED")) return env;
  return PAGEDSERVE_SHARED_DIR;
}

[[noreturn]] inline void fail(const char* file, int line, const char* what,
                              const std::string& detail) {
  std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n  %s\n", file, line, what, detail.c_str());
  std::abort();
}

#define FUZZ_CHECK(cond, detail)                                                \
  do {                                                                          \
    if (!(cond)) ::pagedserve::fuzz::fail(__FILE__, __LINE__, #cond, (detail)); \
  } while (0)

// An anonymous in-memory file holding `bytes`; path() names it for open()/mmap() callers.
// Never touches the disk, so a harness can run millions of inputs without wearing it.
class MemFile {
 public:
  MemFile(std::string_view name, std::string_view bytes) {
    fd_ = memfd_create(std::string(name).c_str(), MFD_CLOEXEC);
    if (fd_ < 0) std::abort();
    size_t written = 0;
    while (written < bytes.size()) {
      ssize_t n = ::write(fd_, bytes.data() + written, bytes.size() - written);
      if (n <= 0) std::abort();
      written += static_cast<size_t>(n);
    }
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  std::filesystem::path path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_ = -1;
};

}  // namespace pagedserve::fuzz
