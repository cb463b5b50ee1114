// run_static_batching: a batch-at-a-time loop over the virtual clock. No Scheduler or allocator
// is involved: a static batch's shape each step follows from its sequences' lengths alone.
#include "tools/paper/static_batching.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <numeric>

namespace pagedserve::paper {
namespace {

struct BatchSeq {
  size_t request = 0;  // index into the requests
  int prompt = 0;
  int output = 0;
  int generated = 0;  // tokens sampled so far; the prefill step samples the first
  bool done() const { return generated >= output; }
  // KV slots filled while the next step runs: the prompt, then each sampled token once the
  // following step writes it. The last sampled token is never written, hence the -1 at the end.
  int64_t held() const { return prompt + std::max(0, std::min(generated, output - 1)); }
  int64_t final_len() const { return prompt + output - 1; }
};

// The pool as FasterTransformer sees it: B reservations of max_model_len slots each.
struct Pool {
  int num_device_blocks = 0;
  int64_t total_slots = 0;
  int max_len = 0;
  int max_batch = 0;
};

// What run_replay accumulates, weighted by step time.
struct Totals {
  double mem[5] = {0, 0, 0, 0, 0};  // token, reserved, internal, external, free
  double running = 0.0, weight = 0.0;
  int64_t steps = 0;
};

// When is each request done, and how many of its sequences are still running.
struct Completion {
  std::vector<double> done_at;
  std::vector<int> seqs_left;
};

Pool make_pool(const actors::SimProfile& profile, const StaticBatchConfig& config) {
  const int blocks = config.num_device_blocks > 0 ? config.num_device_blocks
                                                  : device_blocks_for(profile, config.block_size);
  Pool pool;
  pool.num_device_blocks = blocks;
  pool.max_len = profile.max_model_len;
  pool.total_slots = int64_t{blocks} * config.block_size;
  const int64_t fits = pool.total_slots / std::max(1, pool.max_len);
  pool.max_batch =
      config.max_batch > 0 ? config.max_batch : static_cast<int>(std::max<int64_t>(1, fits));
  // A batch forced past the pool (max_batch, or the at-least-one rule) still reserves its full
  // contexts: count those as the memory, so the shares stay fractions summing to 1.
  pool.total_slots = std::max(pool.total_slots, int64_t{pool.max_batch} * pool.max_len);
  return pool;
}

// FasterTransformer cannot truncate a request to its context, nor split one across batches.
bool servable(const SimRequest& r, const Pool& pool) {
  const int64_t prompt = static_cast<int64_t>(r.prompt_token_ids.size());
  return prompt >= 1 && r.output_len >= 1 && r.n >= 1 && r.n <= pool.max_batch &&
         prompt + r.output_len <= pool.max_len;
}

// Memory of the whole batch while one step runs: finished sequences keep their KV and their
// reservation until the batch ends (the batch's buffers are freed together).
void record_step(const std::vector<BatchSeq>& batch, double dt, int active, const Pool& pool,
                 Totals& totals) {
  int64_t token = 0, reserved = 0, internal = 0;
  for (const BatchSeq& s : batch) {
    token += s.held();
    reserved += s.final_len() - s.held();
    internal += pool.max_len - s.final_len();
  }
  const int64_t free =
      pool.total_slots - int64_t{pool.max_len} * static_cast<int64_t>(batch.size());
  const double total = static_cast<double>(pool.total_slots);
  const int64_t parts[5] = {token, reserved, internal, 0, free};
  for (int i = 0; i < 5; ++i) totals.mem[i] += dt * static_cast<double>(parts[i]) / total;
  totals.running += dt * active;
  totals.weight += dt;
  ++totals.steps;
}

// One step over the batch's unfinished sequences (all of them, as one prefill, when nothing
// has been sampled yet). Returns the clock at the step's end, when its tokens exist.
double run_step(const actors::SimProfile& profile, int block_size, const Pool& pool,
                std::vector<BatchSeq>& batch, double now, Totals& totals, Completion& completion) {
  actors::StepShape shape;
  int active = 0;
  for (const BatchSeq& s : batch) {
    if (s.done()) continue;
    const bool prefill = s.generated == 0;
    shape.batched_tokens += prefill ? s.prompt : 1;
    shape.kv_tokens_read += prefill ? s.prompt : s.prompt + s.generated;
    ++active;
  }
  const double dt = actors::step_seconds(profile, shape, block_size);
  record_step(batch, dt, active, pool, totals);
  now += dt;
  for (BatchSeq& s : batch) {
    if (s.done()) continue;
    ++s.generated;
    if (s.done() && --completion.seqs_left[s.request] == 0) completion.done_at[s.request] = now;
  }
  return now;
}

// Takes the earliest waiting requests, in order, while their sequences fit in B.
std::vector<BatchSeq> take_batch(std::deque<size_t>& waiting, const std::vector<SimRequest>& rs,
                                 const Pool& pool) {
  std::vector<BatchSeq> batch;
  while (!waiting.empty()) {
    const SimRequest& r = rs[waiting.front()];
    if (static_cast<int>(batch.size()) + r.n > pool.max_batch) break;
    for (int i = 0; i < r.n; ++i) {
      batch.push_back({waiting.front(), static_cast<int>(r.prompt_token_ids.size()), r.output_len});
    }
    waiting.pop_front();
  }
  return batch;
}

// Latencies and throughputs from the completion times, as run_replay computes them.
SimRunResult summarize(const std::vector<SimRequest>& requests, const Completion& completion,
                       const Totals& totals, double first_arrival) {
  SimRunResult result;
  double latency_sum = 0.0, tokens_done = 0.0, last_end = first_arrival;
  for (size_t i = 0; i < requests.size(); ++i) {
    const double done = completion.done_at[i];
    if (done < 0) continue;
    const SimRequest& r = requests[i];
    ++result.completed;
    latency_sum += (done - r.arrival_s) / r.output_len;
    tokens_done += static_cast<double>(r.prompt_token_ids.size() + r.output_len);
    last_end = std::max(last_end, done);
  }
  result.failed = static_cast<int>(requests.size()) - result.completed;
  result.steps = totals.steps;
  result.duration_s = last_end - first_arrival;
  if (result.completed > 0) {
    result.normalized_latency_s = latency_sum / result.completed;
    result.request_throughput = result.completed / std::max(result.duration_s, 1e-9);
    result.token_throughput = tokens_done / std::max(result.duration_s, 1e-9);
  }
  if (totals.weight > 0) {
    const double* m = totals.mem;
    const double w = totals.weight;
    result.memory = {m[0] / w, m[1] / w, m[2] / w, m[3] / w, m[4] / w};
    result.mean_running_seqs = totals.running / w;
  }
  return result;
}

}  // namespace

SimRunResult run_static_batching(const actors::SimProfile& profile, const StaticBatchConfig& config,
                                 const std::vector<SimRequest>& requests) {
  const Pool pool = make_pool(profile, config);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].arrival_s < requests[b].arrival_s;
  });
  Completion completion{std::vector<double>(requests.size(), -1.0),
                        std::vector<int>(requests.size(), 0)};
  Totals totals;
  const double first_arrival = requests.empty() ? 0.0 : requests[order.front()].arrival_s;
  double now = first_arrival;
  std::deque<size_t> waiting;
  size_t next = 0;
  while (next < order.size() || !waiting.empty()) {
    // Unservable requests never enter the queue: they are counted failed in summarize.
    for (; next < order.size() && requests[order[next]].arrival_s <= now; ++next) {
      const SimRequest& r = requests[order[next]];
      if (!servable(r, pool)) continue;
      completion.seqs_left[order[next]] = r.n;
      waiting.push_back(order[next]);
    }
    if (waiting.empty()) {
      if (next < order.size()) now = std::max(now, requests[order[next]].arrival_s);
      continue;
    }
    std::vector<BatchSeq> batch = take_batch(waiting, requests, pool);
    while (std::any_of(batch.begin(), batch.end(), [](const BatchSeq& s) { return !s.done(); })) {
      now = run_step(profile, config.block_size, pool, batch, now, totals, completion);
    }
  }
  SimRunResult result = summarize(requests, completion, totals, first_arrival);
  result.num_device_blocks = pool.num_device_blocks;
  return result;
}

}  // namespace pagedserve::paper
