// The Prometheus registry, text rendering and per-request timing (see metrics.h).
#include "net/protocol/metrics.h"

#include <algorithm>
#include <cassert>
#include <charconv>
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
    gauges.kv_cache_usage_ratio =
        static_cast<double>(stats.num_kv_blocks_used) / stats.num_kv_blocks_total;
  }
  return gauges;
}

namespace {

// Prometheus sample values: shortest round-trip decimal, +Inf/-Inf/NaN spelled its way.
std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, ec == std::errc() ? end : buffer);
}

std::string escape_label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Writer {
 public:
  void header(std::string_view name, std::string_view type, std::string_view help) {
    text_ += "# HELP " + std::string(name) + " " + std::string(help) + "\n";
    text_ += "# TYPE " + std::string(name) + " " + std::string(type) + "\n";
  }
  void sample(std::string_view name, std::string_view labels, double value) {
    text_ += std::string(name);
    if (!labels.empty()) text_ += "{" + std::string(labels) + "}";
    text_ += " " + format_value(value) + "\n";
  }
  void metric(std::string_view name, std::string_view type, std::string_view help, double value) {
    header(name, type, help);
    sample(name, "", value);
  }
  void histogram(std::string_view name, std::string_view help, const Histogram& histogram) {
    const Histogram::Snapshot s = histogram.snapshot();
    header(name, "histogram", help);
    const std::string bucket = std::string(name) + "_bucket";
    for (size_t i = 0; i < s.upper_bounds.size(); ++i) {
      sample(bucket, "le=\"" + format_value(s.upper_bounds[i]) + "\"",
             static_cast<double>(s.cumulative[i]));
    }
    sample(bucket, "le=\"+Inf\"", static_cast<double>(s.count));
    sample(std::string(name) + "_sum", "", s.sum);
    sample(std::string(name) + "_count", "", static_cast<double>(s.count));
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

}  // namespace

std::string render_prometheus(const Metrics& metrics, const EngineGauges& gauges) {
  Writer w;
  w.metric("pagedserve_prompt_tokens_total", "counter", "Prompt tokens processed.",
           static_cast<double>(metrics.prompt_tokens()));
  w.metric("pagedserve_generation_tokens_total", "counter", "Generated tokens.",
           static_cast<double>(metrics.generation_tokens()));
  w.header("pagedserve_request_success_total", "counter",
           "Requests finished, by finish reason (stop, length, abort).");
  for (const auto& [reason, count] : metrics.finished_requests()) {
    w.sample("pagedserve_request_success_total", "finish_reason=\"" + escape_label(reason) + "\"",
             static_cast<double>(count));
  }
  w.histogram("pagedserve_time_to_first_token_seconds", "Time to first token in seconds.",
              metrics.time_to_first_token());
  w.histogram("pagedserve_inter_token_latency_seconds",
              "Time between consecutive outputs of one sequence in seconds.",
              metrics.inter_token_latency());
  w.histogram("pagedserve_e2e_request_latency_seconds",
              "Request latency from arrival to final output in seconds.",
              metrics.e2e_request_latency());
  w.metric("pagedserve_num_requests_running", "gauge", "Sequences running on the engine.",
           gauges.num_requests_running);
  w.metric("pagedserve_num_requests_waiting", "gauge", "Sequences waiting to be scheduled.",
           gauges.num_requests_waiting);
  w.metric("pagedserve_num_requests_swapped", "gauge", "Sequences swapped out to host memory.",
           gauges.num_requests_swapped);
  w.metric("pagedserve_kv_blocks_total", "gauge", "KV cache blocks on the device.",
           static_cast<double>(gauges.kv_blocks_total));
  w.metric("pagedserve_kv_blocks_free", "gauge", "Allocatable KV cache blocks.",
           static_cast<double>(gauges.kv_blocks_free));
  w.metric("pagedserve_kv_blocks_cached", "gauge",
           "Free KV cache blocks that still hold prefix-cache content.",
           static_cast<double>(gauges.kv_blocks_cached));
  w.metric("pagedserve_kv_cache_usage_ratio", "gauge", "Fraction of KV cache blocks in use.",
           gauges.kv_cache_usage_ratio);
  w.metric("pagedserve_prefix_cache_queries_total", "counter",
           "Prompt blocks looked up in the prefix cache.",
           static_cast<double>(gauges.prefix_cache_queries_total));
  w.metric("pagedserve_prefix_cache_hits_total", "counter",
           "Prompt blocks found in the prefix cache.",
           static_cast<double>(gauges.prefix_cache_hits_total));
  w.header("pagedserve_preemptions_total", "counter", "Sequence groups preempted, by mode.");
  w.sample("pagedserve_preemptions_total", "mode=\"swap\"",
           static_cast<double>(gauges.preemptions_swap_total));
  w.sample("pagedserve_preemptions_total", "mode=\"recompute\"",
           static_cast<double>(gauges.preemptions_recompute_total));
  w.header("pagedserve_step_stage_seconds_total", "counter",
           "Seconds spent per stage of the served steps: executor stages (copies, forward, "
           "sampling) and host stages on other threads (schedule, process_outputs, detokenize).");
  const actors::StageSeconds& s = gauges.stage_s;
  for (const auto& [stage, seconds] : {std::pair{"schedule", s.schedule},
                                       {"copies", s.copies},
                                       {"forward", s.forward},
                                       {"sampling", s.sampling},
                                       {"process_outputs", s.process_outputs},
                                       {"detokenize", s.detokenize}}) {
    w.sample("pagedserve_step_stage_seconds_total", std::string("stage=\"") + stage + "\"",
             seconds);
  }
  // Speculative decoding: acceptance rate = accepted / proposed; mean accepted length per
  // verifying sequence-step = accepted / rows.
  w.metric("pagedserve_spec_decode_num_draft_tokens_total", "counter",
           "Tokens proposed by speculative decoding.",
           static_cast<double>(gauges.spec_proposed_tokens_total));
  w.metric("pagedserve_spec_decode_num_accepted_tokens_total", "counter",
           "Proposed tokens accepted by verification.",
           static_cast<double>(gauges.spec_accepted_tokens_total));
  w.metric("pagedserve_spec_decode_num_drafts_total", "counter",
           "Sequence-steps that verified proposals.", static_cast<double>(gauges.spec_rows_total));
  w.metric("pagedserve_spec_decode_acceptance_rate", "gauge",
           "Accepted / proposed tokens since start (0 before any proposal).",
           gauges.spec_proposed_tokens_total == 0
               ? 0.0
               : static_cast<double>(gauges.spec_accepted_tokens_total) /
                     static_cast<double>(gauges.spec_proposed_tokens_total));
  w.metric("pagedserve_spec_decode_mean_accepted_length", "gauge",
           "Accepted tokens per sequence-step that verified proposals (0 before any).",
           gauges.spec_rows_total == 0 ? 0.0
                                       : static_cast<double>(gauges.spec_accepted_tokens_total) /
                                             static_cast<double>(gauges.spec_rows_total));
  return w.take();
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
