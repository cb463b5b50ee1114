// The sampling half of a CPU step: after the forward pass, every sequence that samples draws
// its tokens (penalties, banned tokens, logprobs) from its row of logits. Shared by the CPU
// executor and `bench throughput --batch`, so the benchmark times what the executor runs.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "actors/grammar_rows.h"
#include "actors/step_messages.h"
#include "kernels/cpu/sampling_rows.h"
#include "kernels/cpu/thread_pool.h"

namespace pagedserve::actors {

// Row r of logits ([rows, vocab]) belongs to the r-th sequence of seqs with sample set (a
// sequence verifying K proposals takes K + 1 consecutive rows: verify_row); its
// result goes to out[i] for that sequence's index i (out has seqs.size() entries). Rows are
// independent and each is sampled the same way whichever thread takes it, so they are spread
// over the pool (may be null). Throws std::invalid_argument for a sampling sequence without
// params, and rethrows the first error of a row. Constrained rows (sampling->grammar) keep
// their matchers in `grammars` (required when any row is constrained; the step's id prunes it).
// chunks: the logits rows' chunk maxima when the LM head took them (LlamaModel::Workspace::
// logit_chunk_maxima, asked for by step_reads_chunk_maxima), else empty; a greedy row drawn
// as it came (no penalty, ban or mask) uses them.
void sample_step_rows(const std::vector<ScheduledSequence>& seqs, std::span<const float> logits,
                      size_t vocab, kernels::ThreadPool* pool, std::vector<SequenceStepOutput>& out,
                      GrammarRowStates* grammars = nullptr, uint64_t step_id = 0,
                      const kernels::ChunkMaxima& chunks = {});

// Whether a step's LM head should take its rows' chunk maxima (ForwardBatch::
// gather_chunk_maxima): when some row is drawn greedily (not a speculative verification).
bool step_reads_chunk_maxima(const std::vector<ScheduledSequence>& seqs);

// One sequence's row: penalties, banned tokens and the grammar's mask on a copy, the draws with
// their logprobs, top logprobs (beam search), reported logprobs (of the raw row). `grammar`:
// the row's matcher state when constrained (advanced on the draw), else null. next_row: the
// logits this thread reads next, or null (model::sample_tokens_logprob prefetches them).
SequenceStepOutput sample_row(const ScheduledSequence& seq, std::span<const float> raw_logits,
                              GrammarRowState* grammar = nullptr, const float* next_row = nullptr,
                              const kernels::RowChunkMaxima& chunks = {});

// A row that verifies speculative proposals (ScheduledSequence::num_proposed_tokens = K > 0):
// `logits` holds its K + 1 rows. Draws position 0, 1, ... in order as K + 1 single-token steps
// would, and stops after the first draw that differs from its proposal (or after position K).
// Penalties see the accepted draws; banned tokens apply to every position; a constrained row's
// grammar (`grammar`, synced to the row's output) masks each position and advances with each
// draw, and the row stops at a draw that completes it (grammar_ended, one flag per draw).
SequenceStepOutput verify_row(const ScheduledSequence& seq, std::span<const float> logits,
                              GrammarRowState* grammar = nullptr);

}  // namespace pagedserve::actors
