// Messages the scheduler actor handles, in one inbox: AddRequest (from the tokenizer actor),
// CheckAborts (a wake-up from any thread after a request's stop token fired) and StepDone
// (from the executor actor). Movable values that own their data.
#pragma once

#include <cstdint>
#include <stop_token>
#include <string>
#include <variant>
#include <vector>

#include "actors/step_messages.h"
#include "model/sampling_params.h"

namespace pagedserve::actors::runtime {

// A validated, encoded request.
struct AddRequest {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt_token_ids;
  model::SamplingParams sampling;
  std::stop_token cancel;  // fires when the client aborts
};

// Some request's stop token fired: sweep the live requests.
struct CheckAborts {};

// The executor finished a step: the input comes back with the output so the scheduler need
// not keep a copy.
struct StepDone {
  StepInput input;
  StepOutput output;
  std::string error;  // the executor threw: every sequence of the step fails with this
};

using SchedulerMessage = std::variant<AddRequest, CheckAborts, StepDone>;

}  // namespace pagedserve::actors::runtime
