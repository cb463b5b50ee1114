// Messages the tokenizer actor handles: EncodeRequest (from Engine::submit, client threads)
// and DecodeBatch (from the scheduler actor, once per step). Movable values that own their
// data; the only shared object is the request's StreamState, the client's end of the stream.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "actors/runtime/request_registry.h"
#include "model/sampler.h"
#include "model/sampling_params.h"

namespace pagedserve::actors::runtime {

// A new request to validate, encode and pass on to the scheduler.
struct EncodeRequest {
  uint64_t request_id = 0;
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;  // used instead of prompt when non-empty
  model::SamplingParams sampling;
  std::shared_ptr<StreamState> stream;  // where the request's events go
};

// What one step did to one of a request's outputs, or the request's end.
struct OutputDelta {
  uint64_t request_id = 0;
  int index = 0;                                // which output (sequence) of the request
  std::vector<int32_t> token_ids;               // new tokens of that output (may be empty)
  std::vector<model::SampleLogprobs> logprobs;  // parallel to token_ids, when asked for
  std::string sequence_finish_reason;           // set in the step output `index` ends
  bool finished = false;                        // the request is done: its last delta
  std::string finish_reason;                    // "stop", "length", "abort", "error" when finished
  int num_cached_tokens = 0;
  // Speculative decoding, over the request so far: tokens proposed, and accepted.
  int64_t num_proposed_tokens = 0;
  int64_t num_accepted_tokens = 0;
  std::string error;
};

// One step's deltas, in the scheduler's order (per request: token order).
struct DecodeBatch {
  uint64_t step_id = 0;
  std::vector<OutputDelta> deltas;
  // Set only when overlap is off: fulfilled once every event reached its stream, so the
  // scheduler can wait for delivery before the next step.
  std::shared_ptr<std::promise<void>> delivered;
};

}  // namespace pagedserve::actors::runtime
