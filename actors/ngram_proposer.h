// Speculative decoding's settings and its n-gram proposer (prompt lookup decoding): proposals
// come from the request's own prompt and output, no extra model. NgramProposer is pure (no I/O,
// no threads); the Scheduler asks it for every sequence it may speculate for when it plans a
// step (see docs/speculative-decoding.md).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/step_messages.h"

namespace pagedserve::actors {

// kNgram: prompt lookup (NgramProposer, in the scheduler). kDraft: a small model with the
// same vocabulary proposes greedily in the executor (actors/draft_proposer.h).
enum class SpeculativeMethod { kNone, kNgram, kDraft };
const char* speculative_method_name(SpeculativeMethod method);  // "none", "ngram", "draft"
// Throws std::invalid_argument naming the choices for anything but none / ngram / draft.
SpeculativeMethod parse_speculative_method(std::string_view name);

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNone;  // --speculative
  int num_speculative_tokens = 4;                       // --num-speculative-tokens: K
  // n-gram proposals, adaptive length: a sequence starts at K proposals per step; each step
  // that accepts all of them lets it propose 2 more (up to this), each rejection 1 fewer
  // (down to 1). A prompt copied verbatim is then verified in long rows, a loose match in
  // short ones. --num-speculative-tokens-max; 0 (default) = K, a fixed length.
  int max_speculative_tokens = 0;
  int ngram_min = 1;  // --ngram-min: shortest suffix matched
  int ngram_max = 4;  // --ngram-max: longest suffix matched
  // The policy: no proposals at all in a step planned while more than this many sequences
  // run (verifying K extra tokens per sequence only pays while the step is bound by reading
  // the weights, not by compute; docs/speculative-decoding.md has the measurements).
  // --speculative-max-batch; 0 = no limit; -1 (default) = by method, max_batch().
  int max_batch_seqs = -1;
  // The policy's second half, per sequence, n-gram proposals only: a sequence whose proposals
  // have been accepted less than min_accepted_per_seq x (sequences running - 1/2) tokens per
  // verifying step (a moving average, half weight to the newest) stops proposing, and tries
  // again after kSpeculativeProbeInterval steps, then after longer waits while its tries fail.
  // A verifying row costs more as the batch grows (a 5-token row is ~1.2x a 1-token one
  // alone, ~1.5x at batch 2, ~2.5x at batch 4 on the CPU), so the acceptance that pays grows
  // with it. --speculative-min-accepted; 0 = never held back.
  double min_accepted_per_seq = 0.5;
  // --draft-model: the draft's Hugging Face folder or GGUF file (kDraft only).
  std::string draft_model;

  // A sequence held back by min_accepted_per_seq tries again after this many steps, then after
  // twice as many for each try that fails, up to kSpeculativeMaxProbeInterval (and up to
  // 16 x sequences^2: tries cost the whole batch).
  static constexpr int kSpeculativeProbeInterval = 16;
  static constexpr int kSpeculativeMaxProbeInterval = 256;

  bool enabled() const { return method != SpeculativeMethod::kNone; }
  // The adaptive length's ceiling: max_speculative_tokens, or K when it is 0.
  int max_tokens() const {
    return max_speculative_tokens > 0 ? max_speculative_tokens : num_speculative_tokens;
  }
  // The batch limit in force: max_batch_seqs, or by method when it is -1: 2 for n-gram
  // proposals (they lose from batch 3-4 on the CPU even with the acceptance policy), 4 for a
  // draft (one accepted as well as a twin still gains 2x there); docs/speculative-decoding.md.
  int max_batch() const {
    if (max_batch_seqs >= 0) return max_batch_seqs;
    return method == SpeculativeMethod::kDraft ? 4 : 2;
  }
  // Empty when valid, else a message naming the bad field.
  std::string validate() const;
};

class NgramProposer {
 public:
  NgramProposer(int ngram_min, int ngram_max) : ngram_min_(ngram_min), ngram_max_(ngram_max) {}

  // Up to max_tokens proposals for what follows `tokens` (prompt + output so far): for the
  // longest n in [ngram_max, ngram_min] such that the last n tokens occurred earlier (an
  // occurrence followed by at least one token), the tokens that followed the latest such
  // occurrence. Empty when no suffix of those lengths occurred before.
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int max_tokens) const;

 private:
  int ngram_min_;
  int ngram_max_;
};

// The executor's half of n-gram speculation: the scheduler plans proposal slots
// (kProposalSlotToken) and the executor, which knows every token by then (even those of a step
// planned past), fills them with the lookup in the row's proposal_context. A row shrinks to the
// proposals found (a plain decode when none are). Returns whether any row had slots.
bool fill_ngram_proposals(const NgramProposer& proposer, std::vector<ScheduledSequence>& seqs);

}  // namespace pagedserve::actors
