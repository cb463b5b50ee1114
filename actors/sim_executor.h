// SimExecutor (`--device sim`): an Executor that runs no model. Each step "takes" the time a
// linear cost model gives,
//     step_s = a + b * batched_tokens + c * kv_tokens_read + copies,
// read from a small JSON profile, and advances a virtual clock by it instead of sleeping, so
// the real scheduler and KV allocators replay whole traces at a large GPU's scale in seconds
// on a CPU. It samples fixed tokens (never an end-of-sequence token: output lengths come from
// max_tokens). Everything measured with it is simulated and must be labelled so. Pure: no
// threads, no I/O after construction; lives on the executor's thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "actors/executor.h"

namespace pagedserve::actors {

// The cost model and the memory it simulates (profiles/*.json; see profiles/README.md).
struct SimProfile {
  std::string name;                  // e.g. "OPT-13B on A100-40GB (simulated)"
  double step_overhead_s = 0.0;      // a: per step, whatever the batch
  double per_batched_token_s = 0.0;  // b: per token computed this step (prefill or decode)
  double per_kv_token_read_s = 0.0;  // c: per cached token attention reads this step
  // w: streaming the weights once per step. When set (> 0) the step is a roofline, memory
  // traffic and compute overlapping: a + max(w + c * kv_tokens, b * tokens); else the linear
  // a + b * tokens + c * kv_tokens (a CPU, which is compute-bound, or a fitted profile).
  double weights_read_s = 0.0;
  double swap_bytes_per_s = 0.0;   // host <-> device copies (swap); 0: free
  double swap_per_block_s = 0.0;   // fixed cost of each swapped block (one small transfer)
  double copy_bytes_per_s = 0.0;   // device -> device block copies; 0: free
  int64_t kv_bytes_per_token = 0;  // K and V of one token, all layers
  int64_t kv_cache_bytes = 0;      // device memory left for the KV pool
  int max_model_len = 2048;
  int vocab_size = 32000;  // of the fake model config the executor reports
};

// Throws std::invalid_argument naming the field for a missing or negative value.
SimProfile sim_profile_from_json(const nlohmann::json& json);
SimProfile load_sim_profile(const std::filesystem::path& path);  // + file errors
nlohmann::ordered_json sim_profile_to_json(const SimProfile& profile);

// What one step costs the model: its shape, from the StepInput alone.
struct StepShape {
  int64_t batched_tokens = 0;  // new tokens computed (prompt chunks and decodes)
  int64_t kv_tokens_read = 0;  // per sequence: cached + new tokens attention reads
  int64_t swapped_blocks = 0;  // swap_out + swap_in
  int64_t copied_blocks = 0;   // device copies (copy-on-write, forks without sharing)
};
StepShape step_shape(const StepInput& input);
double step_seconds(const SimProfile& profile, const StepShape& shape, int block_size);

class SimExecutor final : public Executor {
 public:
  // The token every sample returns (never an EOS of the fake config, which has none).
  static constexpr int32_t kSampledToken = 7;

  SimExecutor(SimProfile profile, int block_size, int num_device_blocks, int num_cpu_blocks);

  StepOutput execute(const StepInput& input) override;
  const model::ModelConfig& model_config() const override { return config_; }
  int num_device_blocks() const override { return num_device_blocks_; }
  int num_cpu_blocks() const override { return num_cpu_blocks_; }
  int block_size() const override { return block_size_; }

  // Beam candidates: by default every beam proposes the same falling logprobs (a fixed
  // ranking: the best beam wins every fork). With a seed, each (sequence, position) draws its
  // own falling logprobs, so survivors come from several beams as with a real model.
  void set_random_beam_candidates(uint64_t seed) { beam_seed_ = seed; }

  const SimProfile& profile() const { return profile_; }
  double now_s() const { return now_s_; }  // the virtual clock: the sum of step times so far
  void advance_to(double t_s);             // idle until t_s (no-op when already past it)
  double last_step_s() const { return last_step_s_; }

 private:
  SimProfile profile_;
  model::ModelConfig config_;
  int block_size_;
  int num_device_blocks_;
  int num_cpu_blocks_;
  std::optional<uint64_t> beam_seed_;
  double now_s_ = 0.0;
  double last_step_s_ = 0.0;
};

// Least-squares fit of (a, b, c) to measured steps: minimises sum (a + b*x + c*y - t)^2 over
// the samples. Throws std::invalid_argument when the samples do not determine all three
// (fewer than 3, or batched and kv counts collinear).
struct StepSample {
  StepShape shape;
  double seconds = 0.0;
};
struct CostFit {
  double a = 0.0, b = 0.0, c = 0.0;
  double rms_error_s = 0.0;  // of the fit over the samples
};
CostFit fit_cost_model(const std::vector<StepSample>& samples);

}  // namespace pagedserve::actors
