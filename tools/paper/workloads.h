// The paper's workloads as simulator requests: ShareGPT and Alpaca request lengths (the paper's
// own, ../shared/traces), the Azure 2023 traces, and the synthesized ones of its Figs. 16-17
// (translation with a few-shot prefix; chatbot conversations). Pure apart from reading the files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tools/paper/sim_run.h"

namespace pagedserve::paper {

enum class PaperWorkload { kShareGpt, kAlpaca, kAzureConv, kAzureCode };

// "sharegpt", "alpaca", "azure-conv", "azure-code".
const char* workload_name(PaperWorkload kind);
std::optional<PaperWorkload> parse_workload(const std::string& name);
// The CSV under the traces root (../shared/traces).
std::filesystem::path workload_file(PaperWorkload kind, const std::filesystem::path& traces_root);

struct LengthPair {
  int64_t input = 0;
  int64_t output = 0;
};

// The paper's selection: ShareGPT and Alpaca rows with input + output <= max_model_len (its
// filter), the first `num` (< 0: all) in file order, shuffled by `seed` when `shuffle` (as
// the paper's artifact did); the Azure traces: the first `num` rows in order, clipped to the
// context (output first to max_model_len / 2, then the prompt). Throws when the file cannot
// be read.
std::vector<LengthPair> select_lengths(PaperWorkload kind, const std::filesystem::path& traces_root,
                                       int num, int max_model_len, unsigned seed,
                                       bool shuffle = true);

struct Workload {
  std::vector<SimRequest> requests;
  std::string description;  // count, source, mean lengths
};

// Requests of the given lengths, each prompt `prefix_tokens` shared token ids then ids distinct
// per request (no accidental prefix sharing); arrivals all at 0 (see at_rate).
Workload make_workload(const std::vector<LengthPair>& lengths, int prefix_tokens, unsigned seed,
                       const std::string& source);
Workload load_workload(PaperWorkload kind, const std::filesystem::path& traces_root, int num,
                       int max_model_len, int prefix_tokens, unsigned seed);

// The requests with Poisson arrivals at `rate` per second.
std::vector<SimRequest> at_rate(std::vector<SimRequest> requests, double rate, unsigned seed);

// The first `n` requests of `pool` (repeated if shorter), shuffled, all arriving at 0: an
// offline batch that keeps the KV pool full.
std::vector<SimRequest> offline_batch(const std::vector<SimRequest>& pool, int n, unsigned seed);

// A trace of `duration_s` at `rate` (as the paper's Fig. 12): the first N = rate x duration
// requests of `pool` (at least `min_requests`; the pool repeats if it is shorter), shuffled,
// with Poisson arrivals. A fixed duration, not a fixed count, keeps an overloaded rate
// visible: its queue (and latency) grows with the trace, while a short trace hides it.
std::vector<SimRequest> trace_at_rate(const std::vector<SimRequest>& pool, double rate,
                                      double duration_s, int min_requests, unsigned seed);

// Fig. 16 (translation, WMT16 En-De in the paper): sentence-length inputs and outputs
// synthesized (see the .cpp for the distribution), to follow a `prefix_tokens` few-shot prefix.
std::vector<LengthPair> translation_lengths(int num, unsigned seed);

// Fig. 17 (chatbot): conversations synthesized from consecutive ShareGPT rounds (the first
// rounds of the file: each conversation takes 1-8 of them as its turns); each turn's prompt is
// the conversation so far (earlier inputs and outputs) plus its own input, keeping the last
// `history_tokens`; outputs capped at `max_output`. One request per turn, turns in order.
std::vector<LengthPair> chatbot_lengths(const std::vector<LengthPair>& rounds, int num,
                                        int history_tokens, int max_output, unsigned seed);

}  // namespace pagedserve::paper
