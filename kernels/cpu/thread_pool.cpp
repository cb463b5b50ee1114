// ThreadPool: a generation counter tells sleeping workers a new parallel_for has started;
// tasks are claimed with one atomic counter; the last worker to finish wakes the caller.
#include "kernels/cpu/thread_pool.h"

#include <algorithm>

namespace pagedserve::kernels {
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
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_tasks() {
  const std::function<void(int64_t)>* task;
  int64_t num_tasks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task = task_;
    num_tasks = num_tasks_;
  }
  for (int64_t i = next_task_.fetch_add(1); i < num_tasks; i = next_task_.fetch_add(1)) (*task)(i);
}

void ThreadPool::worker_loop() {
  uint64_t seen_generation = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
    }
    run_tasks();
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_workers_ == 0) work_done_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& task) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    num_tasks_ = num_tasks;
    next_task_.store(0);
    busy_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_ready_.notify_all();
  run_tasks();
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [&] { return busy_workers_ == 0; });
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
