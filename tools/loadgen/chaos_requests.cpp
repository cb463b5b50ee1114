// The bodies the chaos kinds send (chaos.h: chaos_request). Pure: JSON only.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "tools/loadgen/chaos.h"

namespace pagedserve::loadgen {
namespace {

// Bodies that are not JSON, or not an object: each must get a 400.
std::string malformed_body(int64_t index) {
  static const char* const kVariants[] = {
      R"({"prompt": "Once upon a time", "max_tokens": )",  // truncated mid-value
      R"({"prompt": "Once upon a time",})",                // trailing comma
      "\xff\xfe{\"prompt\": \"\xc3\x28\"}",                // not UTF-8
      R"(["prompt", "Once upon a time"])",                 // JSON, but not an object
  };
  return kVariants[index % 4];
}

// Well-formed JSON with fields no server may accept: each must get a 400.
nlohmann::json absurd_payload(int64_t index, const std::string& model) {
  nlohmann::json p = {{"model", model}, {"prompt", "Once upon a time"}};
  switch (index % 6) {
    case 0:
      p["max_tokens"] = -1;
      break;
    case 1:
      p["n"] = 10000;
      break;
    case 2:  // streamed best_of > n cannot stream the best one before all end
      p["stream"] = true;
      p["n"] = 1;
      p["best_of"] = 2;
      break;
    case 3:
      p["temperature"] = -3;
      break;
    case 4:
      p["max_tokens"] = 100000000;
      break;  // past any context
    default:
      p["prompt"] = nlohmann::json::object();
      break;
  }
  return p;
}

// The trace request's payload as a stream of `max_tokens` forced tokens.
nlohmann::json long_stream(const OutgoingRequest& trace_request, int64_t max_tokens) {
  nlohmann::json p = trace_request.payload;
  p["max_tokens"] = max_tokens;
  p["ignore_eos"] = true;
  return p;
}

}  // namespace

ChaosRequest chaos_request(ChaosKind kind, int64_t index, const OutgoingRequest& trace_request,
                           const ChaosRequestOptions& options) {
  ChaosRequest out;
  if (trace_request.chat) out.path = "/v1/chat/completions";
  OutgoingRequest streamed = trace_request;
  out.cut_after_events = 1 + index % std::max<int64_t>(1, options.max_cut_after_events);
  out.cut_fraction = static_cast<double>(1 + index % 9) / 10;
  switch (kind) {
    case ChaosKind::kStreamed:
      out.body = http_body(trace_request);
      out.expected_tokens = trace_request.max_tokens;
      break;
    case ChaosKind::kNonStreamed:
    case ChaosKind::kDisconnectMidBody:
      out.body = trace_request.payload.dump();
      out.expected_tokens = trace_request.max_tokens;
      break;
    case ChaosKind::kDisconnectMidStream:
    case ChaosKind::kSlowReader:
      streamed.payload = long_stream(trace_request, options.misbehaving_max_tokens);
      out.body = http_body(streamed);
      break;
    case ChaosKind::kMalformedJson:
      out.path = "/v1/completions";
      out.body = malformed_body(index);
      break;
    case ChaosKind::kOversizedBody:
      out.body = nlohmann::json{
          {"model", options.model},
          {"prompt", std::string(options.max_body_bytes + 1024, 'a')},
          {"max_tokens",
           1}}.dump();
      break;
    case ChaosKind::kAbsurdParams:
      out.path = "/v1/completions";
      out.body = absurd_payload(index, options.model).dump();
      break;
    case ChaosKind::kWsCancel: {
      nlohmann::json frame = long_stream(trace_request, options.misbehaving_max_tokens);
      out.choices = 1 + index % 2;
      frame["type"] = trace_request.chat ? "chat" : "completion";
      frame["id"] = "chaos";
      frame["n"] = out.choices;
      out.body = frame.dump();
      break;
    }
    case ChaosKind::kIdleConnection:
      break;
    case ChaosKind::kParallelSampling: {
      nlohmann::json p = trace_request.payload;
      p["n"] = 2;
      p["best_of"] = 3;
      p["temperature"] = 0.8;
      out.body = p.dump();
      out.choices = 2;
      break;
    }
  }
  return out;
}

}  // namespace pagedserve::loadgen
