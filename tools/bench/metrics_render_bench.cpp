// What one GET /metrics costs to render (render_prometheus), with every histogram filled: the
// pagedserve_* families alone, and with --metrics-compat vllm (every series twice). The
// baseline, run in the same process, is copying a string of the compat text's size: the least
// any renderer of that text must spend. The llm-d endpoint picker scrapes every 50 ms, so the
// target is well under 1 ms.
//
//   build/bin/metrics_render_bench [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>

#include "net/protocol/metrics.h"

namespace pagedserve::net {
namespace {

// A registry as a long-running server has it: every bucket of every histogram counted.
const Metrics& busy_metrics() {
  static Metrics* const metrics = [] {
    auto* m = new Metrics();
    std::mt19937 rng(7);
    std::lognormal_distribution<double> seconds(-2.0, 2.5);  // 1 ms .. minutes
    for (int i = 0; i < 100000; ++i) {
      m->observe_time_to_first_token(seconds(rng));
      m->observe_inter_token_latency(seconds(rng) / 10);
      m->observe_e2e_request_latency(seconds(rng) * 10);
      m->count_finished_request(i % 3 ? "stop" : "length");
    }
    m->add_prompt_tokens(123456789);
    m->add_generation_tokens(987654321);
    return m;
  }();
  return *metrics;
}

EngineGauges busy_gauges() {
  EngineGauges g;
  g.num_requests_running = 256;
  g.num_requests_waiting = 31;
  g.kv_blocks_total = 65536;
  g.kv_blocks_free = 1234;
  g.kv_blocks_cached = 600;
  g.kv_cache_usage_perc = 1.0 - 1234.0 / 65536.0;
  g.prefix_cache_queries_total = 1u << 30;
  g.prefix_cache_hits_total = 1u << 29;
  g.stage_s.forward = 1234.5;
  g.scrape_unix_s = 1.7e9;
  return g;
}

MetricsExposition exposition(bool compat) {
  MetricsExposition x;
  x.vllm_compat = compat;
  x.model_name = "meta-llama/Llama-3.1-8B-Instruct";
  x.block_size_tokens = 16;
  return x;
}

void BM_RenderMetrics(benchmark::State& state) {
  const Metrics& metrics = busy_metrics();
  const EngineGauges gauges = busy_gauges();
  const MetricsExposition x = exposition(state.range(0) != 0);
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = render_prometheus(metrics, gauges, x);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderMetrics)->ArgName("vllm_compat")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_CopyBaseline(benchmark::State& state) {
  const std::string text = render_prometheus(busy_metrics(), busy_gauges(), exposition(true));
  for (auto _ : state) {
    std::string copy = text;
    benchmark::DoNotOptimize(copy.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(text.size()) * state.iterations());
}
BENCHMARK(BM_CopyBaseline)->Unit(benchmark::kMicrosecond);

// Prints each run, then each render's time as a multiple of the copy baseline.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Iteration) {
        times_[run.benchmark_name()] = run.GetAdjustedRealTime();
      }
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    const auto baseline = times_.find("BM_CopyBaseline");
    if (baseline == times_.end()) return;
    for (const auto& [name, time] : times_) {
      if (name == baseline->first) continue;
      std::printf("%s: %.2f us per render, %.1fx the copy baseline\n", name.c_str(), time,
                  time / baseline->second);
    }
  }

 private:
  std::map<std::string, double> times_;
};

}  // namespace
}  // namespace pagedserve::net

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  pagedserve::net::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
