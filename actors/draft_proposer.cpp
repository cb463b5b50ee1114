// DraftProposer: one forward pass of the draft per proposed position. The first carries each
// row's unseen tokens and last token (a prefill chunk for a row catching up, one token for the
// rest), the next ones a single proposal per row still proposing.
#include "actors/draft_proposer.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "actors/step_copies.h"
#include "model/sampler.h"
#include "model/sampling_distribution.h"

namespace pagedserve::actors {

namespace {

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// The draft's own RNG stream for a request seed: independent of the target's draws.
uint64_t draft_seed(uint64_t seed) { return seed ^ 0x5bd1e9955bd1e995ULL; }

// Proposal k of a row: greedy rows (and rows without one seed) take the draft's argmax, a point
// mass; sampled rows draw from the draft's distribution under the request's temperature and
// filters (banned tokens removed), which is recorded for the rejection rule.
int32_t propose_one(ScheduledSequence& seq, int k, std::span<const float> row,
                    std::vector<float>& scratch, std::vector<float>& q) {
  const model::SamplingParams* params = seq.sampling.get();
  if (params == nullptr || params->is_greedy() || seq.sample_seeds.size() != 1) return argmax(row);
  scratch.assign(row.begin(), row.end());
  for (int32_t id : seq.banned_token_ids) {
    if (id >= 0 && static_cast<size_t>(id) < scratch.size()) {
      scratch[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    }
  }
  model::sampling_distribution(scratch, *params, q);
  const double u = model::uniform_from_counter(draft_seed(seq.sample_seeds[0]),
                                               seq.sample_step + static_cast<uint64_t>(k));
  seq.draft_probs.insert(seq.draft_probs.end(), q.begin(), q.end());
  return model::sample_from_distribution(q, u);
}

}  // namespace

DraftProposer::DraftProposer(const model::LlamaCheckpoint& checkpoint, int block_size,
                             int num_device_blocks, int num_cpu_blocks, kernels::ThreadPool* pool,
                             kernels::KvDtype kv_dtype)
    : model_(checkpoint, pool),
      device_cache_(model_.config().num_hidden_layers, num_device_blocks, block_size,
                    model_.config().num_key_value_heads, model_.config().head_dim, kv_dtype),
      cpu_cache_(model_.config().num_hidden_layers, num_cpu_blocks, block_size,
                 model_.config().num_key_value_heads, model_.config().head_dim, kv_dtype) {}

void DraftProposer::copy_blocks(const StepInput& input) {
  apply_step_copies(input, device_cache_, cpu_cache_);
}

bool DraftProposer::propose(std::vector<ScheduledSequence>& seqs) {
  std::vector<size_t> rows;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!has_proposal_slots(seqs[i])) continue;
    const ScheduledSequence& seq = seqs[i];
    const size_t first_proposal = seq.new_token_ids.size() - seq.num_proposed_tokens;
    if (first_proposal != 1 || seq.draft_num_computed_tokens < 0 ||
        seq.draft_num_computed_tokens + static_cast<int>(seq.draft_context_ids.size()) !=
            seq.num_computed_tokens) {
      throw std::invalid_argument(
          "sequence " + std::to_string(seq.seq_id) +
          " has draft proposals but not a decode's layout (" + std::to_string(first_proposal) +
          " tokens before them, draft at " + std::to_string(seq.draft_num_computed_tokens) + " + " +
          std::to_string(seq.draft_context_ids.size()) + " of " +
          std::to_string(seq.num_computed_tokens) + ")");
    }
    rows.push_back(i);
  }
  if (rows.empty()) return false;
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  const int block_size = device_cache_.block_size();
  // Pass k (from 0) feeds each row's token at position num_computed_tokens + k (after pass 0's
  // catch-up) and fills proposal k, for the rows that propose more than k tokens.
  std::vector<int32_t> tokens;
  for (int k = 0;; ++k) {
    model::ForwardBatch batch;
    std::vector<size_t> batch_rows;
    for (size_t i : rows) {
      ScheduledSequence& seq = seqs[i];
      if (k >= seq.num_proposed_tokens) continue;
      if (k == 0) {
        tokens = seq.draft_context_ids;
        tokens.push_back(seq.new_token_ids.front());
        batch.add_sequence(tokens, seq.draft_num_computed_tokens, seq.block_table, block_size, 1);
      } else {
        tokens.assign(1, seq.new_token_ids[static_cast<size_t>(k)]);
        batch.add_sequence(tokens, seq.num_computed_tokens + k, seq.block_table, block_size, 1);
      }
      batch_rows.push_back(i);
    }
    if (batch_rows.empty()) break;
    const std::span<const float> logits = model_.forward(batch, device_cache_, workspace_);
    for (size_t r = 0; r < batch_rows.size(); ++r) {
      ScheduledSequence& seq = seqs[batch_rows[r]];
      seq.new_token_ids[static_cast<size_t>(k) + 1] =
          propose_one(seq, k, logits.subspan(r * vocab, vocab), scratch_, q_);
    }
  }
  return true;
}

}  // namespace pagedserve::actors
