// Scheduler: the pure policy of iteration-level (continuous) batching over sequence groups.
// Every step the running groups continue (decodes first, one token each; then the next chunk
// of any prompt still being prefilled, as far as the token budget allows), swapped groups are
// swapped back in, and only when none is left swapped are waiting requests admitted first-come-
// first-served while KV blocks, max_num_seqs and the token budget allow; a long prompt is
// prefilled in chunks. When blocks run out the most recently admitted group is preempted: by
// swap (its blocks copied to the CPU pool; falls back to recompute when that pool is full) or by
// recompute (blocks freed, prompt and output recomputed on readmission). update() applies the
// executor's output: sampling, forking a prompt into best_of children, beam search selection,
// token-level stop checks. Stop strings are the OutputProcessor's (it calls stop_sequence).
// No I/O, no threads, no clock: the engine (and the scheduler actor) drives it.
//
// KV memory (see KvMemoryPlacement and docs/actors.md): every allocator call the policy decides
// is a memory op (cache/kv_memory_ops.h), applied in decision order. The Scheduler plans from
// its view of memory (kv_): the allocator itself (kDirect), or its own PagedKvMirror (paged) or
// replica (reserve-*, whose first-fit state is a pure function of the ops) while the allocator
// lives elsewhere; then the step is completed from the op list's one result (the copies, the
// prefix hits of new sequences, the tables). Planning from a mirror, a new prompt is planned
// after the hits a probe op reported for it in an earlier step (a hint; from token 0 when none
// came yet) and the step computes what the cache did not serve, never more than planned.
//
// Overlap scheduling (vLLM's async scheduling, SGLang's overlap scheduler): schedule() may be
// called again while the step it returned last is still running, before its update(), when
// can_schedule() says so. Every step is "in flight" from schedule() to its update(). A
// sequence that samples in a step in flight continues in the next step with a placeholder for
// that sample (kPlaceholderToken; its slot is reserved with BlockManager::append_pending_token
// and its block hashed once update() resolves it); one that will certainly end with that
// sample (max_tokens, max_model_len) is not planned again. A sequence that ends while it is
// still part of a step in flight (EOS, stop, abort) keeps its blocks until every such step
// has been updated: its output there is discarded, and the executor may still be writing
// those blocks. Preemption frees or swaps out at once even then: every later use of those
// blocks (reallocation, the swap-out copy) belongs to a later step, which the executor runs
// only after the running one. Plans that depend on a step's outcome are not made ahead:
// can_schedule() is false while a step in flight samples a prompt that forks into best_of
// children or a beam search step (forks and beam selection happen in update()); the caller
// then waits for that step, as a synchronous loop does.
//
// Speculative decoding (config.speculative): when planning, each running sequence that decodes
// may get up to K proposal slots (kProposalSlotToken) after its last token, reserved as
// speculative slots (BlockManager::append_speculative_token). The executor fills them (the
// n-gram lookup on the tokens it knows, or a draft model), verifies them in the same forward
// pass (a grammar-constrained row under its grammar's mask at each position), and update()
// appends the accepted draws one by one, with the usual stop checks, then settles the slots
// (accepted kept, the rest truncated). Slots are planned past a verifying step in
// flight too (overlap): the next row assumes every slot accepted (PendingRow), its own slots
// come after, the settle of the step before moves them down over the rejected ones
// (settle_speculative's num_later), and the executor moves the row back to match
// (SampledTokenCarry); a draft row assumes the draft's K/V reach the last slot before it. A
// grammar row's proposals need the matcher's state after every token: a step with those is
// not followed by one planned ahead.
// The policy: none while more than speculative.max_batch() sequences run; none for beam
// search, a prompt's first draw, or before min_tokens.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/ngram_proposer.h"
#include "actors/sequence_group.h"
#include "actors/step_messages.h"
#include "cache/block_manager.h"
#include "cache/kv_allocator.h"
#include "cache/kv_memory_ops.h"
#include "cache/paged_kv_mirror.h"
#include "model/sampling_params.h"

namespace pagedserve::actors {

enum class PreemptionMode { kRecompute, kSwap };
const char* preemption_mode_name(PreemptionMode mode);  // "recompute", "swap"

// What add() takes: one request, validated by the caller.
struct NewRequest {
  uint64_t id = 0;  // the request id, unique among unfinished requests
  std::vector<int32_t> prompt_token_ids;
  model::SamplingParams sampling;
  uint64_t seed = 0;  // the request's seed (drawn at random by the engine when not given)
  // The request's true output length when known in advance (a trace replay), else 0. Only the
  // reserve-oracle and reserve-pow2 allocators read it (to size their regions).
  int output_len_hint = 0;
};

// One sequence's change in one step.
struct SequenceUpdate {
  int index = 0;                       // the sequence's index in its request
  std::vector<int32_t> new_token_ids;  // tokens sampled this step (one, or none)
  // Only when the request asked for logprobs: one per new token (model/sampler.h).
  std::vector<model::SampleLogprobs> logprobs;
  double cumulative_logprob = 0.0;                   // after this step
  FinishReason finish_reason = FinishReason::kNone;  // set in the step it finishes

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

// One sequence as the request returns it when it finishes.
struct CompletedSequence {
  int index = 0;  // position in RequestUpdate::outputs (0 .. n-1)
  // Index of the sequence it came from (SequenceUpdate::index); -1 for beam search, whose beams
  // have no stable identity.
  int source_index = -1;
  std::vector<int32_t> token_ids;  // generated tokens (the prompt excluded)
  double cumulative_logprob = 0.0;
  // Each token's share of cumulative_logprob (sampling sequences; empty for beams), so that a
  // stop string found after the scheduler ended the sequence can take back the tokens after it.
  std::vector<float> token_logprobs;
  FinishReason finish_reason = FinishReason::kNone;
};

// What one step (or an abort, error or stop) did to one request.
struct RequestUpdate {
  uint64_t request_id = 0;
  // Sequences that changed, by index. Always empty for beam search: beams are reshuffled
  // every step, so only the final outputs mean anything.
  std::vector<SequenceUpdate> seqs;
  bool finished = false;  // the whole request is done and `outputs` is set
  // When finished: the n returned sequences. best_of == n (no beam search): every sequence in
  // index order; otherwise the best first (cumulative logprob, or beam score).
  std::vector<CompletedSequence> outputs;
  int num_cached_tokens = 0;  // prompt tokens the prefix cache served at first admission
  std::string error;          // set when the request failed (finish reason kError)
  // Speculative decoding, summed over the request's sequences so far.
  int64_t num_proposed_tokens = 0;
  int64_t num_accepted_tokens = 0;
};

// Where the KV allocator lives and what the Scheduler plans from (see "KV memory" above).
enum class KvMemoryPlacement {
  // Owns the allocator and plans from it; each memory op is applied the moment it is decided
  // (the paper simulator and the unit tests that poke the block manager).
  kDirect,
  // Owns the allocator but plans from its own view (PagedKvMirror, or a replica for reserve-*)
  // and applies the step's op list at once: the actor protocol on one thread (LlmEngine).
  kMirrored,
  // Plans from its own view; the caller applies the op list (PrefixCacheActor) and hands the
  // result back (plan_step / finish_step).
  kRemote,
};

struct SchedulerConfig {
  int max_num_seqs = 256;  // sequences (not requests) running at once
  int max_model_len = 2048;
  int max_num_batched_tokens = 8192;  // tokens computed per step: decodes + prefill chunks
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  std::vector<int32_t> eos_token_ids;
  cache::KvAllocatorKind kv_allocator = cache::KvAllocatorKind::kPaged;  // --kv-allocator
  // Admit a waiting group only when blocks for its whole prompt (plus the tokens a preempted
  // group recomputes) are free now, above the watermark, as vLLM v0 did, even though chunked
  // prefill then computes it a chunk at a time. The default: under memory pressure the other
  // rule thrashes.
  // Off: a group may start with whatever prompt chunk the free blocks hold.
  // In a nearly full pool that group is the most recently admitted, so the first running
  // decode short of a block preempts it, its chunk is discarded (recompute) or swapped, it is
  // readmitted with another partial chunk as soon as blocks free up, and so on: thousands of
  // preemptions per 1,000 requests and lower throughput on the Azure traces (`pagedserve bench
  // admission`). Kept only for that comparison (bench admission, bench paper), not a serving
  // flag: it can only win when running requests happen to finish before the partially
  // admitted prompt needs its next blocks, and no measured workload showed a gain.
  // A prompt that fits the pool but not the free blocks waits at the head of the queue (FCFS:
  // nothing behind it is admitted) until running work drains; one larger than the pool fails.
  // The reserving allocators always need their whole region, so this only changes paged.
  bool admit_whole_prompt_only = true;
  KvMemoryPlacement kv_placement = KvMemoryPlacement::kDirect;
  // Speculative decoding (n-gram proposals; see "Speculative decoding" below). Needs the paged
  // allocator.
  SpeculativeConfig speculative;
};

// Counters the engine reports.
struct SchedulerStats {
  int64_t num_preemptions_swap = 0;       // groups swapped out
  int64_t num_preemptions_recompute = 0;  // groups freed to be recomputed (fallbacks included)
  int peak_used_blocks = 0;               // most device blocks in use after any schedule()
  int64_t prefix_cache_hit_tokens = 0;    // prompt tokens served by the prefix cache
  int64_t num_steps = 0;                  // schedule() calls
  int64_t num_steps_planned_ahead = 0;    // non-empty steps planned with another in flight
  // Speculative decoding: rows that verified proposals, tokens proposed in them, and the
  // proposals accepted (each accepted one is a token generated without a step of its own).
  int64_t num_spec_rows = 0;
  int64_t num_spec_proposed_tokens = 0;
  int64_t num_spec_accepted_tokens = 0;
  // Rows planned with proposal slots while the step before them ran (n-gram proposals, which
  // the executor then looks up on the tokens that step drew).
  int64_t num_spec_rows_planned_ahead = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, const cache::BlockManagerConfig& blocks);
  ~Scheduler();

  // Throws std::logic_error for an id already in use.
  void add(NewRequest request);
  // Frees the request's blocks at once; its final update comes out of the next update().
  void abort(uint64_t request_id);
  // Ends one sequence of a sampling request with reason stop (a stop string matched) and frees
  // its blocks. Returns the request's final update when that was its last live sequence; an
  // unknown request or finished sequence is ignored (the step that raced with it was dropped).
  // `num_tokens` >= 0: the sequence keeps only its first num_tokens outputs (a verified step
  // appended tokens after the one that completed the stop string).
  std::optional<RequestUpdate> stop_sequence(uint64_t request_id, int index, int num_tokens = -1);
  bool has_unfinished() const;

  // Whether schedule() may be called now: no step in flight, or one whose outcome the next
  // plan does not depend on (see the class comment). At most two steps are ever in flight.
  bool can_schedule() const;
  size_t num_steps_in_flight() const { return in_flight_.size(); }
  // Decides the next step. Requests that can never run (e.g. a prompt larger than the whole KV
  // pool) are finished with an error and reported by the next update(). Throws
  // std::logic_error when !can_schedule(). A step with sequences is in flight until update().
  // Needs an owned allocator (kDirect, kMirrored): plan_step, apply, finish_step.
  StepInput schedule();
  // The two halves of schedule() for kRemote. plan_step returns the step's memory ops (after
  // any left from update(), abort() or stop_sequence()); the caller applies them and passes the
  // result to finish_step, which returns the step. Nothing else may be called in between.
  cache::KvMemoryOps plan_step();
  StepInput finish_step(cache::KvMemoryResult result);
  // Memory ops decided outside a step (frees after update() or abort(), forks, resolutions)
  // and not handed out yet; kRemote sends them with the next step, or alone
  // (take_memory_ops, then absorb_memory_result) when no step follows. The owned placements
  // apply them at once, so this is always false there.
  bool has_memory_ops() const { return !ops_.empty(); }
  cache::KvMemoryOps take_memory_ops();
  void absorb_memory_result(const cache::KvMemoryResult& result);
  // The pool now (owned placements), or as the last applied op list left it (kRemote).
  cache::KvMemorySnapshot memory_snapshot() const;
  // Applies the executor's output for a step schedule() returned; steps are updated in the
  // order they were scheduled. A step with no sequences only reports requests finished outside
  // a step. Throws std::logic_error for a step that is not in flight.
  std::vector<RequestUpdate> update(const StepInput& input, const StepOutput& output);

  // The paged allocator's BlockManager; throws std::logic_error under another allocator or
  // when the allocator is not owned (kRemote).
  const cache::BlockManager& block_manager() const;
  const cache::KvAllocator& kv_allocator() const;
  SchedulerStats stats() const;
  // Numbers the next steps and sequences after `previous`'s, so a Scheduler that replaces
  // another (the scheduler actor's recovery from a fault) never reuses an id the executor may
  // still associate with state (a sampled token, a grammar matcher). Call before add().
  void continue_ids_after(const Scheduler& previous) {
    next_step_id_ = previous.next_step_id_;
    next_seq_id_ = previous.next_seq_id_;
  }
  size_t num_running() const { return running_.size(); }  // groups
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_swapped() const { return swapped_.size(); }
  // The group of a request still in the scheduler, nullptr when unknown (tests, metrics).
  const SequenceGroup* group(uint64_t request_id) const;

 private:
  // One sequence's share of the step being planned (see schedule()).
  struct PlannedSeq {
    uint64_t seq_id = 0;
    int num_tokens = 0;      // tokens to compute this step (an upper bound for allocate)
    int num_hit_tokens = 0;  // allocate only: prefix-cache hits the planning view expects
    bool allocate = false;   // not in the block manager yet: allocate instead of append
    int num_blocks = 0;      // blocks it may take (an upper bound)
    int num_proposed = 0;    // of num_tokens, proposals to verify (speculative decoding)
  };
  struct PlannedGroup {
    uint64_t request_id = 0;
    std::vector<PlannedSeq> seqs;
  };
  struct Budget {
    int tokens = 0;          // left for prefill chunks (decode tokens are reserved up front)
    int planned_blocks = 0;  // blocks the plan takes when it is carried out
    int num_seqs = 0;        // sequences running after this step
  };

  // ---- schedule (scheduler.cpp) ----
  // Speculative decoding: fills each running sequence's proposal for this step, or clears
  // them all when the policy turns speculation off at this batch size (scheduler_spec.cpp).
  void propose_tokens();
  // The acceptance policy's moving average (SpeculativeConfig::min_accepted_per_seq).
  static void record_accepted(Sequence& seq, int num_accepted);
  // n-gram proposals' adaptive length: the next row's (K until the first verifying step), and
  // its update after a verifying step (SpeculativeConfig::max_speculative_tokens).
  int proposal_length(const Sequence& seq) const;
  void adapt_proposal_length(Sequence& seq, int num_proposed, int num_accepted) const;
  bool may_speculate(const SequenceGroup& group, const Sequence& seq) const;
  // The tokens the step computes for a held sequence: position i of its tokens, or past the
  // end, its proposal.
  int32_t planned_token(const SequenceGroup& group, const Sequence& seq, int i) const;
  // Whether the group's proposals may be planned while the step before runs: any but a
  // grammar row's (its matcher needs every token before the mask of the next).
  bool proposes_ahead(const SequenceGroup& group) const;
  // Some step in flight verifies proposals of `seq`: its positions are not known yet.
  static bool has_unverified_proposals(const Sequence& seq);
  // The planned row's first slot (the draw of the step in flight) is reserved speculative:
  // next to a step in flight's speculative slots, or before this row's own proposals.
  static bool first_slot_speculative(const Sequence& seq, const PlannedSeq& planned);
  PendingRow pending_row(const Sequence& seq, const PlannedSeq& planned,
                         const ScheduledSequence& scheduled) const;
  bool plan_running(std::vector<PlannedGroup>& plan, Budget& budget);
  void resume_swapped(std::vector<PlannedGroup>& plan, Budget& budget);
  void admit_waiting(std::vector<PlannedGroup>& plan, Budget& budget);
  PlannedGroup plan_group(SequenceGroup& group, int token_budget, int free_blocks,
                          bool leave_last) const;
  PlannedSeq plan_seq(const SequenceGroup& group, const Sequence& seq, int token_budget,
                      int max_blocks, bool leave_last) const;
  std::vector<const Sequence*> plan_order(const SequenceGroup& group) const;
  int min_blocks_to_progress(const SequenceGroup& group, int token_budget) const;
  void commit(PlannedGroup plan, std::vector<PlannedGroup>& plans, Budget& budget, int num_seqs);
  bool can_never_run(SequenceGroup& group);
  int free_blocks(const Budget& budget) const;
  int blocks_to_resume(SequenceGroup& group) const;
  // Emits the allocate / append ops of every planned sequence, in plan order.
  void emit_plan(const std::vector<PlannedGroup>& plan);
  // Planning from a view without the cache: probe ops for the sequences that may be allocated
  // soon and have no recent hint (see "Prefix hints" in scheduler.cpp).
  void emit_prefix_probes(uint64_t step_id);
  void store_prefix_probes(const cache::KvMemoryResult& result);
  bool needs_prefix_probe(const Sequence& seq, uint64_t step_id) const;
  // One planned sequence's share of the step, from what the allocator did (the result).
  ScheduledSequence complete_seq(SequenceGroup& group, Sequence& seq, const PlannedSeq& planned,
                                 const cache::KvAllocation* allocation, cache::KvSeqState& state);
  void preempt(SequenceGroup& group);
  // Decides one memory op: applied to the planning view now (and, kDirect, to the allocator),
  // and queued for the op list.
  void emit(cache::KvMemoryOp op);
  void apply_result(const cache::KvMemoryResult& result);
  // kMirrored: applies the ops update(), abort() or stop_sequence() decided to the allocator.
  void flush_owned();
  int num_decode_seqs(SequenceGroup& group);
  int max_running_seqs(const SequenceGroup& group) const;
  // True when the sample a step in flight draws for `seq` ends it whatever its value.
  bool ends_with_pending_sample(const SequenceGroup& group, const Sequence& seq) const;
  bool is_in_flight(uint64_t seq_id) const;
  void register_in_flight(const StepInput& step);
  cache::SeqReservation reservation(const SequenceGroup& group, const Sequence& seq) const;
  // Has the allocator take the memory of every sequence the plan allocates (see
  // cache/kv_allocator.h); a sequence whose memory does not fit is dropped from the plan.
  void reserve_planned(SequenceGroup& group, PlannedGroup& plan);
  void fork_seq(uint64_t parent, uint64_t child);

  // ---- update (scheduler_update.cpp) ----
  RequestUpdate sample_step(SequenceGroup& group, const StepInput& input, const StepOutput& output,
                            const std::vector<size_t>& rows,
                            const std::vector<PendingRow>& applied);
  RequestUpdate beam_step(SequenceGroup& group, const StepInput& input, const StepOutput& output,
                          const std::vector<size_t>& rows);
  void append_sample(SequenceGroup& group, Sequence& seq, const model::TokenLogprob& sample,
                     RequestUpdate& update, bool grammar_ended = false);
  // A decoding row of a forked group: appends its draws in order (each checked for a stop as a
  // single sample is) and settles its speculative slots (accepted kept, rejected truncated;
  // a row planned after it keeps its slots, moved down over the rejected ones), taking the
  // rejected slots back from num_computed_tokens (scheduler_spec.cpp).
  void apply_decode_row(SequenceGroup& group, Sequence& seq, const SequenceStepOutput& output,
                        const PendingRow& row, RequestUpdate& update);
  // Of a row's draws, how many proposals it accepted (throws for draws that contradict them).
  int count_accepted(const Sequence& seq, const SequenceStepOutput& output,
                     const std::vector<int32_t>& proposals) const;
  FinishReason check_stop(const SequenceGroup& group, const Sequence& seq) const;
  bool is_eos(int32_t token) const;
  double beam_score_of(const SequenceGroup& group, const Sequence& seq) const;
  std::vector<CompletedSequence> final_outputs(SequenceGroup& group) const;
  void free_seq(Sequence& seq);
  // Frees what the group still holds, fills the update's outputs and forgets the group.
  void finish_group(SequenceGroup& group, RequestUpdate& update);
  void fail(SequenceGroup& group, FinishReason reason, std::string error);
  RequestUpdate new_update(const SequenceGroup& group) const;

  SchedulerConfig config_;
  // Every layer has a sliding window (BlockManagerConfig::sliding_window) and the allocator is
  // paged: each running sequence releases the blocks its next query cannot see (emit_plan).
  bool release_window_blocks_ = false;
  // The allocator itself (kDirect, kMirrored); null for kRemote.
  std::unique_ptr<cache::KvAllocator> owned_;
  // What planning reads: owned_ (kDirect), else a PagedKvMirror or, for reserve-*, a replica.
  std::unique_ptr<cache::KvAllocator> mirror_storage_;
  cache::KvAllocator* kv_ = nullptr;
  cache::PagedKvMirror* paged_mirror_ = nullptr;  // mirror_storage_ when it is one
  // Plans from paged_mirror_ with the prefix cache on: probe ops and hints (scheduler.cpp).
  bool use_prefix_hints_ = false;
  // kDirect: applies ops to owned_ as they are emitted and collects the step's result.
  std::unique_ptr<cache::KvMemoryApplier> direct_;
  // kMirrored/kRemote: carries each emitted op out on the planning view (*kv_), recording
  // nothing (one applier for the scheduler's life, not one per op).
  std::unique_ptr<cache::KvMemoryApplier> view_;
  cache::KvMemoryOps ops_;  // decided, not handed out yet (kMirrored, kRemote)
  // The next step may carry proposals that need every token known (a draft's, a grammar
  // row's): it is then planned only after this one's update (no overlap).
  bool speculating_ = false;
  cache::KvMemorySnapshot memory_;
  struct PlannedStep {
    StepInput step;
    std::vector<PlannedGroup> plans;
  };
  std::optional<PlannedStep> planned_;  // between plan_step and finish_step
  // Copies a fork returned (allocators without sharing), run at the start of the next step.
  std::vector<cache::BlockCopy> pending_fork_copies_;
  std::map<uint64_t, SequenceGroup> groups_;  // by request id
  std::deque<uint64_t> waiting_;        // FCFS; groups preempted by recompute go back to the front
  std::deque<uint64_t> swapped_;        // resumed front first, before any new admission
  std::vector<uint64_t> running_;       // in admission order; the last is preempted first
  std::vector<RequestUpdate> pending_;  // finished outside a step (abort, error)
  struct InFlightStep {
    uint64_t step_id = 0;
    std::vector<uint64_t> seq_ids;
    bool next_can_be_planned = true;  // no fork or beam selection depends on its outcome
  };
  std::deque<InFlightStep> in_flight_;  // scheduled, not yet updated; oldest first
  // For each sequence in some step in flight, how many such steps contain it (is_in_flight()
  // is called per finished sequence and per deferred free: a lookup, not a scan of every step).
  std::unordered_map<uint64_t, int> in_flight_steps_of_seq_;
  // Finished sequences whose blocks wait for the steps in flight that contain them.
  std::set<uint64_t> deferred_frees_;
  uint64_t next_step_id_ = 0;
  uint64_t next_seq_id_ = 1;
  SchedulerStats stats_;
};

}  // namespace pagedserve::actors
