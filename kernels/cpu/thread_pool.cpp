// ThreadPool: tasks are claimed with a CAS on one word that also names the call (see
// thread_pool.h); both sides spin briefly before blocking, so back-to-back calls inside one
// forward pass never sleep, and the caller runs tasks itself, so a call completes even if no
// worker is scheduled in time.
#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <cassert>
#include <chrono>

namespace pagedserve::kernels {
namespace {

constexpr int kIndexBits = 20;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
constexpr int64_t kMaxTasks = int64_t{1} << kIndexBits;  // bigger calls are chunked
constexpr int kGenerationShift = 2 * kIndexBits;
constexpr uint64_t kGenerationMask = (uint64_t{1} << (64 - kGenerationShift)) - 1;

uint64_t generation_of(uint64_t state) { return state >> kGenerationShift; }
int64_t num_tasks_of(uint64_t state) {
  return static_cast<int64_t>((state >> kIndexBits) & kIndexMask);
}
int64_t next_index_of(uint64_t state) { return static_cast<int64_t>(state & kIndexMask); }

// A contiguous-mode share: generation | begin | end, the same field widths as the state word.
uint64_t make_share(uint64_t generation, int64_t begin, int64_t end) {
  return (generation << kGenerationShift) | (static_cast<uint64_t>(begin) << kIndexBits) |
         static_cast<uint64_t>(end);
}
int64_t share_begin(uint64_t share) {
  return static_cast<int64_t>((share >> kIndexBits) & kIndexMask);
}
int64_t share_end(uint64_t share) { return static_cast<int64_t>(share & kIndexMask); }

// An owner claims 1/kClaimDivisor of its share's unclaimed tasks at a time, at most kMaxClaim
// (run_shares). A thread the OS deschedules holds up the call until it runs again in any case
// (it is inside a task); the cap bounds what it then still has to do alone (8 weight tiles:
// ~60 KB of Q4_K, ~800 KB of F16), where one claim for a quarter of an LM head's share would
// be hundreds of microseconds.
constexpr int64_t kClaimDivisor = 4;
constexpr int64_t kMaxClaim = 8;

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
  shares_ = std::vector<Share>(static_cast<size_t>(num_threads));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true, std::memory_order_release);
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_claims(uint64_t generation, const std::function<void(int64_t)>& task) {
  uint64_t state = state_.load(std::memory_order_acquire);
  for (;;) {
    if (generation_of(state) != generation) return;
    const int64_t index = next_index_of(state);
    const int64_t num_tasks = num_tasks_of(state);
    if (index >= num_tasks) return;
    if (!state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;  // state was reloaded
    }
    task(index);
    finish_tasks(1, num_tasks);
    state = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::finish_tasks(int64_t count, int64_t num_tasks) {
  if (completed_.fetch_add(count, std::memory_order_acq_rel) + count == num_tasks) {
    // The caller may be asleep; taking the mutex orders this notify after its predicate check.
    std::lock_guard<std::mutex> lock(mutex_);
    work_done_.notify_one();
  }
}

void ThreadPool::run_shares(uint64_t generation, int own,
                            const std::function<void(int64_t)>& task) {
  const int num_shares = static_cast<int>(shares_.size());
  // Tasks run here are counted once, on the way out: one update of the shared counter per
  // thread and call instead of one per task (each moves its cache line between the cores).
  // The call cannot end before they are counted, so num_tasks_ is still this call's then.
  int64_t ran = 0;
  const auto count_ran = [&] {
    if (ran > 0) finish_tasks(ran, num_tasks_.load(std::memory_order_acquire));
  };
  for (;;) {
    // Our own share, front to back. Only we move its begin; thieves move its end.
    std::atomic<uint64_t>& mine = shares_[own].word;
    uint64_t share = mine.load(std::memory_order_acquire);
    while (generation_of(share) == generation && share_begin(share) < share_end(share)) {
      // Claim up to a quarter of what is left at once (at most kMaxClaim), not one task: the
      // claim is a locked instruction, which waits for every earlier load, so one per task
      // stalled each weight tile's stream at its end (perf: most of this function's time, ~6%
      // of a batch-1 step). Thieves still find half of the rest.
      const int64_t begin = share_begin(share);
      const int64_t take =
          std::clamp<int64_t>((share_end(share) - begin) / kClaimDivisor, 1, kMaxClaim);
      if (!mine.compare_exchange_weak(share, share + (static_cast<uint64_t>(take) << kIndexBits),
                                      std::memory_order_acq_rel, std::memory_order_acquire)) {
        continue;  // a thief took from the end; share was reloaded
      }
      for (int64_t t = begin; t < begin + take; ++t) task(t);
      ran += take;
      share = mine.load(std::memory_order_acquire);
    }
    if (generation_of(share) != generation) {  // a newer call: this one is over (ran is 0)
      count_ran();
      return;
    }
    // Ours is empty: take the back half of the first share with work left and make it ours,
    // so the stolen tasks still run as one ascending range.
    bool stole = false;
    for (int step = 1; step < num_shares && !stole; ++step) {
      std::atomic<uint64_t>& victim = shares_[(own + step) % num_shares].word;
      uint64_t theirs = victim.load(std::memory_order_acquire);
      while (generation_of(theirs) == generation && share_begin(theirs) < share_end(theirs)) {
        const int64_t begin = share_begin(theirs);
        const int64_t end = share_end(theirs);
        const int64_t middle = begin + (end - begin) / 2;  // end - begin == 1: take it all
        if (victim.compare_exchange_weak(theirs, make_share(generation, begin, middle),
                                         std::memory_order_acq_rel, std::memory_order_acquire)) {
          // Ours is empty, so no thief touches it until this store makes [middle, end) visible.
          mine.store(make_share(generation, middle, end), std::memory_order_release);
          stole = true;
          break;
        }
      }
      if (generation_of(theirs) != generation) {
        count_ran();
        return;
      }
    }
    if (!stole) {  // every share is empty: all tasks are claimed
      count_ran();
      return;
    }
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto woken = [&] {
      return stopping_.load(std::memory_order_acquire) ||
             generation_of(state_.load(std::memory_order_acquire)) != seen;
    };
    if (!spin_until(woken)) {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, woken);
    }
    if (stopping_.load(std::memory_order_acquire)) return;
    seen = generation_of(state_.load(std::memory_order_acquire));
    // Read after seeing the generation: this call's function, or a later one's, in which case
    // every claim below fails (the later call starts only once this one's tasks are all claimed).
    const std::function<void(int64_t)>* task = task_.load(std::memory_order_acquire);
    if (task == nullptr) continue;
    // Read after the generation too: this call's mode, or a later call's (then this call has
    // ended, and the claims below fail).
    if (contiguous_.load(std::memory_order_acquire)) {
      run_shares(seen, index, *task);
    } else {
      run_claims(seen, *task);
    }
  }
}

void ThreadPool::parallel_for(int64_t num_tasks, const std::function<void(int64_t)>& task) {
  run_call(num_tasks, task, /*contiguous=*/false);
}

void ThreadPool::parallel_for_contiguous(int64_t num_tasks,
                                         const std::function<void(int64_t)>& task) {
  run_call(num_tasks, task, /*contiguous=*/true);
}

void ThreadPool::run_call(int64_t num_tasks, const std::function<void(int64_t)>& task,
                          bool contiguous) {
  if (num_tasks <= 0) return;
  if (workers_.empty() || num_tasks == 1) {
    for (int64_t i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  if (num_tasks >= kMaxTasks) {  // too many for the state word: run ranges of tasks instead
    const int64_t per_chunk = (num_tasks + kMaxTasks - 2) / (kMaxTasks - 1);
    run_call((num_tasks + per_chunk - 1) / per_chunk,
             [&](int64_t chunk) {
               const int64_t end = std::min(num_tasks, (chunk + 1) * per_chunk);
               for (int64_t i = chunk * per_chunk; i < end; ++i) task(i);
             },
             contiguous);
    return;
  }
  generation_ = (generation_ + 1) & kGenerationMask;
  if (generation_ == 0) generation_ = 1;  // 0 is the idle state workers start from
  task_.store(&task, std::memory_order_release);
  completed_.store(0, std::memory_order_relaxed);
  num_tasks_.store(num_tasks, std::memory_order_relaxed);
  contiguous_.store(contiguous, std::memory_order_relaxed);
  // Contiguous mode: thread i's share is [i n / T, (i + 1) n / T); the shared counter starts
  // exhausted so that only the shares hand out tasks.
  const int num_shares = static_cast<int>(shares_.size());
  if (contiguous) {
    for (int i = 0; i < num_shares; ++i) {
      shares_[i].word.store(
          make_share(generation_, num_tasks * i / num_shares, num_tasks * (i + 1) / num_shares),
          std::memory_order_relaxed);
    }
  }
  const uint64_t first_unclaimed = contiguous ? static_cast<uint64_t>(num_tasks) : 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);  // a worker about to sleep cannot miss this
    state_.store((generation_ << kGenerationShift) |
                     (static_cast<uint64_t>(num_tasks) << kIndexBits) | first_unclaimed,
                 std::memory_order_release);
  }
  work_ready_.notify_all();
  if (contiguous) {
    run_shares(generation_, 0, task);
  } else {
    run_claims(generation_, task);
  }
  const auto all_done = [&] { return completed_.load(std::memory_order_acquire) == num_tasks; };
  if (!spin_until(all_done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    work_done_.wait(lock, all_done);
  }
}

void parallel_for(ThreadPool* pool, int64_t num_tasks, double estimated_flops,
                  const std::function<void(int64_t)>& task) {
  if (pool == nullptr || pool->num_threads() == 1 || estimated_flops < pool->min_parallel_flops()) {
    for (int64_t i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  pool->parallel_for(num_tasks, task);
}

void parallel_for_contiguous(ThreadPool* pool, int64_t num_tasks, double estimated_flops,
                             const std::function<void(int64_t)>& task) {
  if (pool == nullptr || pool->num_threads() == 1 || estimated_flops < pool->min_parallel_flops()) {
    for (int64_t i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  pool->parallel_for_contiguous(num_tasks, task);
}

}  // namespace pagedserve::kernels
