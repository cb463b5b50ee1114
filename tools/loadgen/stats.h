// Per-request records of a load-generator run and the statistics over them: throughput,
// TTFT, TPOT, ITL, end-to-end and normalized latency, the summary table and the JSON result.
// Pure: no Asio.
//
// Percentiles use linear interpolation between closest ranks (numpy's default, as in vLLM's
// benchmark_serving): p of sorted x[0..n-1] is x at fractional rank (n - 1) * p / 100.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pagedserve::loadgen {

// One request as the client saw it. Times are seconds from the start of the run.
struct RequestRecord {
  int64_t index = 0;                   // position in the replayed slice
  double scheduled_s = 0.0;            // when the schedule said to send it
  double sent_s = 0.0;                 // when it was sent (later under --max-concurrency)
  double end_s = 0.0;                  // when the response ended (or failed)
  int64_t prompt_tokens = 0;           // sent ids, or the server's usage.prompt_tokens for text
  int64_t output_tokens = 0;           // usage.completion_tokens, else the number of token chunks
  int64_t expected_output_tokens = 0;  // max_tokens asked for (0 = unset)
  std::vector<double> chunk_s;         // arrival of each chunk that carried output
  bool ok = false;
  std::string error;  // why it failed: "http 503", "connect: ...", a server message

  double latency_s() const { return end_s - sent_s; }
  double ttft_s() const { return chunk_s.empty() ? latency_s() : chunk_s.front() - sent_s; }
};

// mean and percentiles of one metric, in milliseconds.
struct Distribution {
  int64_t count = 0;
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
};

// Linear-interpolation percentile of `sorted` (ascending, non-empty), p in [0, 100].
double percentile(const std::vector<double>& sorted, double p);
Distribution distribution_ms(std::vector<double> values_s);

struct Summary {
  int64_t completed = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> failure_reasons;  // error -> count
  double duration_s = 0.0;                         // run start to the last response's end
  double request_throughput = 0.0;                 // completed requests / s
  double input_token_throughput = 0.0;             // prompt tokens of completed requests / s
  double output_token_throughput = 0.0;            // output tokens of completed requests / s
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  Distribution ttft, tpot, itl, e2e;
  Distribution send_lag;              // sent - scheduled: how late the open-loop clock fired
  double normalized_latency_s = 0.0;  // mean over completed of latency / output tokens
};

// TPOT = (latency - TTFT) / (output tokens - 1), over requests with >= 2 output tokens.
// ITL pools the gaps between consecutive chunks of every completed request.
Summary summarize(const std::vector<RequestRecord>& records, double duration_s);

// The human-readable table printed at the end of a run.
std::string format_summary(const Summary& summary, const std::string& title);

nlohmann::ordered_json summary_json(const Summary& summary);
nlohmann::ordered_json record_json(const RequestRecord& record);

}  // namespace pagedserve::loadgen
