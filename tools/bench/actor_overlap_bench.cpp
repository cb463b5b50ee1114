// Actor overlap: how long the executor waits between two consecutive steps (host work:
// applying results, scheduling, detokenizing, delivering to clients, handling arrivals) as a
// fraction of its busy time, with EngineOptions::overlap on (step N+1 planned and queued while
// step N runs) and off (the synchronous loop), in one process on the same workload. Prints one line
// per trial and a summary; not a Google Benchmark loop because the quantity is a ratio of two
// clocks inside the engine, not a per-iteration time.
//
//   actor_overlap_bench [--requests N] [--max-tokens N] [--trials N] [--model DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/engine.h"

namespace {

using namespace pagedserve;

std::filesystem::path default_model() {
  if (const char* env = std::getenv("PAGEDSERVE_SHARED")) {
    return std::filesystem::path(env) / "models" / "stories260K";
  }
  return std::filesystem::path(PAGEDSERVE_SHARED_DIR) / "models" / "stories260K";
}

struct Trial {
  double idle_over_busy = 0;
  double busy_s = 0;
  double idle_s = 0;
  int64_t steps = 0;
  int64_t steps_planned_ahead = 0;
  double tokens_per_s = 0;
};

Trial run_trial(const actors::EngineConfig& config, bool overlap, int num_requests,
                int max_tokens) {
  actors::EngineOptions options;
  options.overlap = overlap;
  auto engine = actors::Engine::start(config, options);
  const std::vector<std::string> prompts = {
      "Once upon a time",   "Lily and Tom",    "The cat sat", "One day, a little bird",
      "Tim had a red ball", "The sun was hot", "Mom said",    "A big dog ran to the park and"};
  model::SamplingParams sampling;
  sampling.temperature = 0.0f;
  sampling.max_tokens = max_tokens;
  sampling.ignore_eos = true;

  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<actors::RequestStream>> streams;
  for (int i = 0; i < num_requests; ++i) {
    actors::GenerateRequest request;
    request.prompt = prompts[i % prompts.size()];
    request.sampling = sampling;
    streams.push_back(engine->submit(std::move(request)));
  }
  for (auto& stream : streams) {
    while (stream->next()) {
    }
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const actors::EngineStats stats = engine->stats();
  Trial trial;
  trial.busy_s = stats.executor_busy_s;
  trial.idle_s = stats.executor_idle_s;
  trial.steps = stats.num_steps;
  trial.steps_planned_ahead = stats.num_steps_planned_ahead;
  trial.idle_over_busy =
      stats.executor_busy_s > 0 ? stats.executor_idle_s / stats.executor_busy_s : 0;
  trial.tokens_per_s = static_cast<double>(stats.num_generated_tokens) / wall_s;
  return trial;
}

}  // namespace

int main(int argc, char** argv) {
  int num_requests = 64;
  int max_tokens = 256;
  int trials = 5;
  actors::EngineConfig config;
  config.model_dir = default_model();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--requests")
      num_requests = std::atoi(argv[i + 1]);
    else if (flag == "--max-tokens")
      max_tokens = std::atoi(argv[i + 1]);
    else if (flag == "--trials")
      trials = std::atoi(argv[i + 1]);
    else if (flag == "--model")
      config.model_dir = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  config.max_num_seqs = num_requests;
  std::printf("model %s, %d requests x %d tokens (greedy), %d trials each\n",
              config.model_dir.string().c_str(), num_requests, max_tokens, trials);
  // One discarded pair first: the first engine of a process pays page faults and cold caches.
  run_trial(config, true, num_requests, max_tokens);
  run_trial(config, false, num_requests, max_tokens);
  std::vector<double> ratios[2];
  for (int t = 0; t < trials; ++t) {
    for (bool overlap : {true, false}) {  // interleaved, so drift hits both alike
      const Trial r = run_trial(config, overlap, num_requests, max_tokens);
      ratios[overlap].push_back(r.idle_over_busy);
      std::printf(
          "%-10s steps %5lld (%5lld planned ahead)  busy %.3f s  idle %.3f s  idle/busy %6.1f %%  "
          "%.0f tok/s\n",
          overlap ? "overlap" : "no-overlap", static_cast<long long>(r.steps),
          static_cast<long long>(r.steps_planned_ahead), r.busy_s, r.idle_s,
          100.0 * r.idle_over_busy, r.tokens_per_s);
    }
  }
  // The median: other processes on a small machine delay single trials.
  for (auto& r : ratios) std::sort(r.begin(), r.end());
  std::printf("median executor idle/busy: overlap %.1f %%, no overlap %.1f %%\n",
              100.0 * ratios[1][ratios[1].size() / 2], 100.0 * ratios[0][ratios[0].size() / 2]);
  return 0;
}
