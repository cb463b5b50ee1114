// The host side of decode CUDA graphs (model/decode_graph_plan.h): bucketing, which batches may
// replay a graph, and padding a batch to a graph's shape without touching its real rows.
#include "model/decode_graph_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace pagedserve::model {
namespace {

TEST(DecodeGraphPlan, BucketsArePowersOfTwo) {
  const std::vector<std::pair<int, int>> cases = {{1, 1},  {2, 2},   {3, 4},    {5, 8},    {8, 8},
                                                  {9, 16}, {64, 64}, {65, 128}, {200, 256}};
  for (const auto& [n, bucket] : cases) EXPECT_EQ(decode_graph_bucket(n), bucket) << n;
}

ForwardBatch decode_batch(int seqs, int block_size) {
  ForwardBatch batch;
  for (int s = 0; s < seqs; ++s) {
    const int context = 5 + 7 * s;  // tokens already cached
    std::vector<int32_t> table;
    for (int b = 0; b <= context / block_size; ++b) table.push_back(100 * s + b);
    batch.add_sequence({10 + s}, context, table, block_size, 1);
  }
  return batch;
}

TEST(DecodeGraphPlan, OnlyDecodeBatchesWithEveryLogitAreEligible) {
  EXPECT_TRUE(decode_graph_eligible(decode_batch(3, 4), 256));
  EXPECT_FALSE(decode_graph_eligible(decode_batch(3, 4), 2)) << "bucket 4 over max 2";
  EXPECT_FALSE(decode_graph_eligible(ForwardBatch{}, 256)) << "empty";

  ForwardBatch prefill = decode_batch(2, 4);
  prefill.add_sequence({1, 2, 3}, 0, {7}, 4, 1);  // a prompt: three tokens
  EXPECT_FALSE(decode_graph_eligible(prefill, 256));

  ForwardBatch silent = decode_batch(2, 4);
  silent.add_sequence({9}, 3, {8}, 4, 0);  // a one-token prompt chunk that samples nothing
  EXPECT_FALSE(decode_graph_eligible(silent, 256));
}

TEST(DecodeGraphPlan, PaddingKeepsTheRealRowsAndAddsInertOnes) {
  const int block_size = 4;
  const ForwardBatch batch = decode_batch(3, block_size);
  const DecodeGraphKey key{4, 8, 0, 1};
  ASSERT_LE(batch.max_blocks_per_seq, key.table_width);
  const ForwardBatch padded = pad_decode_batch(batch, key);

  EXPECT_EQ(padded.num_seqs(), 4);
  EXPECT_EQ(padded.num_tokens(), 4);
  EXPECT_EQ(padded.max_blocks_per_seq, 8);
  EXPECT_EQ(padded.query_start_loc, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(padded.logits_indices, (std::vector<int32_t>{0, 1, 2, 3}));
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(padded.token_ids[s], batch.token_ids[s]);
    EXPECT_EQ(padded.positions[s], batch.positions[s]);
    EXPECT_EQ(padded.slot_mapping[s], batch.slot_mapping[s]);
    EXPECT_EQ(padded.seq_lens[s], batch.seq_lens[s]);
    for (int b = 0; b < key.table_width; ++b) {
      const int32_t want =
          b < batch.max_blocks_per_seq ? batch.block_tables[s * batch.max_blocks_per_seq + b] : 0;
      EXPECT_EQ(padded.block_tables[s * key.table_width + b], want) << s << "," << b;
    }
  }
  // The padding sequence writes nothing and reads one token of block 0.
  EXPECT_EQ(padded.token_ids[3], 0);
  EXPECT_EQ(padded.positions[3], 0);
  EXPECT_EQ(padded.slot_mapping[3], -1);
  EXPECT_EQ(padded.seq_lens[3], 1);
  for (int b = 0; b < key.table_width; ++b) EXPECT_EQ(padded.block_tables[3 * 8 + b], 0);
}

}  // namespace
}  // namespace pagedserve::model
