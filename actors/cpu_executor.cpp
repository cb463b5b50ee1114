// CpuExecutor: block copies, one batched forward pass, then sampling of each sequence (and the
// top logprobs beam search asks for) spread over the thread pool; each stage timed.
#include "actors/cpu_executor.h"

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

#include "actors/sample_rows.h"
#include "actors/step_copies.h"

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
                         kernels::KvDtype kv_dtype, const model::WeightFormat& format)
    : pool_(std::make_unique<kernels::ThreadPool>(num_threads)),
      model_(checkpoint, pool_.get(), kernels::best_isa(), format),
      device_cache_(model_.config().num_hidden_layers, num_device_blocks, block_size,
                    model_.config().num_key_value_heads, model_.config().head_dim, kv_dtype),
      cpu_cache_(model_.config().num_hidden_layers, num_cpu_blocks, block_size,
                 model_.config().num_key_value_heads, model_.config().head_dim, kv_dtype) {}

void CpuExecutor::attach_ngram_proposer(int ngram_min, int ngram_max) {
  ngram_ = std::make_unique<NgramProposer>(ngram_min, ngram_max);
}

void CpuExecutor::attach_draft_model(const model::LlamaCheckpoint& draft) {
  if (draft.config.vocab_size != model_.config().vocab_size) {
    throw std::invalid_argument("the draft model's vocabulary has " +
                                std::to_string(draft.config.vocab_size) + " tokens, the target's " +
                                std::to_string(model_.config().vocab_size) +
                                ": a draft must share the target's tokenizer");
  }
  draft_ =
      std::make_unique<DraftProposer>(draft, device_cache_.block_size(), device_cache_.num_blocks(),
                                      cpu_cache_.num_blocks(), pool_.get(), device_cache_.dtype());
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

StepOutput CpuExecutor::execute(const StepInput& input) {
  StepOutput output;
  output.step_id = input.step_id;
  Clock::time_point start = Clock::now();
  apply_step_copies(input, device_cache_, cpu_cache_);
  if (draft_) draft_->copy_blocks(input);
  output.times.copies_s = seconds_since(start);

  output.seqs.resize(input.seqs.size());
  if (input.seqs.empty()) return output;

  start = Clock::now();
  // Proposal slots are filled in a copy of the rows, by the draft model (its passes count as
  // forward time) or the n-gram lookup.
  std::vector<ScheduledSequence> proposed;
  if (has_proposal_slots(input.seqs)) {
    proposed = input.seqs;
    if (draft_) {
      draft_->propose(proposed);
    } else if (ngram_) {
      fill_ngram_proposals(*ngram_, proposed);
    } else {
      throw std::invalid_argument(
          "the step has proposal slots but the executor has no draft model or n-gram proposer");
    }
  }
  const std::vector<ScheduledSequence>& seqs = proposed.empty() ? input.seqs : proposed;
  model::ForwardBatch batch;
  for (const ScheduledSequence& seq : seqs) {
    batch.add_sequence(seq.new_token_ids, seq.num_computed_tokens, seq.block_table,
                       device_cache_.block_size(), seq.sample ? 1 + seq.num_proposed_tokens : 0);
  }
  // A greedy row reads one chunk of itself when the LM head takes each chunk's maximum.
  batch.gather_chunk_maxima = step_reads_chunk_maxima(seqs);
  const std::span<const float> logits = model_.forward(batch, device_cache_, workspace_);
  output.times.forward_s = seconds_since(start);

  start = Clock::now();
  sample_step_rows(seqs, logits, static_cast<size_t>(model_.config().vocab_size), pool_.get(),
                   output.seqs, &grammars_, input.step_id, workspace_.logit_chunk_maxima());
  output.times.sampling_s = seconds_since(start);
  // The scheduler learns the proposals from here (it planned slots).
  for (size_t i = 0; i < proposed.size(); ++i) {
    if (!has_proposal_slots(input.seqs[i])) continue;
    output.seqs[i].proposed_token_ids.assign(
        proposed[i].new_token_ids.end() - proposed[i].num_proposed_tokens,
        proposed[i].new_token_ids.end());
  }
  return output;
}

}  // namespace pagedserve::actors
