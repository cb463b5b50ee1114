// Executor: the one interface behind which the model runs (CPU now, CUDA later). It owns the
// KV memory and the weights; the scheduler only ever hands it StepInput messages.
#pragma once

#include "actors/step_messages.h"
#include "model/loader/model_config.h"

namespace pagedserve::actors {

class Executor {
 public:
  virtual ~Executor() = default;
  // Performs the block copies, runs the forward pass and samples. Throws on invalid input
  // (a bug in the scheduler), never on a model-level condition.
  virtual StepOutput execute(const StepInput& input) = 0;
  virtual const model::ModelConfig& model_config() const = 0;
  virtual int num_device_blocks() const = 0;
  virtual int num_cpu_blocks() const = 0;
  virtual int block_size() const = 0;
};

}  // namespace pagedserve::actors
