// Metrics: the server's Prometheus registry (counters and latency histograms the transport
// records per request), EngineGauges (a plain struct the server fills from the engine before
// each scrape), MetricsExposition (which names and labels /metrics shows, fixed at start-up),
// render_prometheus (text exposition format 0.0.4, for GET /metrics) and RequestTimer
// (per-request TTFT / inter-token / end-to-end latency from event times).
//
// Routers read these: the llm-d endpoint picker (EPP) scores replicas by
// num_requests_waiting, kv_cache_usage_perc and cache_config_info; with --metrics-compat vllm
// the same values also appear under vLLM's names (vllm:*), which the EPP's default engine
// config and vLLM production-stack's router read with no configuration.
//
// Thread safety: Metrics may be updated and rendered from any number of threads (counters are
// atomics; each histogram and the finish-reason map have their own mutex, so a scrape sees a
// histogram's buckets, _sum and _count consistent with each other). RequestTimer belongs to
// one request and is used by one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/engine.h"

namespace pagedserve::net {

inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// A Prometheus histogram: observations counted in buckets by upper bound (le), plus +Inf.
class Histogram {
 public:
  // `upper_bounds`: strictly increasing, finite (asserted); +Inf is implicit.
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;  // without +Inf
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (== count); size bounds + 1
    double sum = 0;                    // of all observations
    uint64_t count = 0;                // observations
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> bucket_counts_;  // not cumulative; last is the +Inf bucket
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Bucket bounds in seconds (vLLM's, with finer low buckets for CPU-speed decoding).
const std::vector<double>& ttft_buckets_s();
const std::vector<double>& inter_token_buckets_s();
const std::vector<double>& e2e_buckets_s();

class Metrics {
 public:
  Metrics();

  void add_prompt_tokens(int64_t count) { prompt_tokens_ += count; }
  void add_generation_tokens(int64_t count) { generation_tokens_ += count; }
  // pagedserve_request_success_total{finish_reason}: requests that ended normally ("stop",
  // "length") or were aborted ("abort": a client that disconnected or cancelled, a slow reader,
  // shutdown); "error" is not a success and is not counted. The transport counts every engine
  // request's final event here, also when its client is gone (not RequestTimer, which only
  // sees the events a live connection reads).
  void count_finished_request(std::string_view finish_reason);
  void observe_time_to_first_token(double seconds) { ttft_.observe(seconds); }
  void observe_inter_token_latency(double seconds) { inter_token_.observe(seconds); }
  void observe_e2e_request_latency(double seconds) { e2e_.observe(seconds); }

  int64_t prompt_tokens() const { return prompt_tokens_.load(); }
  int64_t generation_tokens() const { return generation_tokens_.load(); }
  std::map<std::string, uint64_t> finished_requests() const;  // by finish_reason
  const Histogram& time_to_first_token() const { return ttft_; }
  const Histogram& inter_token_latency() const { return inter_token_; }
  const Histogram& e2e_request_latency() const { return e2e_; }

 private:
  std::atomic<int64_t> prompt_tokens_{0};
  std::atomic<int64_t> generation_tokens_{0};
  mutable std::mutex finished_mutex_;
  std::map<std::string, uint64_t> finished_;
  Histogram ttft_;
  Histogram inter_token_;
  Histogram e2e_;
};

// Engine state at scrape time; the server fills it (gauges_from_stats covers what
// actors::EngineStats reports today; the rest stays 0 until the engine exposes it).
struct EngineGauges {
  int num_requests_running = 0;              // sequences being decoded / prefilled
  int num_requests_waiting = 0;              // queued, not yet admitted
  int num_requests_swapped = 0;              // preempted to host memory
  int64_t kv_blocks_total = 0;               // device KV blocks in the pool
  int64_t kv_blocks_free = 0;                // allocatable (including evictable cached ones)
  int64_t kv_blocks_cached = 0;              // free blocks still holding prefix-cache content
  double kv_cache_usage_perc = 0;            // used / total blocks: a fraction in [0, 1]
  uint64_t prefix_cache_queries_total = 0;   // prompt tokens looked up (counter)
  uint64_t prefix_cache_hits_total = 0;      // of which found in the cache (counter)
  uint64_t preemptions_swap_total = 0;       // groups swapped out (counter)
  uint64_t preemptions_recompute_total = 0;  // groups freed to be recomputed (counter)
  actors::StageSeconds stage_s;              // time per stage of the served steps (counters)
  // Speculative decoding (counters; all 0 when it is off).
  uint64_t spec_rows_total = 0;             // sequence-steps that verified proposals
  uint64_t spec_proposed_tokens_total = 0;  // tokens proposed in them
  uint64_t spec_accepted_tokens_total = 0;  // of which accepted
  double scrape_unix_s = 0;                  // wall clock of the scrape (vLLM's LoRA info value)
};

// Which names and labels /metrics shows; the server fills it once from its flags and the
// engine's config.
struct MetricsExposition {
  // --metrics-compat vllm: also export vLLM's series (vllm:num_requests_waiting, ...,
  // vllm:cache_config_info, the latency histograms), labelled model_name and engine="0".
  bool vllm_compat = false;
  std::string model_name;            // the served model name (vLLM's model_name label)
  int block_size_tokens = 0;         // tokens per KV block (cache_config_info{block_size})
  std::string cache_dtype = "auto";  // --kv-cache-dtype (cache_config_info{cache_dtype})
  bool enable_prefix_caching = true;
};

EngineGauges gauges_from_stats(const actors::EngineStats& stats);

// Every metric with # HELP and # TYPE lines, one series per gauge; histograms as cumulative
// _bucket{le} lines ending in le="+Inf", then _sum and _count. Each histogram is snapshotted
// once, so its pagedserve_* and vllm:* series agree.
std::string render_prometheus(const Metrics& metrics, const EngineGauges& gauges,
                              const MetricsExposition& exposition = {});

// Records one engine request's latencies into Metrics from its events' arrival times:
// TTFT = first token - arrival; inter-token latency = time between consecutive token-bearing
// events of the same output index; e2e = final event - arrival. Also counts prompt tokens
// (once) and generated tokens. (The finish reason is counted by the transport, see
// Metrics::count_finished_request.)
class RequestTimer {
 public:
  using Clock = std::chrono::steady_clock;
  RequestTimer(Metrics& metrics, Clock::time_point arrival);
  void on_event(const actors::TokenEvent& event, Clock::time_point now);
  bool finished() const { return finished_; }

 private:
  Metrics* metrics_;
  Clock::time_point arrival_;
  std::vector<std::optional<Clock::time_point>> last_token_;  // per output index
  bool first_token_seen_ = false;
  bool prompt_counted_ = false;
  bool finished_ = false;
};

}  // namespace pagedserve::net
