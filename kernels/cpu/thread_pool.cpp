// ThreadPool: a generation counter tells workers a new parallel_for has started; tasks are
// claimed with one atomic counter; the last worker to finish wakes the caller. Both sides spin
// briefly before blocking, so back-to-back calls inside one forward pass never sleep.
#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace pagedserve::kernels {
namespace {

// How long a worker (or the waiting caller) spins before it blocks. Long enough to bridge the
// gaps between the kernels of one forward pass, short enough not to burn a core between steps.
constexpr auto kSpinTime = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or kSpinTime passes; returns done().
template <typename Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, double min_parallel_flops)
    : min_parallel_flops_(min_parallel_flops) {
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    generation_.fetch_add(1, std::memory_order_release);  // wakes spinners too
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_tasks() {
  const std::function<void(int64_t)>& task = *task_;
  const int64_t num_tasks = num_tasks_;
  for (int64_t i = next_task_.fetch_add(1); i < num_tasks; i = next_task_.fetch_add(1)) task(i);
}

void ThreadPool::worker_loop() {
  uint64_t seen_generation = 0;
  for (;;) {
    const auto changed = [&] {
      return generation_.load(std::memory_order_acquire) != seen_generation;
    };
    if (!spin_until(changed)) {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, changed);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
    }
    seen_generation = generation_.load(std::memory_order_acquire);
    run_tasks();
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The caller may be asleep; taking the mutex orders this notify after its predicate check.
      std::lock_guard<std::mutex> lock(mutex_);
      work_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& task) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  task_ = &task;
  num_tasks_ = num_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  busy_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_ready_.notify_all();
  run_tasks();
  const auto all_done = [&] { return busy_workers_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(all_done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, all_done);
  }
  task_ = nullptr;
}

void parallel_for(ThreadPool* pool, int64_t num_tasks, double estimated_flops,
                  const std::function<void(int64_t)>& task) {
  if (pool == nullptr || pool->num_threads() == 1 || estimated_flops < pool->min_parallel_flops()) {
    for (int64_t i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  pool->parallel_for(num_tasks, task);
}

}  // namespace pagedserve::kernels
