// Scheduler, the scheduling half: admission, chunked prefill, preemption and block reservation
// for one step (update() and the sampling/beam logic live in scheduler_update.cpp).
//
// A step is planned in three phases so that the memory ops are emitted in the order the
// executor applies the copies (every swap_out, then every swap_in, then append/allocate):
//  1. plan_running: running groups in admission order. A group whose tokens cannot get blocks
//     preempts the most recently admitted group (swap_out, or free for recompute) until it
//     fits; the victim is always later in the order, so it was not planned yet.
//  2. resume_swapped, then (only when nothing is left swapped) admit_waiting: swap_in copies,
//     and plans for the groups admitted.
//  3. emit_plan: append / allocate ops for every planned sequence, in plan order.
// Between phases 1 and 3 the plan's blocks are counted in Budget::planned_blocks, each an
// upper bound, so the appends and allocations of phase 3 can never run out. The op list goes
// to whoever owns the allocator (plan_step); finish_step builds the StepInput from its result.
//
// Chunked prefill and the prefix-cache hashing hazard: the block manager hashes a block (and
// lets other prompts hit it) as soon as its last token is handed to allocate/append_token,
// before its K/V exists. So a sequence only ever hands over the tokens computed in this very
// step: a new sequence is allocated with prompt[0, hits + chunk) (hits found by the applier;
// see emit_plan for the cap), and each later chunk's tokens are appended in
// the step that computes them. Every hashed block is therefore computed in the same step (the
// forward pass writes a layer's K/V before any sequence reads it) or an earlier one, and a
// prefix hit never reads K/V that no step computes. Preemption runs before any allocation of
// the step, so no block is hashed and then dropped uncomputed.
//
// Prefix hints (kMirrored, kRemote with the prefix cache on): the mirror has no cache, so each
// step's op list ends with a probe op for every sequence that may be allocated soon (the live
// sequences without blocks of the first max_num_seqs waiting groups, and of running groups)
// whose hint is missing or kPrefixHintMaxAge steps old; the applier answers with the cache's
// hits at that point, after the step's own allocations, and finish_step keeps the answer on
// the sequence. plan_seq then plans the sequence from the hint as kDirect plans from the real
// hits: the token budget pays only for the tokens after it, the blocks are counted for hint +
// compute (an upper bound: hit blocks may come from the free cached pool) and the allocate op's
// cap is hint + compute. A stale hint only errs safely: blocks evicted meanwhile mean the step
// computes the same number of tokens from an earlier start (the rest become later chunks) in
// fewer blocks; hits that appeared meanwhile shrink the step's work. A waiting group never
// probed whose prompt would be chunked waits one step for its probe when the step has other
// work (else its hits would count only within its first chunk); into an idle step it is
// admitted at once, planned from token 0.
//
// With overlap scheduling (see scheduler.h) the same holds: a block hashed while planning step
// N+1 is computed by N+1 or by N (which runs first); a block filled by a placeholder is hashed
// by update(N) while N+1, which computes it, is queued or running, so only steps planned after
// that (and run after N+1) can hit it.
#include "actors/scheduler.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace pagedserve::actors {
namespace {

// Steps after which a prefix hint is probed again (blocks get cached and evicted meanwhile).
constexpr uint64_t kPrefixHintMaxAge = 4;

int blocks_for(int num_tokens, int block_size) {
  return (num_tokens + block_size - 1) / block_size;
}

}  // namespace

const char* preemption_mode_name(PreemptionMode mode) {
  return mode == PreemptionMode::kSwap ? "swap" : "recompute";
}

Scheduler::Scheduler(const SchedulerConfig& config, const cache::BlockManagerConfig& blocks)
    : config_(config),
      release_window_blocks_(blocks.sliding_window > 0 &&
                             config.kv_allocator == cache::KvAllocatorKind::kPaged) {
  if (config_.max_num_batched_tokens < 1 || config_.max_num_seqs < 1) {
    throw std::invalid_argument("Scheduler: max_num_batched_tokens and max_num_seqs must be >= 1");
  }
  if (std::string problem = config_.speculative.validate(); !problem.empty()) {
    throw std::invalid_argument("Scheduler: speculative decoding: " + problem);
  }
  if (config_.speculative.enabled() && config.kv_allocator != cache::KvAllocatorKind::kPaged) {
    throw std::invalid_argument("Scheduler: speculative decoding needs the paged KV allocator");
  }
  if (config_.kv_placement != KvMemoryPlacement::kRemote) {
    owned_ = cache::make_kv_allocator(config.kv_allocator, blocks);
  }
  if (config_.kv_placement == KvMemoryPlacement::kDirect) {
    kv_ = owned_.get();
    direct_ = std::make_unique<cache::KvMemoryApplier>(*owned_);
  } else if (config.kv_allocator == cache::KvAllocatorKind::kPaged) {
    auto mirror = std::make_unique<cache::PagedKvMirror>(blocks);
    paged_mirror_ = mirror.get();
    mirror_storage_ = std::move(mirror);
    use_prefix_hints_ = blocks.enable_prefix_caching;
    kv_ = mirror_storage_.get();
  } else {
    // A reserving allocator's state is a pure function of its op stream (no prefix cache, no
    // swap), so a replica fed the same ops answers reserve() exactly as the real one will.
    mirror_storage_ = cache::make_kv_allocator(config.kv_allocator, blocks);
    kv_ = mirror_storage_.get();
  }
  if (!direct_) view_ = std::make_unique<cache::KvMemoryApplier>(*kv_, /*record=*/false);
  memory_ = cache::snapshot_of(*kv_);
}

Scheduler::~Scheduler() = default;

void Scheduler::emit(cache::KvMemoryOp op) {
  if (direct_) {
    direct_->apply(op);
    return;
  }
  if (op.kind == cache::KvOpKind::kAllocate) {
    // The view has no cache: it takes blocks for every token up to the cap, the most the
    // allocator may (a prefix hint moved the cap past the tokens computed).
    const int compute_tokens = op.compute_tokens;
    op.compute_tokens = op.end_cap;
    view_->apply(op);
    op.compute_tokens = compute_tokens;
  } else {
    view_->apply(op);
  }
  ops_.push_back(std::move(op));
}

cache::KvMemoryOps Scheduler::take_memory_ops() {
  cache::KvMemoryOps ops = std::move(ops_);
  ops_.clear();
  return ops;
}

void Scheduler::apply_result(const cache::KvMemoryResult& result) {
  if (paged_mirror_ != nullptr) paged_mirror_->reconcile(result);
  memory_ = result.snapshot;
  store_prefix_probes(result);
}

bool Scheduler::needs_prefix_probe(const Sequence& seq, uint64_t step_id) const {
  if (seq.finished() || !seq.pending_rows.empty() || kv_->has_sequence(seq.seq_id)) {
    return false;  // its tokens are not all known, or it holds blocks already
  }
  return seq.prefix_hint_tokens < 0 || step_id >= seq.prefix_hint_step + kPrefixHintMaxAge;
}

void Scheduler::emit_prefix_probes(uint64_t step_id) {
  if (!use_prefix_hints_) return;
  // Not through emit(): the view has no cache to ask.
  auto probe = [&](const SequenceGroup& group) {
    for (const Sequence& seq : group.seqs) {
      if (!needs_prefix_probe(seq, step_id)) continue;
      ops_.push_back(
          cache::KvMemoryOp::probe_prefix(group.request_id, seq.seq_id, group.tokens(seq)));
    }
  };
  for (uint64_t id : running_) probe(groups_.at(id));
  int num_groups = 0;
  for (uint64_t id : waiting_) {
    if (num_groups++ >= config_.max_num_seqs) break;
    probe(groups_.at(id));
  }
}

void Scheduler::store_prefix_probes(const cache::KvMemoryResult& result) {
  for (const cache::KvPrefixProbe& probe : result.probes) {
    auto group = groups_.find(probe.group);
    if (group == groups_.end()) continue;  // finished meanwhile
    Sequence* seq = group->second.find(probe.seq);
    if (seq == nullptr || seq->finished()) continue;
    seq->prefix_hint_tokens = probe.num_cached_tokens;
    seq->prefix_hint_step = next_step_id_;
  }
}

void Scheduler::absorb_memory_result(const cache::KvMemoryResult& result) {
  if (!result.swap_out.empty() || !result.swap_in.empty()) {
    throw std::logic_error("Scheduler::absorb_memory_result: swaps outside a step");
  }
  apply_result(result);
  // Fork copies (reserve-*): the next step runs them first.
  pending_fork_copies_.insert(pending_fork_copies_.end(), result.block_copies.begin(),
                              result.block_copies.end());
}

void Scheduler::flush_owned() {
  if (config_.kv_placement != KvMemoryPlacement::kMirrored || ops_.empty()) return;
  absorb_memory_result(cache::apply_kv_memory_ops(*owned_, take_memory_ops()));
}

cache::KvMemorySnapshot Scheduler::memory_snapshot() const {
  return owned_ ? cache::snapshot_of(*owned_) : memory_;
}

const cache::KvAllocator& Scheduler::kv_allocator() const {
  if (!owned_) {
    throw std::logic_error(
        "Scheduler::kv_allocator: the allocator lives in the prefix-cache actor (kRemote)");
  }
  return *owned_;
}

void Scheduler::add(NewRequest request) {
  const uint64_t id = request.id;
  if (groups_.count(id) != 0) {
    throw std::logic_error("Scheduler::add: duplicate request id " + std::to_string(id));
  }
  SequenceGroup group;
  group.request_id = id;
  group.prompt_token_ids = std::move(request.prompt_token_ids);
  group.sampling = std::move(request.sampling);
  group.shared_sampling = std::make_shared<const model::SamplingParams>(group.sampling);
  group.seed = request.seed;
  group.output_len_hint = request.output_len_hint;
  Sequence seq;
  seq.seq_id = next_seq_id_++;
  group.seqs.push_back(std::move(seq));
  groups_.emplace(id, std::move(group));
  waiting_.push_back(id);
}

bool Scheduler::has_unfinished() const { return !groups_.empty() || !pending_.empty(); }

const SequenceGroup* Scheduler::group(uint64_t request_id) const {
  auto it = groups_.find(request_id);
  return it == groups_.end() ? nullptr : &it->second;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats stats = stats_;
  stats.prefix_cache_hit_tokens = memory_snapshot().prefix_cache_hits_tokens;
  return stats;
}

const cache::BlockManager& Scheduler::block_manager() const {
  const cache::BlockManager* manager = kv_allocator().block_manager();
  if (manager == nullptr) {
    throw std::logic_error(std::string("Scheduler::block_manager: the KV allocator is ") +
                           cache::kv_allocator_name(kv_->kind()) + ", not paged");
  }
  return *manager;
}

cache::SeqReservation Scheduler::reservation(const SequenceGroup& group,
                                             const Sequence& seq) const {
  cache::SeqReservation future;
  future.group = group.request_id;
  future.prompt_len = static_cast<int>(group.prompt_token_ids.size());
  future.current_len = group.num_tokens(seq);
  future.max_output_len = group.sampling.max_tokens;
  future.output_len_hint = group.output_len_hint;
  future.max_model_len = config_.max_model_len;
  // Beams fork before the losers are freed, so a group without sharing briefly holds up to
  // 2 * width - 1 copies.
  const int live = group.forked ? group.num_live() : group.sampling.num_sequences();
  future.num_regions = group.is_beam_search() ? 2 * live - 1 : live;
  return future;
}

void Scheduler::reserve_planned(SequenceGroup& group, PlannedGroup& plan) {
  if (!kv_->reserves_ahead()) return;
  std::vector<PlannedSeq> kept;
  for (PlannedSeq& planned : plan.seqs) {
    if (planned.allocate) {
      const cache::SeqReservation future = reservation(group, *group.find(planned.seq_id));
      if (!kv_->reserve(planned.seq_id, future)) continue;
      // kDirect: kv_ is the allocator itself. Otherwise the view (a replica) has reserved, and
      // the op list repeats it for the allocator, where it fits the same way.
      if (!direct_) ops_.push_back(cache::KvMemoryOp::reserve(planned.seq_id, future));
      planned.num_blocks = 0;  // taken now: no longer pending in the budget
    }
    kept.push_back(planned);
  }
  plan.seqs = std::move(kept);
}

// Its copies (reserve-* only) come back in the next op list's result, ahead of the step's own.
void Scheduler::fork_seq(uint64_t parent, uint64_t child) {
  emit(cache::KvMemoryOp::fork(parent, child));
}

int Scheduler::max_running_seqs(const SequenceGroup& group) const {
  return group.forked ? group.num_live() : group.sampling.num_sequences();
}

int Scheduler::num_decode_seqs(SequenceGroup& group) {
  int decodes = 0;
  for (Sequence* seq : group.live()) {
    if (kv_->has_sequence(seq->seq_id) && !ends_with_pending_sample(group, *seq) &&
        group.num_tokens(*seq) - seq->num_computed_tokens == 1) {
      ++decodes;
    }
  }
  return decodes;
}

bool Scheduler::ends_with_pending_sample(const SequenceGroup& group, const Sequence& seq) const {
  if (seq.pending_rows.empty()) return false;
  // Each pending row draws at least one token (its proposals may all be rejected).
  const int num_out = static_cast<int>(seq.output_token_ids.size()) + seq.num_pending_samples();
  const int num_tokens = static_cast<int>(group.prompt_token_ids.size()) + num_out;
  return num_out >= group.sampling.max_tokens || num_tokens >= config_.max_model_len;
}

bool Scheduler::is_in_flight(uint64_t seq_id) const {
  return in_flight_steps_of_seq_.count(seq_id) != 0;
}

bool Scheduler::can_schedule() const {
  if (planned_) return false;
  if (in_flight_.empty()) return true;
  return in_flight_.size() == 1 && in_flight_.front().next_can_be_planned;
}

void Scheduler::register_in_flight(const StepInput& step) {
  InFlightStep entry;
  entry.step_id = step.step_id;
  for (const ScheduledSequence& scheduled : step.seqs) {
    entry.seq_ids.push_back(scheduled.seq_id);
    ++in_flight_steps_of_seq_[scheduled.seq_id];
    if (!scheduled.sample) continue;
    const SequenceGroup& group = groups_.at(scheduled.request_id);
    // update() forks this prompt into best_of children, or selects and forks beams: the next
    // plan depends on what it samples.
    if (group.is_beam_search() || (!group.forked && group.sampling.num_sequences() > 1)) {
      entry.next_can_be_planned = false;
    }
  }
  // A draft's proposals for the next step, and a grammar row's, need this step's tokens (see
  // "Speculative decoding"); n-gram proposals are planned past a verifying step.
  for (const ScheduledSequence& scheduled : step.seqs) {
    if (scheduled.num_proposed_tokens > 0 && !proposes_ahead(groups_.at(scheduled.request_id))) {
      entry.next_can_be_planned = false;
    }
  }
  if (speculating_) entry.next_can_be_planned = false;
  in_flight_.push_back(std::move(entry));
}

int Scheduler::free_blocks(const Budget& budget) const {
  return kv_->num_free_device_blocks() - budget.planned_blocks;
}

// ---- planning ----

Scheduler::PlannedSeq Scheduler::plan_seq(const SequenceGroup& group, const Sequence& seq,
                                          int token_budget, int max_blocks, bool leave_last) const {
  PlannedSeq planned;
  planned.seq_id = seq.seq_id;
  const int total = group.num_tokens(seq);
  const bool held = kv_->has_sequence(seq.seq_id);
  const cache::SeqReservation future = reservation(group, seq);
  int start = seq.num_computed_tokens;
  // A decode may verify its proposals too: they come after its last token.
  const int proposed = held && total - start == 1 ? static_cast<int>(seq.proposal.size()) : 0;
  if (!held) {
    planned.allocate = true;
    // From a view without the cache, the hint a probe brought back (see the file comment);
    // at least the last token is computed, as the allocator's own lookup guarantees.
    planned.num_hit_tokens = use_prefix_hints_
                                 ? std::clamp(seq.prefix_hint_tokens, 0, std::max(total - 1, 0))
                                 : kv_->cached_prefix_tokens(group.tokens(seq));
    start = planned.num_hit_tokens;
  }
  // The most tokens max_blocks can hold (for paged, hit blocks are counted as taken: a
  // cached-free hit leaves the free queue, and a hit may be evicted by an earlier append of
  // this step before allocate runs; a shared partial last block is copied before a write).
  const int max_end = kv_->max_end_tokens(seq.seq_id, held, max_blocks, future);
  int take = std::min({total + proposed - start, token_budget, max_end - start});
  if (leave_last) take = std::min(take, total - start - 1);
  planned.num_tokens = std::max(take, 0);
  planned.num_proposed = std::max(start + planned.num_tokens - total, 0);
  if (planned.num_tokens == 0) return planned;
  planned.num_blocks = kv_->blocks_to_hold(seq.seq_id, held, start + planned.num_tokens, future);
  return planned;
}

// Decodes and chunks of sequences that hold blocks come first; a sequence without blocks (a
// group readmitted for recompute) only gets blocks above the watermark. Chunks shrink to the
// blocks left, so a plan always fits in `free_blocks`.
Scheduler::PlannedGroup Scheduler::plan_group(SequenceGroup& group, int token_budget,
                                              int free_blocks, bool leave_last) const {
  PlannedGroup plan;
  plan.request_id = group.request_id;
  int tokens_left = token_budget;
  int blocks_left = free_blocks;
  bool every_seq_samples = true;
  for (const Sequence* seq : plan_order(group)) {
    const bool allocate = !kv_->has_sequence(seq->seq_id);
    const int max_blocks = allocate ? blocks_left - kv_->watermark_blocks() : blocks_left;
    const PlannedSeq planned = plan_seq(group, *seq, tokens_left, max_blocks, leave_last);
    const int start = planned.allocate ? planned.num_hit_tokens : seq->num_computed_tokens;
    every_seq_samples &=
        planned.num_tokens > 0 && start + planned.num_tokens == group.num_tokens(*seq);
    if (planned.num_tokens == 0) continue;
    tokens_left -= planned.num_tokens;
    blocks_left -= planned.num_blocks;
    plan.seqs.push_back(planned);
  }
  // Beam search steps every beam at once (they compete for the next places): unless all of
  // them sample this step, none does; each keeps its last token for a later step.
  if (group.is_beam_search() && !every_seq_samples && !leave_last) {
    return plan_group(group, token_budget, free_blocks, /*leave_last=*/true);
  }
  return plan;
}

// Live sequences holding blocks, fewest tokens to compute (decodes) first, then those without.
std::vector<const Sequence*> Scheduler::plan_order(const SequenceGroup& group) const {
  std::vector<const Sequence*> order;
  for (const Sequence& seq : group.seqs) {
    // A sequence whose sample in flight ends it has nothing left to compute.
    if (!seq.finished() && !ends_with_pending_sample(group, seq)) order.push_back(&seq);
  }
  auto uncomputed = [&](const Sequence* s) {
    return kv_->has_sequence(s->seq_id) ? group.num_tokens(*s) - s->num_computed_tokens : 1 << 30;
  };
  std::stable_sort(order.begin(), order.end(), [&](const Sequence* a, const Sequence* b) {
    return uncomputed(a) < uncomputed(b);
  });
  return order;
}

// The blocks a running group needs to make any progress: one token for each sequence that
// holds blocks (as far as the token budget goes). Below that, something must be preempted.
int Scheduler::min_blocks_to_progress(const SequenceGroup& group, int token_budget) const {
  int blocks = 0;
  for (const Sequence* seq : plan_order(group)) {
    if (token_budget <= 0 || !kv_->has_sequence(seq->seq_id)) break;
    const PlannedSeq one = plan_seq(group, *seq, 1, cache::kUnboundedBlocks, /*leave_last=*/false);
    token_budget -= one.num_tokens;
    blocks += one.num_blocks;
  }
  return blocks;
}

void Scheduler::commit(PlannedGroup plan, std::vector<PlannedGroup>& plans, Budget& budget,
                       int num_seqs) {
  for (const PlannedSeq& seq : plan.seqs) budget.tokens -= seq.num_tokens;
  for (const PlannedSeq& seq : plan.seqs) budget.planned_blocks += seq.num_blocks;
  budget.num_seqs += num_seqs;
  if (!plan.seqs.empty()) plans.push_back(std::move(plan));
}

// ---- phase 1: running groups, preempting when blocks run out ----

bool Scheduler::plan_running(std::vector<PlannedGroup>& plans, Budget& budget) {
  bool preempted = false;
  for (size_t i = 0; i < running_.size(); ++i) {
    SequenceGroup& group = groups_.at(running_[i]);
    budget.tokens += num_decode_seqs(group);  // its reservation, see schedule()
    bool dropped = false;
    while (min_blocks_to_progress(group, budget.tokens) > free_blocks(budget)) {
      SequenceGroup& victim = groups_.at(running_.back());
      if (&victim == &group && running_.size() == 1 && !in_flight_.empty()) {
        // A step in flight may yet end sequences and return blocks: decide after its update.
        dropped = true;
        break;
      }
      if (&victim == &group && running_.size() == 1) {
        // Alone in the pool and still short: no preemption can ever make it fit.
        fail(group, FinishReason::kError,
             "the request's " + std::to_string(group.num_live()) +
                 " sequences need more KV blocks than the pool has (" +
                 std::to_string(kv_->num_total_device_blocks()) +
                 "); raise --kv-cache-memory or --num-kv-blocks");
        dropped = true;
        break;
      }
      if (&victim != &group) budget.tokens += num_decode_seqs(victim);
      preempt(victim);
      preempted = true;
      if (&victim == &group) {
        dropped = true;
        break;
      }
    }
    if (dropped) break;  // the group was the last one running
    PlannedGroup plan = plan_group(group, budget.tokens, free_blocks(budget), false);
    reserve_planned(group, plan);
    commit(std::move(plan), plans, budget, group.num_live());
  }
  return preempted;
}

// ---- phase 2: swapped groups first, then new admissions ----

// An upper bound on the device blocks swap_in takes for the group: its distinct CPU blocks
// (sequences of one group share their prompt's CPU copies).
int Scheduler::blocks_to_resume(SequenceGroup& group) const {
  std::set<cache::BlockId> distinct;
  for (const Sequence& seq : group.seqs) {
    if (seq.finished() || !kv_->has_sequence(seq.seq_id)) continue;
    for (cache::BlockId id : kv_->cpu_block_table(seq.seq_id)) {
      if (id != cache::kNoBlock) distinct.insert(id);  // released by the sliding window
    }
  }
  return static_cast<int>(distinct.size());
}

void Scheduler::resume_swapped(std::vector<PlannedGroup>& plans, Budget& budget) {
  while (!swapped_.empty() && budget.tokens > 0) {
    SequenceGroup& group = groups_.at(swapped_.front());
    if (group.has_pending_samples()) break;  // swapped out while sampling: its token comes first
    if (budget.num_seqs + group.num_live() > config_.max_num_seqs) break;
    // The swap-in plus one new block per sequence for the token this step computes.
    const int need = blocks_to_resume(group) + group.num_live();
    if (need > free_blocks(budget) - kv_->watermark_blocks()) break;
    for (Sequence* seq : group.live()) {
      if (kv_->has_sequence(seq->seq_id)) emit(cache::KvMemoryOp::swap_in(seq->seq_id));
    }
    swapped_.pop_front();
    group.status = GroupStatus::kRunning;
    running_.push_back(group.request_id);
    PlannedGroup plan = plan_group(group, budget.tokens, free_blocks(budget), false);
    reserve_planned(group, plan);
    commit(std::move(plan), plans, budget, group.num_live());
  }
}

bool Scheduler::can_never_run(SequenceGroup& group) {
  const Sequence* first = group.live().front();
  if (kv_->check_admission(group.tokens(*first), reservation(group, *first)) !=
      cache::AllocStatus::kNever) {
    return false;
  }
  const int blocks_needed = blocks_for(group.num_tokens(*first), kv_->block_size());
  fail(group, FinishReason::kError,
       "the sequence needs " + std::to_string(blocks_needed) +
           " KV blocks but the pool can never give it that many (" +
           std::to_string(kv_->num_total_device_blocks()) + " blocks, " +
           std::to_string(kv_->watermark_blocks()) +
           " kept back); raise --kv-cache-memory or --num-kv-blocks");
  return true;
}

void Scheduler::admit_waiting(std::vector<PlannedGroup>& plans, Budget& budget) {
  while (!waiting_.empty() && budget.tokens > 0) {
    SequenceGroup& group = groups_.at(waiting_.front());
    if (group.has_pending_samples()) break;  // preempted while sampling: its token comes first
    if (can_never_run(group)) continue;
    if (budget.num_seqs + max_running_seqs(group) > config_.max_num_seqs) break;
    if (use_prefix_hints_ && !plans.empty()) {
      // Never probed and chunked: its probe goes out with this step (see the file comment).
      const Sequence& first = *group.live().front();
      if (first.prefix_hint_tokens < 0 && group.num_tokens(first) > budget.tokens) break;
    }
    if (config_.admit_whole_prompt_only) {
      // Prefix-cache hits are not subtracted (conservative), and nothing behind this group is
      // admitted while it waits, so it gets in at the latest once the pool drains: every
      // block is then free, and can_never_run() failed it if that was not enough.
      const Sequence& first = *group.live().front();
      const int whole = kv_->blocks_to_hold(first.seq_id, false, group.num_tokens(first),
                                            reservation(group, first));
      if (whole > free_blocks(budget) - kv_->watermark_blocks()) break;
    }
    PlannedGroup plan = plan_group(group, budget.tokens, free_blocks(budget), false);
    // FCFS: stop at the first group whose first sequence does not fit (for the reserving
    // allocators: in one contiguous hole).
    if (plan.seqs.empty() || plan.seqs.front().seq_id != group.live().front()->seq_id) break;
    reserve_planned(group, plan);
    if (plan.seqs.empty() || plan.seqs.front().seq_id != group.live().front()->seq_id) {
      for (const PlannedSeq& planned : plan.seqs) {
        if (planned.allocate) emit(cache::KvMemoryOp::free(planned.seq_id));
      }
      break;
    }
    waiting_.pop_front();
    group.status = GroupStatus::kRunning;
    running_.push_back(group.request_id);
    commit(std::move(plan), plans, budget, max_running_seqs(group));
  }
}

// ---- preemption ----

void Scheduler::preempt(SequenceGroup& group) {
  running_.erase(std::remove(running_.begin(), running_.end(), group.request_id), running_.end());
  ++group.num_preemptions;
  std::set<cache::BlockId> device_blocks;  // what swapping out would copy, at most
  for (Sequence* seq : group.live()) {
    if (!kv_->has_sequence(seq->seq_id)) continue;
    for (cache::BlockId id : kv_->block_table(seq->seq_id)) {
      if (id != cache::kNoBlock) device_blocks.insert(id);  // released by the sliding window
    }
  }
  // Swap falls back to recompute when the CPU pool cannot take the group, as vLLM does.
  // Allocators without swap space (num_free_cpu_blocks() == 0) always recompute.
  // So does a group with speculative slots not settled yet (a step in flight verifies them,
  // and a swapped-out table could not be truncated).
  bool unsettled = false;
  for (Sequence* seq : group.live()) {
    for (const PendingRow& row : seq->pending_rows) unsettled |= row.num_speculative_slots() > 0;
  }
  const bool swap = config_.preemption_mode == PreemptionMode::kSwap && !unsettled &&
                    kv_->num_free_cpu_blocks() > 0 &&
                    static_cast<int>(device_blocks.size()) <= kv_->num_free_cpu_blocks();
  for (Sequence* seq : group.live()) {
    if (!kv_->has_sequence(seq->seq_id)) continue;
    if (swap) {
      emit(cache::KvMemoryOp::swap_out(seq->seq_id));
    } else {
      emit(cache::KvMemoryOp::free(seq->seq_id));
      seq->num_computed_tokens = 0;
      seq->draft_num_computed_tokens = 0;
      seq->prefix_hint_tokens = -1;  // probed again before it is readmitted
    }
  }
  if (swap) {
    group.status = GroupStatus::kSwapped;
    swapped_.push_front(group.request_id);
    ++stats_.num_preemptions_swap;
  } else {
    emit(cache::KvMemoryOp::release_group(group.request_id));
    group.status = GroupStatus::kWaiting;
    waiting_.push_front(group.request_id);
    ++stats_.num_preemptions_recompute;
  }
}

// ---- phase 3: carrying the plan out ----

// A sequence hands the allocator only the tokens this step computes (see the file comment).
// A new one: prompt[0, end) with end = min(total, hits + compute, end_cap) (KvMemoryApplier).
// kDirect plans from the allocator itself and knows its hits: end is exactly hits + the planned
// tokens, as planned. Planning from a view without the cache, the plan counted the prompt from
// its prefix hint (0 when none): end_cap = hint + compute (widened to the planned blocks' last
// slot), so the step computes at most the planned tokens and takes at most the planned blocks,
// fewer tokens when the cache serves more than the hint, an earlier start when it serves less.
void Scheduler::emit_plan(const std::vector<PlannedGroup>& plans) {
  for (const PlannedGroup& plan : plans) {
    SequenceGroup& group = groups_.at(plan.request_id);
    for (const PlannedSeq& planned : plan.seqs) {
      const Sequence& seq = *group.find(planned.seq_id);
      if (planned.allocate) {
        std::vector<int32_t> tokens = group.tokens(seq);
        if (!seq.pending_rows.empty()) {
          throw std::logic_error("Scheduler: allocating sequence " + std::to_string(seq.seq_id) +
                                 " before its pending sample is known");
        }
        const int total = static_cast<int>(tokens.size());
        int compute = planned.num_tokens;
        int end_cap = planned.num_hit_tokens + planned.num_tokens;
        if (direct_) {
          compute = total;
        } else if (!kv_->reserves_ahead()) {
          end_cap = std::max(end_cap, planned.num_blocks * kv_->block_size());
        }
        cache::KvMemoryOp op =
            cache::KvMemoryOp::allocate(seq.seq_id, std::move(tokens), compute, end_cap);
        op.group = group.request_id;  // observers map sequences to requests (kv_snapshot.h)
        emit(std::move(op));
        continue;
      }
      const int start = seq.num_computed_tokens;
      // Every slot before `start` is computed (or computing in a step in flight), so the next
      // slot is this step's earliest query: blocks wholly before its window are dead. Not
      // while a step in flight verifies proposals: `start` assumes them all accepted, and the
      // query moves back over the rejected ones.
      if (release_window_blocks_ && !has_unverified_proposals(seq)) {
        emit(cache::KvMemoryOp::release_before_window(seq.seq_id));
      }
      const int num_known = start + planned.num_tokens - planned.num_proposed;
      for (int i = start; i < num_known; ++i) {
        // The token the step in flight samples: its block is hashed when update() knows it,
        // or, next to speculative slots, when this step's verification settles it.
        const int32_t token = group.token_at(seq, i);
        if (token != kPlaceholderToken) {
          emit(cache::KvMemoryOp::append(seq.seq_id, token));
        } else if (first_slot_speculative(seq, planned)) {
          emit(cache::KvMemoryOp::append_speculative(seq.seq_id, kPlaceholderToken));
        } else {
          emit(cache::KvMemoryOp::append_pending(seq.seq_id));
        }
      }
      // Proposals: hashed only once update() has accepted them.
      for (int i = num_known; i < start + planned.num_tokens; ++i) {
        emit(cache::KvMemoryOp::append_speculative(seq.seq_id, planned_token(group, seq, i)));
      }
    }
  }
}

ScheduledSequence Scheduler::complete_seq(SequenceGroup& group, Sequence& seq,
                                          const PlannedSeq& planned,
                                          const cache::KvAllocation* allocation,
                                          cache::KvSeqState& state) {
  ScheduledSequence scheduled;
  scheduled.request_id = group.request_id;
  scheduled.seq_id = seq.seq_id;
  const int total = group.num_tokens(seq);
  if (planned.allocate) {
    const std::vector<int32_t> tokens = group.tokens(seq);
    if (allocation == nullptr) {
      throw std::logic_error("Scheduler: no allocation came back for sequence " +
                             std::to_string(seq.seq_id));
    }
    if (group.num_cached_tokens < 0) group.num_cached_tokens = allocation->num_cached_tokens;
    seq.num_computed_tokens = allocation->num_cached_tokens;
    scheduled.new_token_ids.assign(tokens.begin() + allocation->num_cached_tokens,
                                   tokens.begin() + allocation->num_tokens);
  } else {
    const int start = seq.num_computed_tokens;
    for (int i = start; i < start + planned.num_tokens; ++i) {
      scheduled.new_token_ids.push_back(planned_token(group, seq, i));
    }
    scheduled.num_proposed_tokens = planned.num_proposed;
    if (planned.num_proposed > 0 && config_.speculative.method == SpeculativeMethod::kNgram) {
      scheduled.proposal_context = group.tokens(seq);  // through the last token
    }
    if (planned.num_proposed > 0 && config_.speculative.method == SpeculativeMethod::kDraft) {
      // What the draft model has not seen yet, before the last token (catching up after a
      // prompt, a recompute, steps without proposals, or a step that accepted everything).
      scheduled.draft_num_computed_tokens = std::min(seq.draft_num_computed_tokens, start);
      for (int i = scheduled.draft_num_computed_tokens; i < start; ++i) {
        scheduled.draft_context_ids.push_back(group.token_at(seq, i));
      }
    }
  }
  scheduled.num_computed_tokens = seq.num_computed_tokens;
  scheduled.block_table = std::move(state.blocks);  // each sequence runs once per step
  scheduled.sample = seq.num_computed_tokens + static_cast<int>(scheduled.new_token_ids.size()) -
                         scheduled.num_proposed_tokens ==
                     total;
  if (!scheduled.sample) return scheduled;

  scheduled.sampling = group.shared_sampling;
  // Tokens drawn before this row: a pending row's proposals are assumed accepted, and the
  // executor takes back the ones it rejected (num_tentative_tokens).
  const int prompt_len = static_cast<int>(group.prompt_token_ids.size());
  scheduled.sample_step = static_cast<uint64_t>(total - prompt_len);
  if (!seq.pending_rows.empty())
    scheduled.num_tentative_tokens = seq.pending_rows.back().num_proposals;
  if (group.sampling.has_penalties() || group.sampling.grammar) {
    if (group.sampling.repetition_penalty != 1.0f)
      scheduled.penalty_prompt_ids = group.prompt_token_ids;
    scheduled.penalty_output_ids = group.output_tokens(seq);
  }
  // The fewest tokens drawn before this row (min_tokens never lets a row with a pending
  // verification get here: proposals wait for min_tokens).
  const int num_out = static_cast<int>(seq.output_token_ids.size()) + seq.num_pending_samples();
  // Until min_tokens exist, the tokens that would end the sequence cannot be drawn (vLLM's
  // min-tokens logits processor), rather than being drawn and then ignored.
  if (num_out < group.sampling.min_tokens) {
    scheduled.banned_token_ids = group.sampling.stop_token_ids;
    if (!group.sampling.ignore_eos) {
      scheduled.banned_token_ids.insert(scheduled.banned_token_ids.end(),
                                        config_.eos_token_ids.begin(), config_.eos_token_ids.end());
    }
  }
  if (group.is_beam_search()) {
    // vLLM v0 takes the best 2 * beam_width candidates, so enough survive finished ones.
    scheduled.num_top_logprobs = 2 * group.sampling.num_sequences();
  } else if (!group.forked) {
    // The prompt's only row of logits: one draw per child, each on the child's own stream.
    for (int i = 0; i < group.sampling.num_sequences(); ++i) {
      scheduled.sample_seeds.push_back(sequence_seed(group.seed, i));
    }
  } else {
    scheduled.sample_seeds.push_back(sequence_seed(group.seed, seq.index));
  }
  return scheduled;
}

StepInput Scheduler::schedule() {
  if (!owned_) {
    throw std::logic_error("Scheduler::schedule: the allocator is remote; use plan_step");
  }
  const cache::KvMemoryOps ops = plan_step();
  if (direct_) return finish_step(direct_->finish());  // the ops were applied as decided
  return finish_step(cache::apply_kv_memory_ops(*owned_, ops));
}

cache::KvMemoryOps Scheduler::plan_step() {
  if (!can_schedule()) {
    throw std::logic_error(
        planned_ ? "Scheduler::plan_step: the planned step waits for its memory result"
                 : "Scheduler::schedule: the step in flight must be updated before another is "
                   "planned");
  }
  PlannedStep next;
  next.step.step_id = next_step_id_++;
  ++stats_.num_steps;
  propose_tokens();
  // Decodes come first: one token per decoding sequence is reserved up front, and each running
  // group takes its reservation back when its turn comes; prefill chunks share what is left.
  Budget budget;
  budget.tokens = config_.max_num_batched_tokens;
  for (uint64_t id : running_) budget.tokens -= num_decode_seqs(groups_.at(id));

  const bool preempted = plan_running(next.plans, budget);
  // After a preemption the pool is full: resuming or admitting now would only thrash.
  if (!preempted) {
    resume_swapped(next.plans, budget);
    if (swapped_.empty()) admit_waiting(next.plans, budget);
  }
  emit_plan(next.plans);
  emit_prefix_probes(next.step.step_id);
  planned_ = std::move(next);
  return take_memory_ops();
}

StepInput Scheduler::finish_step(cache::KvMemoryResult result) {
  if (!planned_) throw std::logic_error("Scheduler::finish_step: no step was planned");
  apply_result(result);
  PlannedStep planned = std::move(*planned_);
  planned_.reset();
  StepInput step = std::move(planned.step);
  // Fork copies from the last update() first (they come in an earlier result, or at the front
  // of this one). Safe ahead of this step's own copies: only the reserving allocators return
  // them, and they have no swap or prefix cache, so nothing this step does can read the
  // destination before the step's forward pass writes it anew.
  step.block_copies = std::move(pending_fork_copies_);
  pending_fork_copies_.clear();
  step.block_copies.insert(step.block_copies.end(), result.block_copies.begin(),
                           result.block_copies.end());
  step.swap_out = std::move(result.swap_out);
  step.swap_in = std::move(result.swap_in);
  std::unordered_map<cache::SeqId, const cache::KvAllocation*> allocations;
  for (const cache::KvAllocation& a : result.allocations) allocations[a.seq] = &a;
  std::unordered_map<cache::SeqId, cache::KvSeqState*> states;
  for (cache::KvSeqState& state : result.seqs) states[state.seq] = &state;

  for (const PlannedGroup& plan : planned.plans) {
    SequenceGroup& group = groups_.at(plan.request_id);
    for (const PlannedSeq& planned_seq : plan.seqs) {
      Sequence* seq = group.find(planned_seq.seq_id);
      auto state = states.find(planned_seq.seq_id);
      if (state == states.end()) {
        throw std::logic_error("Scheduler::finish_step: no block table came back for sequence " +
                               std::to_string(planned_seq.seq_id));
      }
      auto allocation = allocations.find(planned_seq.seq_id);
      step.seqs.push_back(complete_seq(
          group, *seq, planned_seq, allocation == allocations.end() ? nullptr : allocation->second,
          *state->second));
      // The step's tokens count as computed from now on, proposals included (update() takes
      // the rejected ones back), and its row as pending, so that the next step can be planned
      // before this one's update().
      const ScheduledSequence& scheduled = step.seqs.back();
      if (scheduled.sample) seq->pending_rows.push_back(pending_row(*seq, planned_seq, scheduled));
      if (has_proposal_slots(scheduled) &&
          config_.speculative.method == SpeculativeMethod::kDraft) {
        // As if every slot is accepted, for a row planned while this one runs: the draft's
        // K/V then reach the last proposal, which that row's draft context starts with.
        seq->draft_num_computed_tokens =
            scheduled.num_computed_tokens + scheduled.num_proposed_tokens;
      }
      if (scheduled.num_proposed_tokens > 0 && seq->pending_rows.size() > 1) {
        ++stats_.num_spec_rows_planned_ahead;
      }
      seq->num_computed_tokens += static_cast<int>(scheduled.new_token_ids.size());
    }
  }
  if (!step.seqs.empty()) {
    if (!in_flight_.empty()) ++stats_.num_steps_planned_ahead;
    register_in_flight(step);
  }
  stats_.peak_used_blocks =
      std::max(stats_.peak_used_blocks, result.snapshot.num_used_device_blocks);
  return step;
}

}  // namespace pagedserve::actors
