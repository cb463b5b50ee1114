// CpuExecutor: runs the Llama forward pass with the CPU kernels over a paged KV cache in host
// memory, plus a second host pool that serves as swap space. The default executor wherever no
// GPU is present. Lives on the executor thread; not thread-safe.
#pragma once

#include <memory>

#include "actors/draft_proposer.h"
#include "actors/executor.h"
#include "actors/grammar_rows.h"
#include "actors/ngram_proposer.h"
#include "kernels/cpu/thread_pool.h"
#include "model/llama_model.h"
#include "model/paged_kv_cache.h"

namespace pagedserve::actors {

class CpuExecutor final : public Executor {
 public:
  // num_threads: kernel threads including the executor's own (0: one per hardware thread).
  // kv_dtype: what the KV pools (device and swap) store; K/V are rounded to it when written.
  CpuExecutor(const model::LlamaWeights& weights, int block_size, int num_device_blocks,
              int num_cpu_blocks, int num_threads = 1,
              kernels::KvDtype kv_dtype = kernels::KvDtype::kFloat32);
  // Packs straight from the checkpoint (16-bit weights stay 16-bit, quantized ones quantized,
  // float ones quantized when format asks); see LlamaModel.
  CpuExecutor(const model::LlamaCheckpoint& checkpoint, int block_size, int num_device_blocks,
              int num_cpu_blocks, int num_threads = 1,
              kernels::KvDtype kv_dtype = kernels::KvDtype::kFloat32,
              const model::WeightFormat& format = {});
  const model::LlamaModel& model() const { return model_; }
  // Speculative decoding with a draft model (actors/draft_proposer.h): loads it beside the
  // target, sharing the kernel threads, with twin KV pools of the target's block counts.
  // Throws std::invalid_argument when its vocabulary is not the target's.
  void attach_draft_model(const model::LlamaCheckpoint& draft);
  // Speculative decoding with n-gram proposals: the rows' proposal slots are filled by this
  // lookup in each row's proposal_context (actors/ngram_proposer.h).
  void attach_ngram_proposer(int ngram_min, int ngram_max);

  StepOutput execute(const StepInput& input) override;
  const model::ModelConfig& model_config() const override { return model_.config(); }
  int num_device_blocks() const override { return device_cache_.num_blocks(); }
  int num_cpu_blocks() const override { return cpu_cache_.num_blocks(); }
  int block_size() const override { return device_cache_.block_size(); }

 private:
  std::unique_ptr<kernels::ThreadPool> pool_;  // declared before model_, which points at it
  model::LlamaModel model_;
  model::PagedKvCache device_cache_;
  model::PagedKvCache cpu_cache_;
  model::LlamaModel::Workspace workspace_;  // reused every step
  GrammarRowStates grammars_;               // matchers of constrained sequences, across steps
  std::unique_ptr<DraftProposer> draft_;    // null unless attach_draft_model
  std::unique_ptr<NgramProposer> ngram_;    // null unless attach_ngram_proposer
};

}  // namespace pagedserve::actors
