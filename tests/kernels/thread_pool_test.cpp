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

}  // namespace
}  // namespace pagedserve::kernels
