// SequenceGroup helpers and finish-reason names.
#include "actors/sequence_group.h"

namespace pagedserve::actors {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

int SequenceGroup::num_live() const {
  int live = 0;
  for (const Sequence& seq : seqs) live += seq.finished() ? 0 : 1;
  return live;
}

std::vector<Sequence*> SequenceGroup::live() {
  std::vector<Sequence*> out;
  for (Sequence& seq : seqs) {
    if (!seq.finished()) out.push_back(&seq);
  }
  return out;
}

Sequence* SequenceGroup::find(uint64_t seq_id) {
  for (Sequence& seq : seqs) {
    if (!seq.finished() && seq.seq_id == seq_id) return &seq;
  }
  return nullptr;
}

namespace {

// seq's outputs, then per pending row a slot per proposal and a placeholder, appended to out.
void append_generated(const Sequence& seq, std::vector<int32_t>& out) {
  out.insert(out.end(), seq.output_token_ids.begin(), seq.output_token_ids.end());
  for (const PendingRow& row : seq.pending_rows) {
    out.insert(out.end(), static_cast<size_t>(row.num_proposals), kProposalSlotToken);
    out.push_back(kPlaceholderToken);
  }
}

}  // namespace

std::vector<int32_t> SequenceGroup::tokens(const Sequence& seq) const {
  std::vector<int32_t> out(prompt_token_ids);
  append_generated(seq, out);
  return out;
}

std::vector<int32_t> SequenceGroup::output_tokens(const Sequence& seq) const {
  std::vector<int32_t> out;
  append_generated(seq, out);
  return out;
}

int32_t SequenceGroup::token_at(const Sequence& seq, int i) const {
  const int prompt_len = static_cast<int>(prompt_token_ids.size());
  if (i < prompt_len) return prompt_token_ids[static_cast<size_t>(i)];
  size_t at = static_cast<size_t>(i - prompt_len);
  if (at < seq.output_token_ids.size()) return seq.output_token_ids[at];
  at -= seq.output_token_ids.size();
  for (const PendingRow& row : seq.pending_rows) {
    const size_t n = static_cast<size_t>(row.num_proposals);
    if (at < n) return kProposalSlotToken;
    if (at == n) return kPlaceholderToken;
    at -= n + 1;
  }
  return kPlaceholderToken;
}

int Sequence::num_pending_tokens() const {
  int n = 0;
  for (const PendingRow& row : pending_rows) n += row.num_tokens();
  return n;
}

bool SequenceGroup::has_pending_samples() const {
  for (const Sequence& seq : seqs) {
    if (!seq.finished() && !seq.pending_rows.empty()) return true;
  }
  return false;
}

uint64_t sequence_seed(uint64_t request_seed, int index) {
  if (index == 0) return request_seed;
  // splitmix64 of (seed, index): decorrelated streams for neighbouring indexes.
  uint64_t x = request_seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(index));
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace pagedserve::actors
