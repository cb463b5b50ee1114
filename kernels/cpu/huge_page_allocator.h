// Memory for large, long-lived buffers the CPU kernels stream through (packed weights, the
// paged KV cache): allocations of 1 MiB or more are 2 MiB aligned and advised to use
// transparent huge pages, so streaming weights and walking scattered KV blocks do not miss the
// TLB on every 4 KiB page. Only a hint: where the OS has no THP the buffer is ordinary memory.
//
// Large buffers are mapped fresh with mmap rather than taken from operator new: the heap can
// hand back memory that a freed temporary (a weight being stacked or widened at load) already
// touched with 4 KiB pages, and such pages stay 4 KiB until khugepaged collapses them, seconds
// to minutes later. Measured: half of the benchmark model's q/k/v and down weights were still
// 4 KiB-mapped during a whole `bench throughput` run, and those matmuls streamed at ~50 GB/s
// instead of ~75.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace pagedserve::kernels {

constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
// From this size on a buffer gets its own huge pages (rounded up to whole 2 MiB pages: at
// most 1 MiB of padding per buffer). The F16 model's 1.2 MB o-projections streamed ~20%
// slower on 4 KiB pages.
constexpr std::size_t kHugePageMinBytes = kHugePageBytes / 2;

// `bytes` of memory, aligned to 2 MiB and advised huge when bytes >= kHugePageMinBytes, else
// to `small_alignment` (a power of two). Not initialised. Throws std::bad_alloc.
inline void* allocate_huge_aligned(std::size_t bytes, std::size_t small_alignment) {
#ifdef __linux__
  if (bytes >= kHugePageMinBytes) {
    const std::size_t length = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    // Map one huge page more than needed, then trim to a 2 MiB-aligned range.
    void* mapped = mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) throw std::bad_alloc();
    const auto base = reinterpret_cast<std::uintptr_t>(mapped);
    const std::uintptr_t aligned = (base + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
    if (aligned > base) munmap(mapped, aligned - base);
    const std::uintptr_t tail = aligned + length;
    const std::uintptr_t mapped_end = base + length + kHugePageBytes;
    if (mapped_end > tail) munmap(reinterpret_cast<void*>(tail), mapped_end - tail);
    // Before the first touch, so the pages fault in huge. A hint: failure is harmless.
    madvise(reinterpret_cast<void*>(aligned), length, MADV_HUGEPAGE);
    return reinterpret_cast<void*>(aligned);
  }
#endif
  return ::operator new (bytes, std::align_val_t{small_alignment});
}

// Frees what allocate_huge_aligned(bytes, small_alignment) returned.
inline void free_huge_aligned(void* p, std::size_t bytes, std::size_t small_alignment) {
  if (p == nullptr) return;
#ifdef __linux__
  if (bytes >= kHugePageMinBytes) {
    munmap(p, (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
    return;
  }
#endif
  ::operator delete (p, std::align_val_t{small_alignment});
}

// A std allocator over allocate_huge_aligned (the paged KV cache's buffers).
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr std::size_t kHugePage = kHugePageBytes;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: allocators convert implicitly

  T* allocate(std::size_t n) {
    // The container value-initialises after this: the first touch, so the pages map huge.
    return static_cast<T*>(allocate_huge_aligned(n * sizeof(T), alignof(std::max_align_t)));
  }
  void deallocate(T* p, std::size_t n) {
    free_huge_aligned(p, n * sizeof(T), alignof(std::max_align_t));
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

// One zero-filled buffer of `bytes` from allocate_huge_aligned (the paged KV cache's pools),
// owned and freed like a unique_ptr. Zeroed with one memset: a std::vector<std::byte> would
// value-initialise (and destroy) byte by byte in unoptimised builds, seconds per engine under
// the sanitizers.
class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  explicit HugePageBuffer(std::size_t bytes)
      : data_(static_cast<std::byte*>(allocate_huge_aligned(bytes, alignof(std::max_align_t)))),
        bytes_(bytes) {
    // The first touch, after the huge-page advice, so the pages map huge.
    std::memset(data_, 0, bytes_);
  }
  HugePageBuffer(HugePageBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept {
    if (this != &other) {
      free_huge_aligned(data_, bytes_, alignof(std::max_align_t));
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;
  ~HugePageBuffer() { free_huge_aligned(data_, bytes_, alignof(std::max_align_t)); }

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace pagedserve::kernels
