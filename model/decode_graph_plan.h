// Decode steps replayed as CUDA graphs (as vLLM captures one per batch-size bucket): the
// host-side decisions, pure and testable without a device. A graph bakes in its kernels'
// shapes and the addresses of its metadata, so a step can replay one only if its batch is
// padded to the graph's fixed shape: the bucket's sequence count, the bucket's block-table
// width, and (with split-K) the bucket's partition count.
#pragma once

#include <compare>

#include "model/llama_model.h"

namespace pagedserve::model {

// What a captured graph was captured for; steps with equal keys replay it.
struct DecodeGraphKey {
  int batch = 0;           // sequences (and tokens), padding included
  int table_width = 0;     // block-table columns
  int partition_size = 0;  // split-K partition (tokens), 0 = none
  int num_partitions = 1;  // 1 without split-K
  friend auto operator<=>(const DecodeGraphKey&, const DecodeGraphKey&) = default;
};

// The smallest power of two >= n (n >= 1): batch sizes, table widths and partition counts
// are bucketed to these, so few graphs cover every step.
int decode_graph_bucket(int n);

// Whether `batch` can replay a decode graph: one new token per sequence, every row's logits
// wanted (the sampler reads them in order), at most max_batch sequences after bucketing.
bool decode_graph_eligible(const ForwardBatch& batch, int max_batch);

// `batch` padded to `key.batch` sequences with tables `key.table_width` wide (>= the batch's
// own). Padding sequences have token 0 at position 0, slot -1 (no K/V is written), one context
// token in block 0 (read, never used) and a logits row (never sampled). The real sequences
// keep their rows, in order, and their logits rows come first.
ForwardBatch pad_decode_batch(const ForwardBatch& batch, const DecodeGraphKey& key);

}  // namespace pagedserve::model
