// ThreadPool: persistent worker threads for the CPU kernels, so that no step creates threads.
// One caller at a time (the executor thread) hands out a parallel_for; the caller works too,
// so a pool of N threads has N - 1 workers. Between calls a worker first spins for a short while
// (a forward pass issues ~100 parallel_for calls a few microseconds apart, and waking a sleeping
// thread costs more than a small matmul), then sleeps on a condition variable: a CPU executor
// spends most of its life waiting for the next step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagedserve::kernels {

class ThreadPool {
 public:
  // num_threads counts the calling thread; 0 means one per hardware thread. Kernels run
  // inline when their estimated work is below min_parallel_flops (waking workers costs a few
  // microseconds); tests pass 0 to force every split.
  explicit ThreadPool(int num_threads, double min_parallel_flops = 2.0e5);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  double min_parallel_flops() const { return min_parallel_flops_; }

  // Calls task(i) for every i in [0, num_tasks), handing tasks out one at a time to whichever
  // thread is free (so uneven tasks balance), and returns when all have run. Not reentrant.
  void parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& task);

 private:
  void worker_loop();
  void run_tasks();

  double min_parallel_flops_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  // Written by the caller before it publishes a new generation_ (release), read by workers
  // after they see it (acquire).
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<uint64_t> generation_{0};  // stored under mutex_ so sleepers cannot miss it
  std::atomic<int> busy_workers_{0};     // workers still inside the current call
  bool stopping_ = false;                // guarded by mutex_
  std::atomic<int64_t> next_task_{0};
};

// Runs task(i) for i in [0, num_tasks) on `pool` when there is one and the work is worth
// waking threads for (estimated_flops >= pool->min_parallel_flops()), else inline.
void parallel_for(ThreadPool* pool, int64_t num_tasks, double estimated_flops,
                  const std::function<void(int64_t)>& task);

}  // namespace pagedserve::kernels
