// NgramProposer: prompt lookup by a backwards scan for the latest earlier occurrence of the
// sequence's suffix, longest suffix first.
#include "actors/ngram_proposer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pagedserve::actors {

const char* speculative_method_name(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kNgram:
      return "ngram";
    case SpeculativeMethod::kDraft:
      return "draft";
    case SpeculativeMethod::kNone:
      break;
  }
  return "none";
}

SpeculativeMethod parse_speculative_method(std::string_view name) {
  if (name == "none" || name.empty()) return SpeculativeMethod::kNone;
  if (name == "ngram") return SpeculativeMethod::kNgram;
  if (name == "draft") return SpeculativeMethod::kDraft;
  throw std::invalid_argument("unknown --speculative method '" + std::string(name) +
                              "' (choices: none, ngram, draft)");
}

std::string SpeculativeConfig::validate() const {
  if (!enabled()) return {};
  if (num_speculative_tokens < 1 || num_speculative_tokens > 64) {
    return "num_speculative_tokens must be in [1, 64], got " +
           std::to_string(num_speculative_tokens);
  }
  if (max_speculative_tokens != 0 &&
      (max_speculative_tokens < num_speculative_tokens || max_speculative_tokens > 64)) {
    return "num_speculative_tokens_max must be 0 or in [num_speculative_tokens, 64], got " +
           std::to_string(max_speculative_tokens);
  }
  if (max_speculative_tokens != 0 && method != SpeculativeMethod::kNgram) {
    return "num_speculative_tokens_max (an adaptive length) applies to ngram proposals only";
  }
  if (ngram_min < 1) return "ngram_min must be >= 1, got " + std::to_string(ngram_min);
  if (ngram_max < ngram_min || ngram_max > 64) {
    return "ngram_max must be in [ngram_min, 64], got " + std::to_string(ngram_max);
  }
  if (max_batch_seqs < -1) return "speculative max batch must be >= 0 (or -1: by method)";
  if (!(min_accepted_per_seq >= 0.0 && min_accepted_per_seq <= 64.0)) {
    return "speculative min accepted must be in [0, 64], got " +
           std::to_string(min_accepted_per_seq);
  }
  if (method == SpeculativeMethod::kDraft && draft_model.empty()) {
    return "draft needs a draft model (--draft-model DIR|FILE.gguf)";
  }
  if (method != SpeculativeMethod::kDraft && !draft_model.empty()) {
    return "a draft model is only used with --speculative draft";
  }
  return {};
}

std::vector<int32_t> NgramProposer::propose(std::span<const int32_t> tokens, int max_tokens) const {
  const int len = static_cast<int>(tokens.size());
  if (max_tokens <= 0) return {};
  for (int n = std::min(ngram_max_, len - 1); n >= ngram_min_; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(static_cast<size_t>(len - n));
    // Occurrences start at i <= len - n - 1, so at least one token follows them.
    for (int i = len - n - 1; i >= 0; --i) {
      if (tokens[static_cast<size_t>(i)] != suffix.front()) continue;
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + i)) continue;
      const int begin = i + n;
      const int end = std::min(len, begin + max_tokens);
      return {tokens.begin() + begin, tokens.begin() + end};
    }
  }
  return {};
}

bool fill_ngram_proposals(const NgramProposer& proposer, std::vector<ScheduledSequence>& seqs) {
  bool any = false;
  for (ScheduledSequence& seq : seqs) {
    if (!has_proposal_slots(seq)) continue;
    any = true;
    if (seq.proposal_context.empty() ||
        std::find(seq.proposal_context.begin(), seq.proposal_context.end(), kPlaceholderToken) !=
            seq.proposal_context.end()) {
      throw std::invalid_argument("sequence " + std::to_string(seq.seq_id) +
                                  " has n-gram proposal slots but no known context to look in");
    }
    const std::vector<int32_t> found =
        proposer.propose(seq.proposal_context, seq.num_proposed_tokens);
    seq.new_token_ids.resize(seq.new_token_ids.size() -
                             static_cast<size_t>(seq.num_proposed_tokens));
    seq.new_token_ids.insert(seq.new_token_ids.end(), found.begin(), found.end());
    seq.num_proposed_tokens = static_cast<int>(found.size());
  }
  return any;
}

}  // namespace pagedserve::actors
