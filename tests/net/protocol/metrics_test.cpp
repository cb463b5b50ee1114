// Tests for Metrics, render_prometheus (parsed back line by line) and RequestTimer.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "net/protocol/metrics.h"

namespace pagedserve::net {
namespace {

using namespace std::chrono_literals;

struct Sample {
  std::string name;
  std::string labels;  // the text between { and }, "" when none
  double value = 0;
};

// A strict-enough reader of text format 0.0.4: every sample's family has HELP and TYPE lines
// before it, and no line is malformed.
struct Exposition {
  std::map<std::string, std::string> types;  // family -> type
  std::set<std::string> helps;
  std::vector<Sample> samples;

  static std::string family_of(const std::string& name,
                               const std::map<std::string, std::string>& types) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        const std::string base = name.substr(0, name.size() - s.size());
        if (types.count(base) && types.at(base) == "histogram") return base;
      }
    }
    return name;
  }

  explicit Exposition(const std::string& text) { parse(text); }

  void parse(const std::string& text) {
    EXPECT_FALSE(text.empty());
    EXPECT_EQ(text.back(), '\n');
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      ASSERT_FALSE(line.empty());
      if (line.rfind("# HELP ", 0) == 0) {
        const std::string rest = line.substr(7);
        const size_t space = rest.find(' ');
        ASSERT_NE(space, std::string::npos) << line;
        helps.insert(rest.substr(0, space));
        continue;
      }
      if (line.rfind("# TYPE ", 0) == 0) {
        std::istringstream fields(line.substr(7));
        std::string name, type;
        fields >> name >> type;
        ASSERT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
        ASSERT_EQ(types.count(name), 0u) << "duplicate TYPE " << line;
        types[name] = type;
        continue;
      }
      ASSERT_NE(line[0], '#') << line;
      Sample s;
      const size_t brace = line.find('{');
      const size_t space = line.rfind(' ');
      ASSERT_NE(space, std::string::npos) << line;
      if (brace != std::string::npos && brace < space) {
        const size_t close = line.find('}', brace);
        ASSERT_NE(close, std::string::npos) << line;
        s.name = line.substr(0, brace);
        s.labels = line.substr(brace + 1, close - brace - 1);
      } else {
        s.name = line.substr(0, space);
      }
      const std::string value = line.substr(space + 1);
      s.value = value == "+Inf" ? INFINITY : std::stod(value);
      for (char c : s.name)
        ASSERT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':') << line;
      const std::string family = family_of(s.name, types);
      ASSERT_TRUE(types.count(family)) << "sample before its TYPE: " << line;
      ASSERT_TRUE(helps.count(family)) << "sample without HELP: " << line;
      samples.push_back(s);
    }
  }

  double value(const std::string& name, const std::string& labels = "") const {
    for (const Sample& s : samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    ADD_FAILURE() << "no sample " << name << "{" << labels << "}";
    return -1;
  }

  // Checks a histogram's buckets: increasing le, cumulative counts, +Inf last == _count.
  void expect_histogram(const std::string& family, double count, double sum) const {
    EXPECT_EQ(types.at(family), "histogram");
    double previous_le = -INFINITY;
    double previous_count = 0;
    std::string last_labels;
    int buckets = 0;
    for (const Sample& s : samples) {
      if (s.name != family + "_bucket") continue;
      ++buckets;
      ASSERT_EQ(s.labels.rfind("le=\"", 0), 0u) << s.labels;
      const std::string le = s.labels.substr(4, s.labels.size() - 5);
      const double bound = le == "+Inf" ? INFINITY : std::stod(le);
      EXPECT_GT(bound, previous_le) << family;
      EXPECT_GE(s.value, previous_count) << family << " le=" << le;
      previous_le = bound;
      previous_count = s.value;
      last_labels = s.labels;
    }
    EXPECT_GT(buckets, 1);
    EXPECT_EQ(last_labels, "le=\"+Inf\"");
    EXPECT_EQ(previous_count, value(family + "_count"));
    EXPECT_EQ(value(family + "_count"), count);
    EXPECT_NEAR(value(family + "_sum"), sum, 1e-9);
  }
};

TEST(MetricsTest, HistogramBucketsAreInclusiveAndCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // le is inclusive
  h.observe(0.5);
  h.observe(7.0);
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.sum, 7.65);
}

TEST(MetricsTest, RenderedTextParsesBack) {
  Metrics metrics;
  metrics.add_prompt_tokens(12);
  metrics.add_generation_tokens(30);
  metrics.count_finished_request("stop");
  metrics.count_finished_request("stop");
  metrics.count_finished_request("length");
  metrics.count_finished_request("error");  // not a success
  metrics.observe_time_to_first_token(0.03);
  metrics.observe_time_to_first_token(3.0);
  metrics.observe_inter_token_latency(0.02);
  metrics.observe_e2e_request_latency(5000.0);
  EngineGauges gauges;
  gauges.num_requests_running = 3;
  gauges.num_requests_waiting = 4;
  gauges.num_requests_swapped = 1;
  gauges.kv_blocks_total = 100;
  gauges.kv_blocks_free = 60;
  gauges.kv_blocks_cached = 10;
  gauges.kv_cache_usage_perc = 0.4;
  gauges.prefix_cache_queries_total = 50;
  gauges.prefix_cache_hits_total = 20;
  gauges.preemptions_swap_total = 2;
  gauges.preemptions_recompute_total = 5;
  gauges.stage_s.forward = 2.5;
  gauges.stage_s.sampling = 0.125;
  gauges.stage_s.detokenize = 0.75;

  const Exposition e(render_prometheus(metrics, gauges));
  EXPECT_EQ(e.types.at("pagedserve_prompt_tokens_total"), "counter");
  EXPECT_EQ(e.value("pagedserve_prompt_tokens_total"), 12);
  EXPECT_EQ(e.value("pagedserve_generation_tokens_total"), 30);
  EXPECT_EQ(e.value("pagedserve_request_success_total", "finish_reason=\"stop\""), 2);
  EXPECT_EQ(e.value("pagedserve_request_success_total", "finish_reason=\"length\""), 1);
  for (const Sample& s : e.samples) EXPECT_EQ(s.labels.find("error"), std::string::npos);
  e.expect_histogram("pagedserve_time_to_first_token_seconds", 2, 3.03);
  e.expect_histogram("pagedserve_inter_token_latency_seconds", 1, 0.02);
  e.expect_histogram("pagedserve_e2e_request_latency_seconds", 1, 5000.0);
  EXPECT_EQ(e.value("pagedserve_time_to_first_token_seconds_bucket", "le=\"0.04\""), 1);
  EXPECT_EQ(e.value("pagedserve_e2e_request_latency_seconds_bucket", "le=\"1920\""), 0);
  EXPECT_EQ(e.value("pagedserve_e2e_request_latency_seconds_bucket", "le=\"7680\""), 1);
  EXPECT_EQ(e.types.at("pagedserve_num_requests_running"), "gauge");
  EXPECT_EQ(e.value("pagedserve_num_requests_running"), 3);
  EXPECT_EQ(e.value("pagedserve_num_requests_waiting"), 4);
  EXPECT_EQ(e.value("pagedserve_num_requests_swapped"), 1);
  EXPECT_EQ(e.value("pagedserve_kv_blocks_total"), 100);
  EXPECT_EQ(e.value("pagedserve_kv_blocks_free"), 60);
  EXPECT_EQ(e.value("pagedserve_kv_blocks_cached"), 10);
  EXPECT_DOUBLE_EQ(e.value("pagedserve_kv_cache_usage_perc"), 0.4);
  EXPECT_EQ(e.types.at("pagedserve_cache_config_info"), "gauge");
  EXPECT_EQ(e.value("pagedserve_cache_config_info", "block_size=\"0\",num_gpu_blocks=\"100\""), 1);
  EXPECT_EQ(e.types.at("pagedserve_prefix_cache_queries_total"), "counter");
  EXPECT_EQ(e.value("pagedserve_prefix_cache_queries_total"), 50);
  EXPECT_EQ(e.value("pagedserve_prefix_cache_hits_total"), 20);
  EXPECT_EQ(e.types.at("pagedserve_preemptions_total"), "counter");
  EXPECT_EQ(e.value("pagedserve_preemptions_total", "mode=\"swap\""), 2);
  EXPECT_EQ(e.value("pagedserve_preemptions_total", "mode=\"recompute\""), 5);
  EXPECT_EQ(e.types.at("pagedserve_step_stage_seconds_total"), "counter");
  EXPECT_EQ(e.value("pagedserve_step_stage_seconds_total", "stage=\"forward\""), 2.5);
  EXPECT_EQ(e.value("pagedserve_step_stage_seconds_total", "stage=\"sampling\""), 0.125);
  EXPECT_EQ(e.value("pagedserve_step_stage_seconds_total", "stage=\"detokenize\""), 0.75);
  EXPECT_EQ(e.value("pagedserve_step_stage_seconds_total", "stage=\"schedule\""), 0);
  // Speculative decoding (off here: every counter 0, the ratios 0 rather than NaN).
  EXPECT_EQ(e.types.at("pagedserve_spec_decode_num_draft_tokens_total"), "counter");
  EXPECT_EQ(e.value("pagedserve_spec_decode_num_accepted_tokens_total"), 0);
  EXPECT_EQ(e.value("pagedserve_spec_decode_acceptance_rate"), 0);
  EXPECT_EQ(e.value("pagedserve_spec_decode_mean_accepted_length"), 0);
    EXPECT_EQ(e.types.size(), 23u);
  EXPECT_EQ(e.helps.size(), 23u);
  for (const auto& [family, type] : e.types) EXPECT_EQ(family.rfind("vllm:", 0), std::string::npos);
}

// --metrics-compat vllm: every series the llm-d EPP's default "vllm" engine config reads
// (pkg/epp/.../extractor/metrics/factories.go), and the latency histograms, under vLLM's names
// and labels, carrying the same values as the pagedserve_* series.
TEST(MetricsTest, VllmCompatExportsVllmNames) {
  Metrics metrics;
  metrics.add_prompt_tokens(9);
  metrics.add_generation_tokens(21);
  metrics.count_finished_request("length");
  metrics.observe_time_to_first_token(0.03);
  metrics.observe_inter_token_latency(0.02);
  metrics.observe_inter_token_latency(0.2);
  metrics.observe_e2e_request_latency(1.5);
  EngineGauges gauges;
  gauges.num_requests_running = 3;
  gauges.num_requests_waiting = 4;
  gauges.kv_blocks_total = 100;
  gauges.kv_blocks_free = 75;
  gauges.kv_cache_usage_perc = 0.25;
  gauges.prefix_cache_queries_total = 64;
  gauges.prefix_cache_hits_total = 32;
  gauges.preemptions_swap_total = 1;
  gauges.preemptions_recompute_total = 2;
  gauges.scrape_unix_s = 1.7e9;
  MetricsExposition x;
  x.model_name = "my \"model\"";
  x.block_size_tokens = 16;
  x.cache_dtype = "float16";

  // Without the flag: no vLLM name at all.
  EXPECT_EQ(render_prometheus(metrics, gauges, x).find("vllm:"), std::string::npos);

  x.vllm_compat = true;
  const Exposition e(render_prometheus(metrics, gauges, x));
  const std::string labels = "model_name=\"my \\\"model\\\"\",engine=\"0\"";
  for (const char* gauge :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc", "vllm:cache_config_info", "vllm:lora_requests_info"}) {
    EXPECT_EQ(e.types.at(gauge), "gauge") << gauge;
    int series = 0;
    for (const Sample& s : e.samples) series += s.name == gauge;
    EXPECT_EQ(series, 1) << gauge;
  }
  EXPECT_EQ(e.value("vllm:num_requests_running", labels), 3);
  EXPECT_EQ(e.value("vllm:num_requests_waiting", labels), 4);
  EXPECT_DOUBLE_EQ(e.value("vllm:kv_cache_usage_perc", labels), 0.25);
  EXPECT_DOUBLE_EQ(e.value("vllm:gpu_cache_usage_perc", labels), 0.25);
  EXPECT_EQ(e.value("vllm:cache_config_info",
                    "block_size=\"16\",num_gpu_blocks=\"100\",cache_dtype=\"float16\","
                    "enable_prefix_caching=\"True\",engine=\"0\""),
            1);
  EXPECT_EQ(e.value("vllm:lora_requests_info",
                    "max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\""),
            1.7e9);
  for (const char* counter :
       {"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
        "vllm:num_preemptions_total", "vllm:gpu_prefix_cache_queries_total"}) {
    EXPECT_EQ(e.types.at(counter), "counter") << counter;
  }
  EXPECT_EQ(e.value("vllm:prefix_cache_queries_total", labels), 64);
  EXPECT_EQ(e.value("vllm:prefix_cache_hits_total", labels), 32);
  EXPECT_EQ(e.value("vllm:prompt_tokens_total", labels), 9);
  EXPECT_EQ(e.value("vllm:generation_tokens_total", labels), 21);
  EXPECT_EQ(e.value("vllm:num_preemptions_total", labels), 3);
  EXPECT_EQ(e.value("vllm:request_success_total", labels + ",finished_reason=\"length\""), 1);
  EXPECT_EQ(e.value("vllm:request_success_total", labels + ",finished_reason=\"stop\""), 0);
  for (const char* h : {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                        "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds"}) {
    EXPECT_EQ(e.types.at(h), "histogram") << h;
  }
  EXPECT_EQ(e.value("vllm:inter_token_latency_seconds_count", labels), 2);
  EXPECT_NEAR(e.value("vllm:inter_token_latency_seconds_sum", labels), 0.22, 1e-12);
  EXPECT_EQ(e.value("vllm:inter_token_latency_seconds_bucket", labels + ",le=\"0.025\""), 1);
  EXPECT_EQ(e.value("vllm:inter_token_latency_seconds_bucket", labels + ",le=\"+Inf\""), 2);
  EXPECT_EQ(e.value("vllm:time_per_output_token_seconds_count", labels), 2);
  EXPECT_EQ(e.value("vllm:time_to_first_token_seconds_bucket", labels + ",le=\"0.04\""), 1);
  EXPECT_EQ(e.value("vllm:e2e_request_latency_seconds_count", labels), 1);
  // The native series are all still there, unchanged.
  EXPECT_EQ(e.value("pagedserve_num_requests_waiting"), 4);
  EXPECT_DOUBLE_EQ(e.value("pagedserve_kv_cache_usage_perc"), 0.25);
  e.expect_histogram("pagedserve_inter_token_latency_seconds", 2, 0.22);
}

TEST(MetricsTest, EmptyRegistryRendersValidText) {
  const Exposition e(render_prometheus(Metrics(), EngineGauges()));
  e.expect_histogram("pagedserve_time_to_first_token_seconds", 0, 0);
  EXPECT_EQ(e.types.at("pagedserve_request_success_total"), "counter");
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  Metrics metrics;
  metrics.count_finished_request("a\"b\\c\nd");
  const std::string text = render_prometheus(metrics, EngineGauges());
  EXPECT_NE(text.find("pagedserve_request_success_total{finish_reason=\"a\\\"b\\\\c\\nd\"} 1\n"),
            std::string::npos);
}

TEST(MetricsTest, GaugesFromEngineStats) {
  actors::EngineStats stats;
  stats.num_running_seqs = 2;
  stats.num_waiting_seqs = 5;
  stats.num_kv_blocks_total = 200;
  stats.num_kv_blocks_used = 50;
  stats.num_kv_blocks_free = 150;
  stats.stage_s.sampling = 0.5;
  const EngineGauges g = gauges_from_stats(stats);
  EXPECT_EQ(g.stage_s.sampling, 0.5);
  EXPECT_EQ(g.num_requests_running, 2);
  EXPECT_EQ(g.num_requests_waiting, 5);
  EXPECT_EQ(g.kv_blocks_total, 200);
  EXPECT_EQ(g.kv_blocks_free, 150);
  EXPECT_DOUBLE_EQ(g.kv_cache_usage_perc, 0.25);
  EXPECT_DOUBLE_EQ(gauges_from_stats(actors::EngineStats()).kv_cache_usage_perc, 0.0);
}

TEST(MetricsTest, RequestTimerRecordsFromEventTimes) {
  Metrics metrics;
  const auto t0 = RequestTimer::Clock::time_point{} + 1000s;
  RequestTimer timer(metrics, t0);
  actors::TokenEvent e;
  e.num_prompt_tokens = 7;
  e.token_ids = {1};
  timer.on_event(e, t0 + 250ms);  // TTFT 0.25
  e.index = 1;
  timer.on_event(e, t0 + 260ms);  // first token of output 1: no ITL
  e.index = 0;
  e.token_ids = {2, 3};
  timer.on_event(e, t0 + 300ms);  // ITL 0.05 for output 0
  actors::TokenEvent end;
  end.num_prompt_tokens = 7;
  end.finished = true;
  end.finish_reason = "stop";
  timer.on_event(end, t0 + 1s);  // e2e 1.0
  EXPECT_TRUE(timer.finished());
  timer.on_event(end, t0 + 2s);  // ignored

  EXPECT_EQ(metrics.prompt_tokens(), 7);
  EXPECT_EQ(metrics.generation_tokens(), 4);
  EXPECT_EQ(metrics.finished_requests().at("stop"), 0u);  // the transport counts finishes
  const auto ttft = metrics.time_to_first_token().snapshot();
  EXPECT_EQ(ttft.count, 1u);
  EXPECT_NEAR(ttft.sum, 0.25, 1e-9);
  const auto itl = metrics.inter_token_latency().snapshot();
  EXPECT_EQ(itl.count, 1u);
  EXPECT_NEAR(itl.sum, 0.05, 1e-9);
  const auto e2e = metrics.e2e_request_latency().snapshot();
  EXPECT_EQ(e2e.count, 1u);
  EXPECT_NEAR(e2e.sum, 1.0, 1e-9);
}

TEST(MetricsTest, ConcurrentUpdatesAndScrapes) {
  Metrics metrics;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics] {
      for (int i = 0; i < kPerThread; ++i) {
        metrics.add_generation_tokens(1);
        metrics.observe_inter_token_latency(0.01 * (i % 7));
        metrics.count_finished_request(i % 2 ? "stop" : "length");
      }
    });
  }
  std::thread scraper([&metrics] {
    for (int i = 0; i < 20; ++i) {
      const std::string text = render_prometheus(metrics, EngineGauges());
      // Every scrape is internally consistent (+Inf bucket == _count).
      const Exposition e(text);
      EXPECT_EQ(e.value("pagedserve_inter_token_latency_seconds_bucket", "le=\"+Inf\""),
                e.value("pagedserve_inter_token_latency_seconds_count"));
    }
  });
  for (auto& t : threads) t.join();
  scraper.join();
  EXPECT_EQ(metrics.generation_tokens(), kThreads * kPerThread);
  EXPECT_EQ(metrics.inter_token_latency().snapshot().count, uint64_t{kThreads * kPerThread});
  EXPECT_EQ(metrics.finished_requests().at("stop") + metrics.finished_requests().at("length"),
            uint64_t{kThreads * kPerThread});
}

}  // namespace
}  // namespace pagedserve::net
