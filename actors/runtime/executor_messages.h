// Messages the executor actor handles: ExecuteStep, from the scheduler actor. At most one is
// in flight; the answer is a StepDone (scheduler_messages.h).
#pragma once

#include "actors/step_messages.h"

namespace pagedserve::actors::runtime {

struct ExecuteStep {
  StepInput input;
  // True when the scheduler launched this step as soon as the previous one's results came
  // back (work was pending), so the executor's wait before it counts as idle time. False
  // when the engine had nothing to do in between (the wait was for a request to arrive).
  bool continues_previous_step = false;
};

}  // namespace pagedserve::actors::runtime
