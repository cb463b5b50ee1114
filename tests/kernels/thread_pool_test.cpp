// ThreadPool: every task runs exactly once per call, on several threads, across many calls.
#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace pagedserve::kernels {
namespace {

TEST(ThreadPool, RunsEveryTaskExactlyOncePerCall) {
  ThreadPool pool(4, 0.0);
  EXPECT_EQ(pool.num_threads(), 4);
  for (int round = 0; round < 200; ++round) {
    const int n = 1 + round % 37;
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](int64_t i) { hits[i].fetch_add(1); });
    for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "round " << round << " task " << i;
  }
}

TEST(ThreadPool, UsesMoreThanOneThread) {
  ThreadPool pool(3, 0.0);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  for (int round = 0; round < 50 && threads.size() < 2; ++round) {
    pool.parallel_for(64, [&](int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard<std::mutex> lock(mutex);
      threads.insert(std::this_thread::get_id());
    });
  }
  EXPECT_GE(threads.size(), 2u);
}

TEST(ThreadPool, SmallWorkRunsInlineOnTheCaller) {
  ThreadPool pool(3, 1e9);
  std::set<std::thread::id> threads;
  parallel_for(&pool, 16, 1e3, [&](int64_t) { threads.insert(std::this_thread::get_id()); });
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(ThreadPool, OneThreadAndNullPoolRunInline) {
  ThreadPool single(1);
  int sum = 0;
  single.parallel_for(10, [&](int64_t i) { sum += static_cast<int>(i); });
  EXPECT_EQ(sum, 45);
  sum = 0;
  parallel_for(nullptr, 10, 1e12, [&](int64_t i) { sum += static_cast<int>(i); });
  EXPECT_EQ(sum, 45);
}

// More tasks than the pool's state word can count are run in chunks: still each exactly once.
TEST(ThreadPool, HugeTaskCountsRunEveryTaskOnce) {
  ThreadPool pool(2, 0.0);
  const int64_t n = (int64_t{1} << 20) + 37;
  std::vector<std::atomic<uint8_t>> hits(n);
  pool.parallel_for(n, [&](int64_t i) { hits[i].fetch_add(1, std::memory_order_relaxed); });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "task " << i;
}

// Short calls back to back, each task capturing a counter that dies with the call: a worker
// that wakes late must never run (or count) a task of a call that has ended, and every call
// must see each of its tasks run once (under ASan/TSan a stale task would be a use after
// scope or a race).
TEST(ThreadPool, BackToBackCallsRunEachTaskOnce) {
  ThreadPool pool(3, 0.0);
  for (int round = 0; round < 3000; ++round) {
    std::atomic<int> count{0};
    const int n = 2 + round % 5;
    pool.parallel_for(n, [&count](int64_t) { count.fetch_add(1, std::memory_order_relaxed); });
    ASSERT_EQ(count.load(), n) << "round " << round;
  }
}

}  // namespace
}  // namespace pagedserve::kernels
