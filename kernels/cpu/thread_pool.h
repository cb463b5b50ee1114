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

  // The same contract, but thread i (the caller is 0) starts on the i-th contiguous share of
  // [0, num_tasks) and runs it in increasing order, claiming a quarter of what is left of it
  // at a time but never more than 8 tasks (so a thread the OS deschedules keeps at most 8 from
  // the others); a thread that runs out takes the back half of what is unclaimed in another's
  // share. So when no thread is held up, each runs one
  // ascending range: a matmul's weight tiles, stored one after another, then reach each core
  // as one sequential stream (which the hardware and software prefetchers follow across tile
  // boundaries), not as tiles that alternate between cores. Measured on batch-1 decode: 11%
  // more weight bandwidth for F32, 25% for F16 (docs/PERFORMANCE.md).
  void parallel_for_contiguous(int64_t num_tasks, const std::function<void(int64_t)>& task);

 private:
  // Claims of the contiguous mode: one word per thread, generation (24 bits) | begin (20) |
  // end (20), each on its own cache line; the owner takes a few tasks from begin per claim,
  // a thief the back half of [begin, end).
  struct alignas(64) Share {
    std::atomic<uint64_t> word{0};
  };

  void worker_loop(int index);
  // Runs share `own` in order, then steals from the others, until every share of generation
  // `generation` is empty or a newer call has started.
  void run_shares(uint64_t generation, int own, const std::function<void(int64_t)>& task);
  // Adds `count` finished tasks of the current call (of num_tasks) and wakes the caller when
  // that completes the call.
  void finish_tasks(int64_t count, int64_t num_tasks);
  // Publishes a call (the shared counter and, for the contiguous mode, the shares), runs the
  // caller's part and waits for the rest.
  void run_call(int64_t num_tasks, const std::function<void(int64_t)>& task, bool contiguous);
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
  std::atomic<int64_t> completed_{0};    // tasks of the current call that have finished
  std::atomic<int64_t> num_tasks_{0};    // of the current call, written before state_
  std::atomic<bool> contiguous_{false};  // the current call's mode, written before state_
  std::vector<Share> shares_;            // one per thread (index 0: the caller)
  std::atomic<bool> stopping_{false};
  uint64_t generation_ = 0;  // the caller's count of calls
};

// Runs task(i) for i in [0, num_tasks) on `pool` when there is one and the work is worth
// waking threads for (estimated_flops >= pool->min_parallel_flops()), else inline.
void parallel_for(ThreadPool* pool, int64_t num_tasks, double estimated_flops,
                  const std::function<void(int64_t)>& task);
// The same with ThreadPool::parallel_for_contiguous (inline: all tasks in increasing order).
void parallel_for_contiguous(ThreadPool* pool, int64_t num_tasks, double estimated_flops,
                             const std::function<void(int64_t)>& task);

}  // namespace pagedserve::kernels
