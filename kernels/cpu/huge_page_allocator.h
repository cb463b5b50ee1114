// HugePageAllocator: a std allocator for large, long-lived buffers the CPU kernels stream
// through (the paged KV cache): allocations of 2 MiB or more are 2 MiB aligned and advised to
// use transparent huge pages, so walking scattered KV blocks does not miss the TLB on every
// 4 KiB page. Only a hint: where the OS has no THP the buffer is ordinary memory.
#pragma once

#include <cstddef>
#include <new>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace pagedserve::kernels {

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: allocators convert implicitly

  static std::size_t alignment_for(std::size_t bytes) {
    return bytes >= kHugePage ? kHugePage : alignof(std::max_align_t);
  }

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    void* p = ::operator new (bytes, std::align_val_t{alignment_for(bytes)});
#ifdef __linux__
    // Before the first touch (the container value-initialises after this), so it maps huge.
    if (bytes >= kHugePage) madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) {
    ::operator delete (p, std::align_val_t{alignment_for(n * sizeof(T))});
  }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

}  // namespace pagedserve::kernels
