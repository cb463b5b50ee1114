// LlamaModel: the Llama forward pass over a batch of sequences whose K/V live in a paged cache.
// Each sequence brings its own new tokens, positions and block table; prefill, chunked prefill
// and decode mix freely in one batch. Stateless between calls apart from the KV cache it is
// handed; owned by the executor.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/loader/llama_weights.h"
#include "model/paged_kv_cache.h"

namespace pagedserve::model {

// The flattened inputs of one forward pass (vLLM calls this the attention metadata).
struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [num_tokens], sequences concatenated
  std::vector<int32_t> positions;        // [num_tokens], position of each token in its sequence
  std::vector<int64_t> slot_mapping;     // [num_tokens], cache slot its K/V is written to
  std::vector<int32_t> query_start_loc;  // [num_seqs + 1], prefix sums of new tokens per seq
  std::vector<int32_t> seq_lens;         // [num_seqs], context length including new tokens
  std::vector<int32_t> block_tables;     // [num_seqs, max_blocks_per_seq], padded with 0
  int max_blocks_per_seq = 0;
  std::vector<int32_t> logits_indices;  // rows of token_ids whose logits are wanted

  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  int num_tokens() const { return static_cast<int>(token_ids.size()); }

  // Appends one sequence: `new_tokens` continue a context of `num_computed_tokens` tokens
  // already in the cache; `block_table` covers all of them. When `want_logits`, the last new
  // token's logits are produced.
  void add_sequence(const std::vector<int32_t>& new_tokens, int num_computed_tokens,
                    const std::vector<int32_t>& block_table, int block_size, bool want_logits);
};

class LlamaModel {
 public:
  // pool (not owned, may be null) splits the matmuls and attention across threads.
  explicit LlamaModel(LlamaWeights weights, kernels::ThreadPool* pool = nullptr);

  const ModelConfig& config() const { return weights_.config; }

  // Runs the batch, writing its new K/V into `cache`, and returns the logits of the rows in
  // batch.logits_indices: [logits_indices.size(), vocab_size].
  std::vector<float> forward(const ForwardBatch& batch, PagedKvCache& cache) const;

 private:
  LlamaWeights weights_;
  kernels::ThreadPool* pool_;
};

}  // namespace pagedserve::model
