// allocate_huge_aligned / HugePageAllocator: large buffers are 2 MiB aligned, every byte is
// usable, and freeing with the same size works (under ASan: no leak, no bad free); small ones
// keep the requested alignment.
#include "kernels/cpu/huge_page_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace pagedserve::kernels {
namespace {

bool aligned_to(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

TEST(HugePageAllocator, LargeBuffersAre2MiBAlignedAndFullyUsable) {
  for (std::size_t bytes : {kHugePageMinBytes, kHugePageBytes - 1, kHugePageBytes,
                            kHugePageBytes + 4096 + 3, std::size_t{7} << 20}) {
    SCOPED_TRACE(bytes);
    auto* p = static_cast<unsigned char*>(allocate_huge_aligned(bytes, 64));
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(aligned_to(p, kHugePageBytes));
    std::memset(p, 0xab, bytes);
    EXPECT_EQ(p[0], 0xab);
    EXPECT_EQ(p[bytes - 1], 0xab);
    free_huge_aligned(p, bytes, 64);
  }
}

TEST(HugePageAllocator, SmallBuffersKeepTheirAlignment) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{64}, kHugePageMinBytes - 1}) {
    SCOPED_TRACE(bytes);
    void* p = allocate_huge_aligned(bytes, 64);
    EXPECT_TRUE(aligned_to(p, 64));
    std::memset(p, 1, bytes);
    free_huge_aligned(p, bytes, 64);
  }
  free_huge_aligned(nullptr, 123, 64);  // a no-op, like delete of null
}

TEST(HugePageAllocator, VectorsOfAnySizeWork) {
  for (std::size_t n : {std::size_t{3}, std::size_t{1} << 18, (std::size_t{3} << 20) + 5}) {
    std::vector<float, HugePageAllocator<float>> v(n, 2.0f);
    EXPECT_EQ(v.front(), 2.0f);
    EXPECT_EQ(v.back(), 2.0f);
    if (n * sizeof(float) >= kHugePageMinBytes) {
      EXPECT_TRUE(aligned_to(v.data(), kHugePageBytes));
    }
    v.resize(n / 2);
    v.shrink_to_fit();  // reallocates: frees the old buffer with its own size
    EXPECT_EQ(v.back(), 2.0f);
  }
}

}  // namespace
}  // namespace pagedserve::kernels
