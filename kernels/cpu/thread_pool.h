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
  // thread is free (so uneven tasks balance), and returns when all have run. Not reentrant;
  // one caller at a time.
  void parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& task);

 private:
  void worker_loop();
  // Claims and runs tasks of generation `generation` until none are left or a newer call has
  // started; task is that generation's function.
  void run_claims(uint64_t generation, const std::function<void(int64_t)>& task);

  double min_parallel_flops_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;  // only for sleeping and waking; the work itself is lock-free
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  // One word holds generation (24 bits), num_tasks (20 bits) and the next unclaimed task
  // (20 bits), so claiming a task (a CAS) also proves the call it belongs to is still running:
  // a worker that wakes late can never run a finished call's task or wait on it. The caller
  // waits only for claimed tasks to complete, never for workers to show up, which matters when
  // the machine is oversubscribed and a worker is not scheduled for milliseconds.
  std::atomic<uint64_t> state_{0};
  std::atomic<const std::function<void(int64_t)>*> task_{nullptr};  // written before state_
  std::atomic<int64_t> completed_{0};  // tasks of the current call that have finished
  std::atomic<bool> stopping_{false};
  uint64_t generation_ = 0;  // the caller's count of calls
};

// Runs task(i) for i in [0, num_tasks) on `pool` when there is one and the work is worth
// waking threads for (estimated_flops >= pool->min_parallel_flops()), else inline.
void parallel_for(ThreadPool* pool, int64_t num_tasks, double estimated_flops,
                  const std::function<void(int64_t)>& task);

}  // namespace pagedserve::kernels
