// CpuExecutor: block copies, one batched forward pass, then sampling of each sequence (and the
// top logprobs beam search asks for).
#include "actors/cpu_executor.h"

#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "model/sampler.h"

namespace pagedserve::actors {

CpuExecutor::CpuExecutor(const model::LlamaWeights& weights, int block_size, int num_device_blocks,
                         int num_cpu_blocks, int num_threads, kernels::KvDtype kv_dtype)
    : pool_(std::make_unique<kernels::ThreadPool>(num_threads)),
      model_(weights, pool_.get()),
      device_cache_(model_.config().num_hidden_layers, num_device_blocks, block_size,
                    model_.config().num_key_value_heads, model_.config().head_dim, kv_dtype),
      cpu_cache_(model_.config().num_hidden_layers, num_cpu_blocks, block_size,
                 model_.config().num_key_value_heads, model_.config().head_dim, kv_dtype) {}

CpuExecutor::CpuExecutor(const model::LlamaCheckpoint& checkpoint, int block_size,
                         int num_device_blocks, int num_cpu_blocks, int num_threads,
                         kernels::KvDtype kv_dtype)
    : pool_(std::make_unique<kernels::ThreadPool>(num_threads)),
      model_(checkpoint, pool_.get()),
      device_cache_(model_.config().num_hidden_layers, num_device_blocks, block_size,
                    model_.config().num_key_value_heads, model_.config().head_dim, kv_dtype),
      cpu_cache_(model_.config().num_hidden_layers, num_cpu_blocks, block_size,
                 model_.config().num_key_value_heads, model_.config().head_dim, kv_dtype) {}

StepOutput CpuExecutor::execute(const StepInput& input) {
  // Swap-out first: the blocks it frees may be the destinations of this step's swap-ins.
  for (const cache::BlockCopy& copy : input.swap_out) {
    device_cache_.copy_block_to(copy.src, cpu_cache_, copy.dst);
  }
  for (const cache::BlockCopy& copy : input.swap_in) {
    cpu_cache_.copy_block_to(copy.src, device_cache_, copy.dst);
  }
  for (const cache::BlockCopy& copy : input.block_copies) {
    device_cache_.copy_block(copy.src, copy.dst);
  }

  StepOutput output;
  output.step_id = input.step_id;
  output.seqs.resize(input.seqs.size());
  if (input.seqs.empty()) return output;

  model::ForwardBatch batch;
  for (const ScheduledSequence& seq : input.seqs) {
    batch.add_sequence(seq.new_token_ids, seq.num_computed_tokens, seq.block_table,
                       device_cache_.block_size(), seq.sample);
  }
  const std::vector<float> logits = model_.forward(batch, device_cache_);

  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  size_t row = 0;
  for (size_t i = 0; i < input.seqs.size(); ++i) {
    const ScheduledSequence& seq = input.seqs[i];
    if (!seq.sample) continue;
    if (!seq.sampling) {
      throw std::invalid_argument("CpuExecutor: sequence " + std::to_string(seq.seq_id) +
                                  " samples but has no sampling params");
    }
    const model::SamplingParams& sampling = *seq.sampling;
    std::span<const float> row_logits(logits.data() + row * vocab, vocab);
    const std::span<const float> raw_logits = row_logits;  // what reported logprobs describe
    std::vector<float> masked;
    if (!seq.banned_token_ids.empty() || sampling.has_penalties()) {
      masked.assign(row_logits.begin(), row_logits.end());
      model::apply_penalties(masked, sampling, seq.penalty_prompt_ids, seq.penalty_output_ids);
      for (int32_t id : seq.banned_token_ids) {
        if (id >= 0 && static_cast<size_t>(id) < vocab) {
          masked[id] = -std::numeric_limits<float>::infinity();
        }
      }
      row_logits = masked;
    }
    SequenceStepOutput& out = output.seqs[i];
    for (uint64_t seed : seq.sample_seeds) {
      const int32_t token = model::sample_token(row_logits, sampling, seed, seq.sample_step);
      out.samples.push_back({token, model::token_logprob(row_logits, token)});
    }
    if (seq.num_top_logprobs > 0) {
      out.top_logprobs = model::top_logprobs(row_logits, seq.num_top_logprobs);
    }
    if (sampling.logprobs) {
      std::vector<int32_t> drawn;
      for (const model::TokenLogprob& sample : out.samples) drawn.push_back(sample.token_id);
      out.reported_logprobs = model::sample_logprobs(raw_logits, drawn, *sampling.logprobs);
    }
    ++row;
  }
  return output;
}

}  // namespace pagedserve::actors
