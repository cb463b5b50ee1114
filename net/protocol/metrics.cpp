// The Prometheus registry and per-request timing (see metrics.h); the text rendering is in
// metrics_render.cpp.
#include "net/protocol/metrics.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace pagedserve::net {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1, 0) {
  assert(std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()));
  assert(std::adjacent_find(upper_bounds_.begin(), upper_bounds_.end()) == upper_bounds_.end());
}

void Histogram::observe(double value) {
  // le is inclusive: a value equal to a bound falls into that bucket.
  const size_t bucket =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  std::lock_guard lock(mutex_);
  ++bucket_counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snapshot;
  snapshot.upper_bounds = upper_bounds_;
  std::lock_guard lock(mutex_);
  uint64_t running = 0;
  for (uint64_t c : bucket_counts_) snapshot.cumulative.push_back(running += c);
  snapshot.sum = sum_;
  snapshot.count = count_;
  return snapshot;
}

const std::vector<double>& ttft_buckets_s() {
  static const std::vector<double> kBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                               0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                               20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
  return kBuckets;
}

const std::vector<double>& inter_token_buckets_s() {
  static const std::vector<double> kBuckets = {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
                                               0.15,  0.2,   0.3,  0.4,   0.5,  0.75,  1.0,
                                               2.5,   5.0,   7.5,  10.0,  20.0, 40.0,  80.0};
  return kBuckets;
}

const std::vector<double>& e2e_buckets_s() {
  static const std::vector<double> kBuckets = {
      0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,   5.0,    10.0,
      15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return kBuckets;
}

// The three reasons are exported from the start, at 0, as vLLM creates one series per
// FinishReason (stop, length, abort).
Metrics::Metrics()
    : finished_{{"abort", 0}, {"length", 0}, {"stop", 0}},
      ttft_(ttft_buckets_s()),
      inter_token_(inter_token_buckets_s()),
      e2e_(e2e_buckets_s()) {}

void Metrics::count_finished_request(std::string_view finish_reason) {
  if (finish_reason == "error") return;
  std::lock_guard lock(finished_mutex_);
  ++finished_[std::string(finish_reason)];
}

std::map<std::string, uint64_t> Metrics::finished_requests() const {
  std::lock_guard lock(finished_mutex_);
  return finished_;
}

EngineGauges gauges_from_stats(const actors::EngineStats& stats) {
  EngineGauges gauges;
  gauges.num_requests_running = stats.num_running_seqs;
  gauges.num_requests_waiting = stats.num_waiting_seqs;
  gauges.kv_blocks_total = stats.num_kv_blocks_total;
  gauges.kv_blocks_free = stats.num_kv_blocks_free;
  gauges.num_requests_swapped = stats.num_swapped_seqs;
  gauges.kv_blocks_cached = stats.num_kv_blocks_cached;
  gauges.prefix_cache_queries_total = static_cast<uint64_t>(stats.prefix_cache_queries_tokens);
  gauges.prefix_cache_hits_total = static_cast<uint64_t>(stats.prefix_cache_hits_tokens);
  gauges.preemptions_swap_total = static_cast<uint64_t>(stats.num_preemptions_swap);
  gauges.preemptions_recompute_total = static_cast<uint64_t>(stats.num_preemptions_recompute);
  gauges.stage_s = stats.stage_s;
  gauges.spec_rows_total = static_cast<uint64_t>(stats.num_spec_rows);
  gauges.spec_proposed_tokens_total = static_cast<uint64_t>(stats.num_spec_proposed_tokens);
  gauges.spec_accepted_tokens_total = static_cast<uint64_t>(stats.num_spec_accepted_tokens);
  if (stats.num_kv_blocks_total > 0) {
    gauges.kv_cache_usage_perc =
        static_cast<double>(stats.num_kv_blocks_used) / stats.num_kv_blocks_total;
  }
  return gauges;
}

RequestTimer::RequestTimer(Metrics& metrics, Clock::time_point arrival)
    : metrics_(&metrics), arrival_(arrival) {}

void RequestTimer::on_event(const actors::TokenEvent& event, Clock::time_point now) {
  if (finished_) return;
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (!prompt_counted_ && event.num_prompt_tokens > 0) {
    prompt_counted_ = true;
    metrics_->add_prompt_tokens(event.num_prompt_tokens);
  }
  if (!event.token_ids.empty()) {
    metrics_->add_generation_tokens(static_cast<int64_t>(event.token_ids.size()));
    if (!first_token_seen_) {
      first_token_seen_ = true;
      metrics_->observe_time_to_first_token(seconds(now - arrival_));
    }
    const size_t index = static_cast<size_t>(std::max(event.index, 0));
    if (last_token_.size() <= index) last_token_.resize(index + 1);
    if (last_token_[index])
      metrics_->observe_inter_token_latency(seconds(now - *last_token_[index]));
    last_token_[index] = now;
  }
  if (event.finished) {
    finished_ = true;
    metrics_->observe_e2e_request_latency(seconds(now - arrival_));
  }
}

}  // namespace pagedserve::net
