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

TEST(HugePageBuffer, ZeroedAlignedMovableAndFreedOnce) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4096}, kHugePageMinBytes + 3}) {
    HugePageBuffer buffer(bytes);
    ASSERT_NE(buffer.data(), nullptr);
    EXPECT_EQ(buffer.size(), bytes);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.data()) % alignof(std::max_align_t), 0u);
    if (bytes >= kHugePageMinBytes) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.data()) % kHugePageBytes, 0u);
    }
    for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(buffer.data()[i], std::byte{0}) << i;
    buffer.data()[bytes - 1] = std::byte{7};
    // Moves hand the memory over; the moved-from buffer frees nothing (ASan: no double free).
    HugePageBuffer moved(std::move(buffer));
    EXPECT_EQ(buffer.data(), nullptr);
    EXPECT_EQ(buffer.size(), 0u);
    EXPECT_EQ(moved.data()[bytes - 1], std::byte{7});
    HugePageBuffer assigned(16);
    assigned = std::move(moved);
    EXPECT_EQ(assigned.size(), bytes);
    EXPECT_EQ(assigned.data()[bytes - 1], std::byte{7});
  }
}

}  // namespace
}  // namespace pagedserve::kernels
