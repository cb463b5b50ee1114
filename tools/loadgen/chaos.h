// The chaos soak's decisions, without I/O: the kinds of client (well-behaved and misbehaving),
// which arrival gets which kind, what each kind must see from a correct server (judge), the
// tally of outcomes, and the two readings the soak takes from the server (/metrics gauges,
// VmRSS samples). The network side that plays each kind is chaos_client.h.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/loadgen/request_body.h"
#include "tools/loadgen/stats.h"

namespace pagedserve::loadgen {

enum class ChaosKind {
  kStreamed,             // well-behaved: a trace request over SSE, read to [DONE]
  kNonStreamed,          // well-behaved: a trace request, one JSON answer
  kDisconnectMidBody,    // 10-90% of the raw request (inside headers or body), then close
  kDisconnectMidStream,  // a stream read for 1-8 events, then close
  kSlowReader,           // a stream read a byte at a time through a tiny receive buffer
  kMalformedJson,        // a truncated JSON body: 400
  kOversizedBody,        // a body over --max-body-bytes: 413
  kAbsurdParams,         // max_tokens -1, n 10000, streamed best_of > n, ...: 400
  kWsCancel,             // a WebSocket completion cancelled after a few token frames
  kIdleConnection,       // connects and never sends: the server must close it
  kParallelSampling,     // non-streamed n = 2, best_of = 3: two choices
};
inline constexpr size_t kNumChaosKinds = 11;

// "streamed", "disconnect_mid_body", ...
const char* chaos_kind_name(ChaosKind kind);
bool is_well_behaved(ChaosKind kind);

// Relative weight of each kind (index = ChaosKind); need not sum to 1.
using ChaosMix = std::array<double, kNumChaosKinds>;
// 50% streamed and 20% non-streamed trace requests; 30% misbehaving, spread over the others.
ChaosMix default_chaos_mix();
// The share of well-behaved kinds in a mix, in (0, 1].
double well_behaved_share(const ChaosMix& mix);

// Seeded: kind i of count arrivals, drawn independently with the mix's weights.
std::vector<ChaosKind> assign_kinds(size_t count, const ChaosMix& mix, uint32_t seed);

// What a kind sends for one arrival, built from that arrival's trace request.
struct ChaosRequest {
  std::string path = "/v1/completions";
  std::string body;              // HTTP body, or the WebSocket start frame for kWsCancel
  int64_t expected_tokens = 0;   // forced output length judged for well-behaved kinds
  int64_t choices = 1;           // choices the answer must carry (WebSocket done frames)
  int64_t cut_after_events = 0;  // mid-stream disconnect / WebSocket cancel after k events
  double cut_fraction = 0;       // mid-body disconnect: share of the raw request sent
};
struct ChaosRequestOptions {
  std::string model;
  int64_t max_body_bytes = 4 << 20;     // oversized bodies are 1 KiB over this
  int64_t misbehaving_max_tokens = 48;  // streams that get cut or cancelled
  int64_t max_cut_after_events = 8;     // cuts and cancels come after 1..this many events
};
// Malformed JSON and absurd parameters rotate through their variants by `index`, and so do
// the cut points: after 1 + index % max_cut_after_events events, and at (1 + index % 9) / 10
// of the raw request (the lower shares end inside the headers, the higher inside the body).
ChaosRequest chaos_request(ChaosKind kind, int64_t index, const OutgoingRequest& trace_request,
                           const ChaosRequestOptions& options);

// What one client saw. Filled by chaos_client.cpp; judged by judge().
struct ChaosObservation {
  int status = 0;                 // HTTP status (101 for a WebSocket upgrade); 0 when none came
  bool error_body = false;        // the body was OpenAI's {"error": {"message": ...}}
  bool completed = false;         // the whole answer came ([DONE], the JSON body, every done frame)
  bool planned_cut = false;       // the client closed on purpose at its planned point
  bool closed_by_server = false;  // an idle connection: the server closed it
  int64_t choices = 0;            // choices in a non-streamed answer / done frames over WS
  int64_t output_tokens = 0;      // completion tokens (usage), for well-behaved requests
  int64_t expected_tokens = 0;    // max_tokens asked for with ignore_eos (0 = not checked)
  int64_t events_read = 0;        // SSE events or token frames read
  std::string stream_error_code;  // code of an error event in a 200 stream ("slow_reader")
  std::string transport_error;    // connect/read/write failure or deadline; "" if none
  std::vector<std::string> finish_reasons;  // WebSocket done frames
};

struct ChaosVerdict {
  std::string outcome;     // tally label: "completed", "http 429", "cut mid-stream", ...
  bool violation = false;  // the server did not do what this kind requires
};

// The rules: a well-behaved request completes with its forced length or gets a 4xx (429
// included) with an error body; each misbehaving kind gets its expected answer (see the kinds),
// or a 429 with an error body where it asked for generation (over WebSocket: an error frame
// with code "overloaded", the server's 429 there).
ChaosVerdict judge(ChaosKind kind, const ChaosObservation& seen);

// One client's result: kind, judged outcome, and the timing record of well-behaved ones.
struct ChaosResult {
  ChaosKind kind = ChaosKind::kStreamed;
  ChaosObservation seen;
  ChaosVerdict verdict;
  RequestRecord record;  // timings; ok only for completed well-behaved requests
};

struct ChaosTally {
  // kind name -> outcome -> count
  std::map<std::string, std::map<std::string, int64_t>> outcomes;
  int64_t requests = 0;
  int64_t violations = 0;
  std::vector<std::string> violation_examples;  // "kind #index: outcome", the first 20
  // When the clients that saw a violation were sent (s from the start; -1 when none): tells
  // a burst from a steady failure.
  double first_violation_s = -1, last_violation_s = -1;
};
ChaosTally tally(const std::vector<ChaosResult>& results);
std::string format_tally(const ChaosTally& tally);
nlohmann::ordered_json tally_json(const ChaosTally& tally);

// The value of an unlabelled sample "name value" in Prometheus text; nullopt if absent.
std::optional<double> prometheus_value(const std::string& text, const std::string& name);

// Resident memory over a run: samples (seconds from the start, bytes).
struct RssSample {
  double t_s = 0;
  int64_t rss_bytes = 0;
};
struct RssSummary {
  int64_t peak_bytes = 0;
  // Medians, not maxima: a burst of connections open at once (an open-loop client that fell
  // behind sends thousands together) lifts RSS for a few seconds by what they hold; a leak
  // lifts every later sample.
  int64_t warm_bytes = 0;    // the median sample of the warm-up window [0, warmup_s]
  int64_t late_bytes = 0;    // the median sample of the last window of the same length
  int64_t growth_bytes = 0;  // late - warm: growth under the same load, after warm-up
  int64_t samples = 0;
};
// Windows of warmup_fraction of [first, last sample]; empty samples give zeros.
RssSummary summarize_rss(const std::vector<RssSample>& samples, double warmup_fraction);

// A TcpExt counter (e.g. "ListenOverflows") of a /proc/net/netstat text; nullopt if absent.
std::optional<int64_t> parse_tcp_ext(const std::string& netstat, const std::string& name);

// "VmRSS:  12345 kB" of a /proc/PID/status text, in bytes; nullopt if absent.
std::optional<int64_t> parse_vm_rss(const std::string& proc_status);

}  // namespace pagedserve::loadgen
