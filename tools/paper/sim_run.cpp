// run_sim: the discrete-event loop over the virtual clock.
#include "tools/paper/sim_run.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace pagedserve::paper {

int device_blocks_for(const actors::SimProfile& profile, int block_size) {
  return static_cast<int>(profile.kv_cache_bytes / (profile.kv_bytes_per_token * block_size));
}

int swap_space_blocks(const actors::SimProfile& profile, int block_size) {
  return static_cast<int>((int64_t{4} << 30) / (profile.kv_bytes_per_token * block_size));
}

SimRunResult run_sim(const actors::SimProfile& profile, const SimRunConfig& config,
                     const std::vector<SimRequest>& requests) {
  const int num_blocks = config.num_device_blocks > 0
                             ? config.num_device_blocks
                             : device_blocks_for(profile, config.block_size);
  actors::SimExecutor executor(profile, config.block_size, num_blocks, config.num_cpu_blocks);
  if (config.random_beam_candidates) executor.set_random_beam_candidates(1);
  const StepRunner run_step = [&](const actors::StepInput& input, double& seconds) {
    actors::StepOutput output = executor.execute(input);
    seconds = executor.last_step_s();
    return output;
  };
  SimRunConfig resolved = config;
  resolved.num_device_blocks = num_blocks;
  return run_replay(resolved, profile.max_model_len, run_step, requests, &profile);
}

SimRunResult run_replay(const SimRunConfig& config, int max_model_len, const StepRunner& run_step,
                        const std::vector<SimRequest>& requests,
                        const actors::SimProfile* swap_cost) {
  const int num_blocks = config.num_device_blocks;
  cache::BlockManagerConfig blocks;
  blocks.block_size = config.block_size;
  blocks.num_device_blocks = num_blocks;
  blocks.num_cpu_blocks = config.num_cpu_blocks;
  blocks.enable_prefix_caching = config.prefix_caching;
  blocks.buddy_regions = config.buddy_regions;
  actors::SchedulerConfig sched;
  sched.max_num_seqs = config.max_num_seqs;
  sched.max_model_len = max_model_len;
  sched.max_num_batched_tokens = std::max(config.max_num_batched_tokens, max_model_len);
  sched.preemption_mode = config.preemption;
  sched.kv_allocator = config.allocator;
  sched.admit_whole_prompt_only = config.admit_whole_prompt_only;
  actors::Scheduler scheduler(sched, blocks);
  double now = 0.0;  // the virtual clock: idle gaps skipped, steps take their (cost) time

  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].arrival_s < requests[b].arrival_s;
  });

  SimRunResult result;
  result.num_device_blocks = num_blocks;
  double latency_sum = 0.0, weight = 0.0, tokens_done = 0.0, last_end = 0.0;
  double mem[5] = {0, 0, 0, 0, 0};
  double logical = 0.0, physical = 0.0, running = 0.0;
  const double first_arrival = requests.empty() ? 0.0 : requests[order.front()].arrival_s;
  now = first_arrival;
  size_t next = 0;
  while (next < order.size() || scheduler.has_unfinished()) {
    while (next < order.size() && requests[order[next]].arrival_s <= now) {
      const SimRequest& r = requests[order[next]];
      actors::NewRequest add;
      add.id = order[next] + 1;
      add.prompt_token_ids = r.prompt_token_ids;
      add.sampling.max_tokens = r.output_len;
      add.sampling.ignore_eos = true;
      add.sampling.temperature = r.beam_search ? 0.0f : 1.0f;
      add.sampling.n = r.n;
      add.sampling.use_beam_search = r.beam_search;
      add.output_len_hint = config.pass_output_len_hint ? r.output_len : 0;
      scheduler.add(std::move(add));
      ++next;
    }
    if (!scheduler.has_unfinished()) {
      now = std::max(now, requests[order[next]].arrival_s);
      continue;
    }
    const actors::StepInput step = scheduler.schedule();
    double dt = 0.0;
    const actors::StepOutput output = run_step(step, dt);
    now += dt;
    if (dt > 0) {
      const cache::KvAllocator& kv = scheduler.kv_allocator();
      const cache::KvMemoryBreakdown b = kv.memory_breakdown();
      const double total = static_cast<double>(b.total_slots);
      mem[0] += dt * b.token_slots / total;
      mem[1] += dt * b.reserved_slots / total;
      mem[2] += dt * b.internal_fragment_slots / total;
      mem[3] += dt * b.external_fragment_slots / total;
      mem[4] += dt * b.free_slots / total;
      logical += dt * static_cast<double>(kv.num_logical_blocks());
      physical += dt * kv.num_used_device_blocks();
      running += dt * static_cast<double>(step.seqs.size());
      weight += dt;
      if (swap_cost != nullptr) {
        actors::StepShape swap_only;
        swap_only.swapped_blocks = actors::step_shape(step).swapped_blocks;
        result.swap_time_s += actors::step_seconds(*swap_cost, swap_only, config.block_size);
      }
    }
    for (const actors::RequestUpdate& update : scheduler.update(step, output)) {
      if (!update.finished) continue;
      const SimRequest& r = requests[update.request_id - 1];
      if (!update.error.empty()) {
        ++result.failed;
        continue;
      }
      ++result.completed;
      latency_sum += (now - r.arrival_s) / r.output_len;
      tokens_done += static_cast<double>(r.prompt_token_ids.size() + r.output_len);
      last_end = now;
    }
    if (step.seqs.empty() && dt == 0) {
      // Nothing could run: wait for the next arrival, or give up (nothing will change).
      if (next < order.size()) {
        now = std::max(now, requests[order[next]].arrival_s);
      } else if (scheduler.has_unfinished()) {
        result.failed += static_cast<int>(scheduler.num_waiting() + scheduler.num_running() +
                                          scheduler.num_swapped());
        break;
      }
    }
  }
  const actors::SchedulerStats stats = scheduler.stats();
  result.steps = stats.num_steps;
  result.preemptions = stats.num_preemptions_recompute + stats.num_preemptions_swap;
  result.duration_s = last_end - first_arrival;
  if (result.completed > 0) {
    result.normalized_latency_s = latency_sum / result.completed;
    result.request_throughput = result.completed / std::max(result.duration_s, 1e-9);
    result.token_throughput = tokens_done / std::max(result.duration_s, 1e-9);
  }
  if (weight > 0) {
    result.memory = {mem[0] / weight, mem[1] / weight, mem[2] / weight, mem[3] / weight,
                     mem[4] / weight};
    result.mean_logical_blocks = logical / weight;
    result.mean_physical_blocks = physical / weight;
    result.mean_running_seqs = running / weight;
  }
  return result;
}

}  // namespace pagedserve::paper
