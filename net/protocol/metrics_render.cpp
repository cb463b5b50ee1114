// render_prometheus (see metrics.h): the pagedserve_* families, then, with --metrics-compat
// vllm, the same values under vLLM's names. Pure; any thread.
//
// vLLM's series (vllm/v1/metrics/loggers.py) carry the labels model_name and engine (the
// engine core's index; one engine here, so "0"); counters are written as prometheus_client
// writes them (family and sample named *_total). What reads them: the llm-d EPP's default
// "vllm" engine config (num_requests_waiting, num_requests_running, kv_cache_usage_perc,
// lora_requests_info, cache_config_info) and vLLM production-stack's router (the deprecated
// gpu_cache_usage_perc and gpu_prefix_cache_* names too).
#include <map>
#include <string>

#include "net/protocol/metrics.h"
#include "net/protocol/prometheus_text.h"

namespace pagedserve::net {
namespace {

// Each histogram read once per scrape: both spellings of a series show the same observations.
struct ScrapeSnapshot {
  Histogram::Snapshot ttft;
  Histogram::Snapshot inter_token;
  Histogram::Snapshot e2e;
  std::map<std::string, uint64_t> finished;  // by finish reason
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
};

void histogram(PrometheusText& w, std::string_view name, std::string_view help,
               std::string_view labels, const Histogram::Snapshot& s) {
  w.header(name, "histogram", help);
  w.histogram_series(name, labels, s.upper_bounds, s.cumulative, s.sum, s.count);
}

std::string cache_config_labels(const EngineGauges& gauges, const MetricsExposition& x) {
  return label_pair("block_size", std::to_string(x.block_size_tokens)) + "," +
         label_pair("num_gpu_blocks", std::to_string(gauges.kv_blocks_total));
}

void render_request_metrics(PrometheusText& w, const ScrapeSnapshot& s) {
  w.metric("pagedserve_prompt_tokens_total", "counter", "Prompt tokens processed.",
           static_cast<double>(s.prompt_tokens));
  w.metric("pagedserve_generation_tokens_total", "counter", "Generated tokens.",
           static_cast<double>(s.generation_tokens));
  w.header("pagedserve_request_success_total", "counter",
           "Requests finished, by finish reason (stop, length, abort).");
  for (const auto& [reason, count] : s.finished) {
    w.sample("pagedserve_request_success_total", label_pair("finish_reason", reason),
             static_cast<double>(count));
  }
  histogram(w, "pagedserve_time_to_first_token_seconds", "Time to first token in seconds.", "",
            s.ttft);
  histogram(w, "pagedserve_inter_token_latency_seconds",
            "Time between consecutive outputs of one sequence in seconds.", "", s.inter_token);
  histogram(w, "pagedserve_e2e_request_latency_seconds",
            "Request latency from arrival to final output in seconds.", "", s.e2e);
}

// Speculative decoding: acceptance rate = accepted / proposed; mean accepted length per
// verifying sequence-step = accepted / rows (both 0 before any proposal, not NaN).
void render_spec_decode(PrometheusText& w, const EngineGauges& g) {
  w.metric("pagedserve_spec_decode_num_draft_tokens_total", "counter",
           "Tokens proposed by speculative decoding.",
           static_cast<double>(g.spec_proposed_tokens_total));
  w.metric("pagedserve_spec_decode_num_accepted_tokens_total", "counter",
           "Proposed tokens accepted by verification.",
           static_cast<double>(g.spec_accepted_tokens_total));
  w.metric("pagedserve_spec_decode_num_drafts_total", "counter",
           "Sequence-steps that verified proposals.", static_cast<double>(g.spec_rows_total));
  const double proposed = static_cast<double>(g.spec_proposed_tokens_total);
  const double accepted = static_cast<double>(g.spec_accepted_tokens_total);
  const double rows = static_cast<double>(g.spec_rows_total);
  w.metric("pagedserve_spec_decode_acceptance_rate", "gauge",
           "Accepted / proposed tokens since start (0 before any proposal).",
           proposed == 0 ? 0.0 : accepted / proposed);
  w.metric("pagedserve_spec_decode_mean_accepted_length", "gauge",
           "Accepted tokens per sequence-step that verified proposals (0 before any).",
           rows == 0 ? 0.0 : accepted / rows);
}

void render_engine_gauges(PrometheusText& w, const EngineGauges& g, const MetricsExposition& x) {
  w.metric("pagedserve_num_requests_running", "gauge", "Sequences running on the engine.",
           g.num_requests_running);
  w.metric("pagedserve_num_requests_waiting", "gauge", "Sequences waiting to be scheduled.",
           g.num_requests_waiting);
  w.metric("pagedserve_num_requests_swapped", "gauge", "Sequences swapped out to host memory.",
           g.num_requests_swapped);
  w.metric("pagedserve_kv_blocks_total", "gauge", "KV cache blocks on the device.",
           static_cast<double>(g.kv_blocks_total));
  w.metric("pagedserve_kv_blocks_free", "gauge", "Allocatable KV cache blocks.",
           static_cast<double>(g.kv_blocks_free));
  w.metric("pagedserve_kv_blocks_cached", "gauge",
           "Free KV cache blocks that still hold prefix-cache content.",
           static_cast<double>(g.kv_blocks_cached));
  w.metric("pagedserve_kv_cache_usage_perc", "gauge",
           "Fraction of KV cache blocks in use (0 to 1; 1 means full).", g.kv_cache_usage_perc);
  w.header("pagedserve_cache_config_info", "gauge",
           "KV cache configuration in labels (tokens per block, device blocks); value 1.");
  w.sample("pagedserve_cache_config_info", cache_config_labels(g, x), 1);
  w.metric("pagedserve_prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache.",
           static_cast<double>(g.prefix_cache_queries_total));
  w.metric("pagedserve_prefix_cache_hits_total", "counter",
           "Prompt tokens found in the prefix cache.",
           static_cast<double>(g.prefix_cache_hits_total));
  w.header("pagedserve_preemptions_total", "counter", "Sequence groups preempted, by mode.");
  w.sample("pagedserve_preemptions_total", "mode=\"swap\"",
           static_cast<double>(g.preemptions_swap_total));
  w.sample("pagedserve_preemptions_total", "mode=\"recompute\"",
           static_cast<double>(g.preemptions_recompute_total));
  w.header("pagedserve_step_stage_seconds_total", "counter",
           "Seconds spent per stage of the served steps: executor stages (copies, forward, "
           "sampling) and host stages on other threads (schedule, process_outputs, detokenize).");
  const actors::StageSeconds& s = g.stage_s;
  for (const auto& [stage, seconds] : {std::pair{"schedule", s.schedule},
                                       {"copies", s.copies},
                                       {"forward", s.forward},
                                       {"sampling", s.sampling},
                                       {"process_outputs", s.process_outputs},
                                       {"detokenize", s.detokenize}}) {
    w.sample("pagedserve_step_stage_seconds_total", std::string("stage=\"") + stage + "\"",
             seconds);
  }
  render_spec_decode(w, g);
}

// One labelled series of a new family.
void labelled(PrometheusText& w, std::string_view name, std::string_view type,
              std::string_view help, std::string_view labels, double value) {
  w.header(name, type, help);
  w.sample(name, labels, value);
}

void render_vllm_gauges(PrometheusText& w, const EngineGauges& g, const MetricsExposition& x,
                        const std::string& labels) {
  labelled(w, "vllm:num_requests_running", "gauge",
           "Number of requests in model execution batches.", labels, g.num_requests_running);
  labelled(w, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           labels, g.num_requests_waiting);
  labelled(w, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           labels, g.kv_cache_usage_perc);
  labelled(w, "vllm:gpu_cache_usage_perc", "gauge",
           "KV-cache usage. 1 means 100 percent usage. DEPRECATED: use vllm:kv_cache_usage_perc.",
           labels, g.kv_cache_usage_perc);
  const double queries = static_cast<double>(g.prefix_cache_queries_total);
  const double hits = static_cast<double>(g.prefix_cache_hits_total);
  labelled(w, "vllm:prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens.", labels, queries);
  labelled(w, "vllm:prefix_cache_hits_total", "counter",
           "Prefix cache hits, in terms of number of cached tokens.", labels, hits);
  labelled(w, "vllm:gpu_prefix_cache_queries_total", "counter",
           "Prefix cache queries in tokens. DEPRECATED: use vllm:prefix_cache_queries.", labels,
           queries);
  labelled(w, "vllm:gpu_prefix_cache_hits_total", "counter",
           "Prefix cache hits in tokens. DEPRECATED: use vllm:prefix_cache_hits.", labels, hits);
  labelled(w, "vllm:num_preemptions_total", "counter",
           "Cumulative number of preemption from the engine.", labels,
           static_cast<double>(g.preemptions_swap_total + g.preemptions_recompute_total));
  // vLLM writes every CacheConfig field as a label; these are the ones that exist here.
  w.header("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  w.sample("vllm:cache_config_info",
           cache_config_labels(g, x) + "," + label_pair("cache_dtype", x.cache_dtype) + "," +
               label_pair("enable_prefix_caching", x.enable_prefix_caching ? "True" : "False") +
               ",engine=\"0\"",
           1);
  // No LoRA adapters: max_lora 0, none running or waiting. The value is the time of the
  // report, as vLLM sets it (set_to_current_time).
  w.header("vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
  w.sample("vllm:lora_requests_info",
           "max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"", g.scrape_unix_s);
}

void render_vllm_requests(PrometheusText& w, const ScrapeSnapshot& s, const std::string& labels) {
  labelled(w, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", labels,
           static_cast<double>(s.prompt_tokens));
  labelled(w, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           labels, static_cast<double>(s.generation_tokens));
  w.header("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, count] : s.finished) {
    w.sample("vllm:request_success_total", labels + "," + label_pair("finished_reason", reason),
             static_cast<double>(count));
  }
  histogram(w, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            labels, s.ttft);
  histogram(w, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            labels, s.inter_token);
  histogram(w, "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds. DEPRECATED: use "
            "vllm:inter_token_latency_seconds (the same observations).",
            labels, s.inter_token);
  histogram(w, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            labels, s.e2e);
}

}  // namespace

std::string render_prometheus(const Metrics& metrics, const EngineGauges& gauges,
                              const MetricsExposition& exposition) {
  const ScrapeSnapshot snapshot{metrics.time_to_first_token().snapshot(),
                                metrics.inter_token_latency().snapshot(),
                                metrics.e2e_request_latency().snapshot(),
                                metrics.finished_requests(),
                                metrics.prompt_tokens(),
                                metrics.generation_tokens()};
  PrometheusText w(exposition.vllm_compat ? 32768 : 12288);
  render_request_metrics(w, snapshot);
  render_engine_gauges(w, gauges, exposition);
  if (exposition.vllm_compat) {
    const std::string labels = label_pair("model_name", exposition.model_name) + ",engine=\"0\"";
    render_vllm_gauges(w, gauges, exposition, labels);
    render_vllm_requests(w, snapshot, labels);
  }
  return w.take();
}

}  // namespace pagedserve::net
