// LlamaModel: the decoder forward pass over a batch of sequences whose K/V live in a paged
// cache. Each sequence brings its own new tokens, positions and block table; prefill, chunked
// prefill and decode mix freely in one batch. Stateless between calls apart from the KV cache
// it is handed; owned by the executor.
//
// Every supported family runs through this one skeleton (embedding, N x (norm, attention,
// norm, gated MLP), norm, LM head); the family's pieces are switches of its ModelConfig:
// biases, q/k norms, Gemma's extra norms and scaled embeddings, GeGLU, RoPE scaling and
// partial rotary, per-layer sliding windows and RoPE bases, soft-capping.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/sampling_rows.h"
#include "kernels/cpu/thread_pool.h"
#include "model/linear_weight.h"
#include "model/loader/llama_weights.h"
#include "model/paged_kv_cache.h"
#include "model/rope_frequencies.h"

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
  // Take each logits row's chunk maxima as the LM head writes it (a greedy row then reads one
  // chunk of itself; Workspace::logit_chunk_maxima). Costs a little on every row: only when
  // some row is drawn greedily.
  bool gather_chunk_maxima = false;

  int num_seqs() const { return static_cast<int>(seq_lens.size()); }
  int num_tokens() const { return static_cast<int>(token_ids.size()); }

  // Appends one sequence: `new_tokens` continue a context of `num_computed_tokens` tokens
  // already in the cache; `block_table` covers all of them. The logits of the last
  // `num_logits` new tokens are produced (0 or 1, or more to verify speculative proposals).
  void add_sequence(const std::vector<int32_t>& new_tokens, int num_computed_tokens,
                    const std::vector<int32_t>& block_table, int block_size, int num_logits);
};

class LlamaModel {
 public:
  // Packs float32 weights (tests and tools that build weights in memory). pool (not owned, may
  // be null) splits the matmuls and attention across threads; isa picks the kernels' paths.
  explicit LlamaModel(const LlamaWeights& weights, kernels::ThreadPool* pool = nullptr,
                      kernels::Isa isa = kernels::best_isa());
  // Packs straight from the checkpoint's views, keeping F16 and BF16 matrices 16-bit in memory
  // (widened in registers by the kernels), so decode reads half the bytes of float32, and
  // quantized GGUF matrices quantized. format.quantization quantizes the float matrices at load
  // (the LM head to Q6_K for the 4-bit types, as llama.cpp's Q4_K_M files hold it; the
  // embedding table stays as stored).
  explicit LlamaModel(const LlamaCheckpoint& checkpoint, kernels::ThreadPool* pool = nullptr,
                      kernels::Isa isa = kernels::best_isa(), const WeightFormat& format = {});

  const ModelConfig& config() const { return config_; }
  kernels::Isa isa() const { return isa_; }
  // Bytes of the matrices and norms one forward pass reads in full (every layer and the LM
  // head, quantized ones at their quantized size), the weight traffic of a decode step; the
  // embedding rows read are not included.
  size_t weight_bytes_per_step() const;
  // The formats of the layers' matrices and the LM head, e.g. "Q4_K+Q6_K, LM head Q6_K".
  std::string weight_format_summary() const;

  // Runs the batch, writing its new K/V into `cache`, and returns the logits of the rows in
  // batch.logits_indices: [logits_indices.size(), vocab_size]. A row's values depend only on
  // its own sequence, never on the rest of the batch or the thread count (see
  // kernels/cpu/packed_matmul.h).
  std::vector<float> forward(const ForwardBatch& batch, PagedKvCache& cache) const;

 private:
  struct Scratch;  // one forward pass's activations (llama_model.cpp)

 public:
  // A forward pass's buffers (activations and logits), kept by a caller across steps: a step
  // then reuses the memory of the one before instead of allocating and zeroing its own (a fresh
  // [rows, vocab] logits buffer cost ~1 ms of a 35 ms batch-32 step; a long prefill's
  // activations are hundreds of MB to fault in). Activations past kMaxKeptBytes are let go
  // after their step. One per thread that calls forward.
  class Workspace {
   public:
    static constexpr size_t kMaxKeptBytes = size_t{256} << 20;
    Workspace();
    ~Workspace();
    Workspace(Workspace&&) noexcept;
    Workspace& operator=(Workspace&&) noexcept;
    // The chunk maxima of the last forward's logits rows, when its batch asked for them
    // (ForwardBatch::gather_chunk_maxima) and the LM head could take them (float weights, no
    // soft-capping); empty otherwise.
    kernels::ChunkMaxima logit_chunk_maxima() const {
      if (chunk_width_ == 0) return {};
      return {logit_chunk_max_.data(), chunk_width_, chunks_per_row_};
    }

   private:
    friend class LlamaModel;
    std::unique_ptr<Scratch> scratch_;
    std::vector<float> logits_;           // only grows
    std::vector<float> logit_chunk_max_;  // only grows
    int64_t chunk_width_ = 0;             // 0: logit_chunk_max_ is stale
    int64_t chunks_per_row_ = 0;
  };
  // The same logits in the workspace; the span views them until its next use.
  std::span<const float> forward(const ForwardBatch& batch, PagedKvCache& cache,
                                 Workspace& workspace) const;

 private:
  // Optional vectors are empty when the family has none.
  struct Layer {
    std::vector<float> input_norm;           // [hidden]
    std::vector<float> post_norm;            // [hidden], the MLP's input norm
    std::vector<float> post_attention_norm;  // [hidden], Gemma: of the attention output
    std::vector<float> post_mlp_norm;        // [hidden], Gemma: of the MLP output
    std::vector<float> q_norm;               // [head_dim]
    std::vector<float> k_norm;               // [head_dim]
    std::vector<float> qkv_bias;             // [q + 2 kv]
    std::vector<float> o_bias;               // [hidden]
    std::vector<float> gate_up_bias;         // [2 ffn]
    std::vector<float> down_bias;            // [hidden]
    LinearWeight wqkv;                       // q, k and v projections stacked: [q + 2 kv, hidden]
    LinearWeight wo;                         // [hidden, q]
    LinearWeight w_gate_up;                  // gate and up stacked: [2 ffn, hidden]
    LinearWeight w_down;                     // [hidden, ffn]
    LayerConfig settings;                    // window, RoPE on/off, which RoPE
  };
  void init_rope();
  void embed(const ForwardBatch& batch, Scratch& s) const;
  void fill_rope_tables(const ForwardBatch& batch, Scratch& s) const;
  void attention_block(int l, const ForwardBatch& batch, PagedKvCache& cache, Scratch& s) const;
  void mlp_block(int l, Scratch& s) const;
  // Frees the workspace's activations when a long prefill has grown them past kMaxKeptBytes.
  static void release_if_large(Workspace& workspace);

  ModelConfig config_;
  RopeFrequencies global_rope_;
  RopeFrequencies local_rope_;     // Gemma 3's local layers
  bool uses_global_rope_ = false;  // some layer rotates with global_rope_ (a table per forward)
  bool uses_local_rope_ = false;   // some layer rotates with local_rope_
  EmbeddingTable embed_tokens_;    // [vocab, hidden] (only B rows read per step)
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;  // [hidden]
  LinearWeight lm_head_;           // [vocab, hidden]
  kernels::ThreadPool* pool_;
  kernels::Isa isa_;
};

}  // namespace pagedserve::model
