// ThreadPool: every task runs exactly once per call, on several threads, across many calls.
#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <numeric>
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

// The contiguous mode keeps the same contract: every task once per call, whatever the count
// against the threads (fewer tasks than threads, uneven shares), across many calls, mixed with
// the ordinary mode.
TEST(ThreadPool, ContiguousRunsEveryTaskExactlyOncePerCall) {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads, 0.0);
    for (int round = 0; round < 600; ++round) {
      const int n = 1 + round % 41;
      std::vector<std::atomic<int>> hits(n);
      if (round % 3 == 2) {
        pool.parallel_for(n, [&](int64_t i) { hits[i].fetch_add(1); });
      } else {
        pool.parallel_for_contiguous(n, [&](int64_t i) { hits[i].fetch_add(1); });
      }
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i].load(), 1) << threads << " threads, round " << round << " task " << i;
      }
    }
  }
}

// The shares of a stalled thread are taken over by the others: whichever thread runs task 0
// (normally the caller, whose share starts there) stalls on it, and the other thread then runs
// its own share and steals the rest of the stalled one, each run in ascending order.
TEST(ThreadPool, ContiguousSharesAreStolenFromAStalledThread) {
  ThreadPool pool(2, 0.0);
  const int n = 64;
  std::mutex mutex;
  std::map<std::thread::id, std::vector<int64_t>> order;
  pool.parallel_for_contiguous(n, [&](int64_t i) {
    if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(mutex);
    order[std::this_thread::get_id()].push_back(i);
  });
  std::vector<int64_t> all;
  for (const auto& [thread, tasks] : order) all.insert(all.end(), tasks.begin(), tasks.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(n);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
  const auto stalled = std::find_if(order.begin(), order.end(), [](const auto& entry) {
    return std::find(entry.second.begin(), entry.second.end(), 0) != entry.second.end();
  });
  ASSERT_NE(stalled, order.end());
  // The usual case: the caller claimed task 0 first and stalled on it; it then ran at most
  // what was left of its share (ascending), and the worker did its own half and stole most of
  // the caller's. (Rarely a descheduled caller has its whole share stolen, task 0 included.)
  if (stalled->first == std::this_thread::get_id()) {
    EXPECT_LT(static_cast<int>(stalled->second.size()), n / 2);
    EXPECT_EQ(stalled->second.front(), 0);
    EXPECT_TRUE(std::is_sorted(stalled->second.begin(), stalled->second.end()));
  }
}

// A thread held up inside a task keeps only the tasks it had claimed: at most 8, whatever the
// size of its share (one claim of a quarter of this 500-task share would keep 125 from the
// other thread). Task 0 waits until all other tasks but 7 have run (or 10 s), so the other
// thread has every chance to take what the stalled one has not claimed.
TEST(ThreadPool, AStalledThreadKeepsAtMostEightClaimedTasks) {
  ThreadPool pool(2, 0.0);
  const int n = 1000;
  std::mutex mutex;
  std::map<std::thread::id, std::vector<int64_t>> order;
  std::atomic<int> finished{0};
  pool.parallel_for_contiguous(n, [&](int64_t i) {
    if (i == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (finished.load() < n - 8 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    order[std::this_thread::get_id()].push_back(i);
    finished.fetch_add(1);
  });
  EXPECT_EQ(finished.load(), n);
  // The usual case: the caller claimed task 0 first and stalled on it (rarely a descheduled
  // caller has its whole share stolen, task 0 included; then there is nothing to check).
  const std::vector<int64_t>& caller = order[std::this_thread::get_id()];
  if (!caller.empty() && caller.front() == 0) {
    EXPECT_LE(caller.size(), 8u);
    EXPECT_TRUE(std::is_sorted(caller.begin(), caller.end()));
  }
}

// Back-to-back short calls in the contiguous mode: no stale worker may run a finished call's
// task (the counter dies with the call; ASan/TSan would see a stale task).
TEST(ThreadPool, ContiguousBackToBackCallsRunEachTaskOnce) {
  ThreadPool pool(3, 0.0);
  for (int round = 0; round < 3000; ++round) {
    std::atomic<int> count{0};
    const int n = 2 + round % 7;
    pool.parallel_for_contiguous(
        n, [&count](int64_t) { count.fetch_add(1, std::memory_order_relaxed); });
    ASSERT_EQ(count.load(), n) << "round " << round;
  }
}

TEST(ThreadPool, ContiguousInlineRunsInOrder) {
  std::vector<int64_t> order;
  parallel_for_contiguous(nullptr, 5, 1e12, [&](int64_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  ThreadPool pool(2, 0.0);
  const int64_t n = (int64_t{1} << 20) + 5;  // more than the share words can count: chunked
  std::vector<std::atomic<uint8_t>> hits(n);
  pool.parallel_for_contiguous(n,
                               [&](int64_t i) { hits[i].fetch_add(1, std::memory_order_relaxed); });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "task " << i;
}

}  // namespace
}  // namespace pagedserve::kernels
