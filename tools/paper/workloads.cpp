// The paper's workloads: reading and selecting the lengths, synthesizing Figs. 16-17's.
#include "tools/paper/workloads.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "tools/loadgen/schedule.h"
#include "tools/loadgen/trace.h"

namespace pagedserve::paper {
namespace {

std::string two_decimals(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f", value);
  return buffer;
}

}  // namespace

const char* workload_name(PaperWorkload kind) {
  switch (kind) {
    case PaperWorkload::kShareGpt:
      return "sharegpt";
    case PaperWorkload::kAlpaca:
      return "alpaca";
    case PaperWorkload::kAzureConv:
      return "azure-conv";
    case PaperWorkload::kAzureCode:
      return "azure-code";
  }
  return "?";
}

std::optional<PaperWorkload> parse_workload(const std::string& name) {
  for (PaperWorkload kind : {PaperWorkload::kShareGpt, PaperWorkload::kAlpaca,
                             PaperWorkload::kAzureConv, PaperWorkload::kAzureCode}) {
    if (name == workload_name(kind)) return kind;
  }
  return std::nullopt;
}

std::filesystem::path workload_file(PaperWorkload kind, const std::filesystem::path& traces_root) {
  switch (kind) {
    case PaperWorkload::kShareGpt:
      return traces_root / "sharegpt-lengths/sharegpt_opt_lengths.csv";
    case PaperWorkload::kAlpaca:
      return traces_root / "alpaca-lengths/alpaca_5000_lengths.csv";
    case PaperWorkload::kAzureConv:
      return traces_root / "azure-2023/AzureLLMInferenceTrace_conv.csv";
    case PaperWorkload::kAzureCode:
      return traces_root / "azure-2023/AzureLLMInferenceTrace_code.csv";
  }
  return {};
}

std::vector<LengthPair> select_lengths(PaperWorkload kind, const std::filesystem::path& traces_root,
                                       int num, int max_model_len, unsigned seed, bool shuffle) {
  const std::filesystem::path path = workload_file(kind, traces_root);
  const loadgen::TraceReadResult read =
      loadgen::read_trace_file(path.string(), loadgen::BadLinePolicy::kFail);
  std::vector<LengthPair> out;
  if (kind == PaperWorkload::kAzureConv || kind == PaperWorkload::kAzureCode) {
    std::vector<loadgen::TraceRequest> slice = loadgen::slice(read.requests, 0, num);
    loadgen::fit_to_context(slice, 0, max_model_len);
    for (const loadgen::TraceRequest& t : slice) {
      out.push_back({t.prompt_tokens, std::max<int64_t>(t.max_tokens.value_or(1), 1)});
    }
    return out;
  }
  for (const loadgen::TraceRequest& t : read.requests) {
    if (num >= 0 && static_cast<int>(out.size()) >= num) break;
    const int64_t output = t.max_tokens.value_or(1);
    if (t.prompt_tokens + output <= max_model_len) out.push_back({t.prompt_tokens, output});
  }
  if (shuffle) {
    std::mt19937 rng(seed);
    std::shuffle(out.begin(), out.end(), rng);
  }
  return out;
}

Workload make_workload(const std::vector<LengthPair>& lengths, int prefix_tokens, unsigned seed,
                       const std::string& source) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(100, 50000);
  std::vector<int32_t> prefix(prefix_tokens);
  for (int32_t& t : prefix) t = id(rng);
  Workload w;
  double prompt_sum = 0, output_sum = 0;
  for (const LengthPair& pair : lengths) {
    SimRequest r;
    r.prompt_token_ids = prefix;
    for (int64_t i = 0; i < pair.input; ++i) r.prompt_token_ids.push_back(id(rng));
    r.output_len = static_cast<int>(std::max<int64_t>(pair.output, 1));
    prompt_sum += static_cast<double>(r.prompt_token_ids.size());
    output_sum += r.output_len;
    w.requests.push_back(std::move(r));
  }
  const double n = std::max<double>(static_cast<double>(w.requests.size()), 1.0);
  w.description = source + " (" + std::to_string(w.requests.size()) + " requests, mean prompt " +
                  two_decimals(prompt_sum / n) + ", mean output " + two_decimals(output_sum / n) +
                  " tokens)";
  return w;
}

Workload load_workload(PaperWorkload kind, const std::filesystem::path& traces_root, int num,
                       int max_model_len, int prefix_tokens, unsigned seed) {
  const std::vector<LengthPair> lengths =
      select_lengths(kind, traces_root, num, max_model_len - prefix_tokens, seed);
  const bool azure = kind == PaperWorkload::kAzureConv || kind == PaperWorkload::kAzureCode;
  const std::string source = std::string(workload_name(kind)) + " (" +
                             workload_file(kind, traces_root).filename().string() +
                             (azure ? ", first rows, clipped to the context"
                                    : ", the paper's filter, first rows shuffled") +
                             ")";
  return make_workload(lengths, prefix_tokens, seed, source);
}

std::vector<SimRequest> at_rate(std::vector<SimRequest> requests, double rate, unsigned seed) {
  const std::vector<double> arrivals = loadgen::rate_arrivals(requests.size(), rate, 1.0, seed);
  for (size_t i = 0; i < requests.size(); ++i) requests[i].arrival_s = arrivals[i];
  return requests;
}

std::vector<SimRequest> offline_batch(const std::vector<SimRequest>& pool, int n, unsigned seed) {
  std::vector<SimRequest> requests;
  if (pool.empty()) return requests;
  requests.reserve(static_cast<size_t>(std::max(n, 0)));
  for (int i = 0; i < n; ++i) requests.push_back(pool[static_cast<size_t>(i) % pool.size()]);
  std::mt19937 rng(seed + 1);
  std::shuffle(requests.begin(), requests.end(), rng);
  return requests;
}

std::vector<SimRequest> trace_at_rate(const std::vector<SimRequest>& pool, double rate,
                                      double duration_s, int min_requests, unsigned seed) {
  // Less a rounding error's worth, so that 1.1 x 100 (110.00000000000001) is 110 requests.
  const double wanted = std::ceil(rate * duration_s - 1e-9);
  const int n = static_cast<int>(std::clamp(wanted, static_cast<double>(min_requests), 1e6));
  return at_rate(offline_batch(pool, n, seed), rate, seed);
}

// WMT16 English sentences run ~20-30 words (~25-35 OPT/LLaMA tokens); the German translation
// is a little longer. Inputs: log-normal, median 28 tokens, sigma 0.5, clipped to [4, 128];
// outputs: the input times a uniform 0.9-1.4.
std::vector<LengthPair> translation_lengths(int num, unsigned seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> input(std::log(28.0), 0.5);
  std::uniform_real_distribution<double> ratio(0.9, 1.4);
  std::vector<LengthPair> out;
  for (int i = 0; i < num; ++i) {
    const int64_t in = std::clamp<int64_t>(std::llround(input(rng)), 4, 128);
    out.push_back({in, std::max<int64_t>(1, std::llround(static_cast<double>(in) * ratio(rng)))});
  }
  return out;
}

std::vector<LengthPair> chatbot_lengths(const std::vector<LengthPair>& rounds, int num,
                                        int history_tokens, int max_output, unsigned seed) {
  if (rounds.empty()) throw std::invalid_argument("chatbot_lengths: no ShareGPT rounds");
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> turns(1, 8);
  std::vector<LengthPair> out;
  size_t next = 0;
  while (static_cast<int>(out.size()) < num) {
    int64_t history = 0;
    for (int t = turns(rng); t > 0 && static_cast<int>(out.size()) < num; --t) {
      const LengthPair& round = rounds[next++ % rounds.size()];
      const int64_t output = std::min<int64_t>(round.output, max_output);
      out.push_back({std::min<int64_t>(history + round.input, history_tokens), output});
      history += round.input + output;
    }
  }
  return out;
}

}  // namespace pagedserve::paper
