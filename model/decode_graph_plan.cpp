#include "model/decode_graph_plan.h"

#include <algorithm>
#include <cassert>

namespace pagedserve::model {

int decode_graph_bucket(int n) {
  int bucket = 1;
  while (bucket < n) bucket *= 2;
  return bucket;
}

bool decode_graph_eligible(const ForwardBatch& batch, int max_batch) {
  const int seqs = batch.num_seqs();
  if (seqs == 0 || batch.num_tokens() != seqs || decode_graph_bucket(seqs) > max_batch) {
    return false;
  }
  if (static_cast<int>(batch.logits_indices.size()) != seqs) return false;
  for (int i = 0; i < seqs; ++i) {
    if (batch.logits_indices[i] != i) return false;
  }
  return true;
}

ForwardBatch pad_decode_batch(const ForwardBatch& batch, const DecodeGraphKey& key) {
  const int seqs = batch.num_seqs();
  assert(key.batch >= seqs && key.table_width >= batch.max_blocks_per_seq);
  ForwardBatch padded;
  padded.token_ids = batch.token_ids;
  padded.positions = batch.positions;
  padded.slot_mapping = batch.slot_mapping;
  padded.query_start_loc = batch.query_start_loc;
  padded.seq_lens = batch.seq_lens;
  padded.logits_indices = batch.logits_indices;
  padded.max_blocks_per_seq = key.table_width;
  padded.block_tables.assign(static_cast<size_t>(key.batch) * key.table_width, 0);
  for (int s = 0; s < seqs; ++s) {
    std::copy_n(batch.block_tables.begin() + static_cast<size_t>(s) * batch.max_blocks_per_seq,
                batch.max_blocks_per_seq,
                padded.block_tables.begin() + static_cast<size_t>(s) * key.table_width);
  }
  if (padded.query_start_loc.empty()) padded.query_start_loc.push_back(0);
  for (int s = seqs; s < key.batch; ++s) {
    padded.token_ids.push_back(0);
    padded.positions.push_back(0);
    padded.slot_mapping.push_back(-1);
    padded.query_start_loc.push_back(s + 1);
    padded.seq_lens.push_back(1);
    padded.logits_indices.push_back(s);
  }
  return padded;
}

}  // namespace pagedserve::model
