// BlockManager: the paged KV-cache memory manager (PagedAttention's block tables, reference
// counts, copy-on-write, automatic prefix caching, CPU swap space). Pure logic: no threads, no
// I/O. It decides which physical blocks hold which tokens; the executor moves the bytes using
// the BlockCopy lists returned here. Lives on whichever thread owns it (the prefix-cache
// actor); not thread-safe, not even for concurrent const calls (can_allocate fills a memo).
//
// Copy ordering contract: every BlockCopy a call returns must be run before the next forward
// pass, and copies from different calls in the same step must run in call order (a block a
// later call frees may be the destination of a still later call). Making the calls grouped as
// swap_out*, swap_in*, append_token* lets the executor run the three lists as three groups.
//
// Hashing contract: a block is hashed (and becomes a prefix-cache hit for others) as soon as
// its last token is handed to allocate/append_token, i.e. before the step computes its K/V.
// That is safe when those tokens are computed in the very next step (a sequence that reuses
// the block in the same step reads it only after the layer has written it), which is how the
// scheduler runs prompts today; chunked prefill would need hashing to trail computation.
// With overlap scheduling a step may hold the slot of a token the running step has not sampled
// yet (append_pending_token): a block that token fills is hashed only once resolve_pending_token
// names it, so the prefix cache never indexes a block under a guessed token.
// Speculative decoding takes the same care: a proposed token's slot (append_speculative_token)
// holds a token that may be rejected, so no block holding one is hashed until
// settle_speculative_tokens keeps it (the verified prefix) or drops it (the rejected tail,
// whose slots are freed and whose blocks go back to the pool when they become empty).
//
// Sliding windows (BlockManagerConfig::sliding_window = W > 0, when every layer is windowed):
// the query at position i reads only keys at i - W < j <= i, so once the earliest query a step
// computes is at position q, the blocks holding only positions <= q - W are dead for this
// sequence. release_blocks_before_window(seq), called when the next slot appended is that
// query, drops this sequence's reference to them (a block shared with a fork stays with the
// fork; a hashed full block becomes cached-free like any freed block) and leaves kNoBlock in
// their table entries: the table keeps one entry per block of tokens, so positions still map to
// entries, and the attention kernels never read an entry before the window. Released entries
// are always a prefix of the table, never its last block; swap, fork and free skip them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"
#include "cache/block_pool.h"
#include "cache/block_types.h"

namespace pagedserve::cache {

struct KvPoolSnapshot;  // cache/kv_snapshot.h

// A snapshot of the manager's accounting, for metrics and logs.
struct BlockManagerStats {
  int num_total_device_blocks = 0;
  int num_used_device_blocks = 0;  // held by at least one sequence
  int num_free_device_blocks = 0;  // allocatable: truly free + cached-free
  int num_cached_blocks = 0;       // free blocks still holding a reusable prefix (evictable)
  int num_hashed_blocks = 0;       // blocks in the prefix-cache index, used or free
  int num_total_cpu_blocks = 0;
  int num_used_cpu_blocks = 0;
  double usage = 0.0;                       // used / total device blocks, in [0, 1]
  int64_t prefix_cache_queries_tokens = 0;  // prompt tokens looked up (allocate)
  int64_t prefix_cache_hits_tokens = 0;     // of which found in the cache
  int64_t num_evicted_blocks = 0;           // cached-free blocks reused for something else
  int64_t num_stored_tokens = 0;   // tokens held in used device blocks (shared blocks once)
  int64_t num_reserved_slots = 0;  // used device blocks * block_size
  double fragmentation = 0.0;      // 1 - stored / reserved: waste in partly filled blocks
};

class BlockManager {
 public:
  explicit BlockManager(const BlockManagerConfig& config);

  int block_size() const { return block_size_; }

  // ---- admission (scheduler) ----
  // Whether `prompt_tokens` can be allocated now, counting prefix hits (a cached-free hit still
  // takes a free block out of the queue) and keeping the watermark of free blocks back.
  bool can_allocate(std::span<const int32_t> prompt_tokens, std::string_view cache_salt = {}) const;
  AllocStatus check_allocate(std::span<const int32_t> prompt_tokens,
                             std::string_view cache_salt = {}) const;
  // Prompt tokens allocate would find in the prefix cache now (a multiple of block_size,
  // always < the prompt's size); 0 with prefix caching off.
  int cached_prefix_tokens(std::span<const int32_t> prompt_tokens,
                           std::string_view cache_salt = {}) const;
  // Conservative: true when at least one free block exists per running sequence.
  bool can_append_slots(int num_running_seqs) const;
  bool can_swap_out(SeqId seq) const;  // enough free CPU blocks
  bool can_swap_in(SeqId seq) const;   // enough free device blocks above the watermark

  // ---- sequence lifetime ----
  // Builds a table covering the whole prompt, reusing the longest cached prefix of full blocks
  // (never the whole prompt: the last token is always recomputed). The prompt's full blocks are
  // hashed and published. Throws std::logic_error for a known seq or an empty prompt,
  // std::runtime_error when the pool is short of blocks (the watermark is not applied here).
  AllocationResult allocate(SeqId seq, std::span<const int32_t> prompt_tokens,
                            std::string_view cache_salt = {});
  // Reserves the slot for one more token (the one whose K/V the next step writes): a new block
  // when the last is full, a private copy (returned) when the last is shared and partly
  // filled. Hashes the last block when this token fills it. Throws std::logic_error for an
  // unknown or swapped-out seq, std::runtime_error when a block is needed and none is free.
  std::vector<BlockCopy> append_token(SeqId seq, int32_t token);
  // Overlap scheduling: reserves the slot (as append_token does) for a token that the step now
  // running has yet to sample, so the next step can be planned before that token is known. The
  // block the token fills is not hashed until resolve_pending_token. At most one pending token
  // per sequence: append_*, fork and swap_out throw std::logic_error while one is unresolved
  // (free is fine: the unresolved block is simply never published).
  std::vector<BlockCopy> append_pending_token(SeqId seq);
  // The pending token became known: records it and, if it filled its block, hashes and
  // publishes that block. Throws std::logic_error when the sequence has no pending token.
  void resolve_pending_token(SeqId seq, int32_t token);
  bool has_pending_token(SeqId seq) const;
  // Speculative decoding: reserves the slot of a proposed token, as append_token does, but the
  // block it fills is not hashed until settle_speculative_tokens accepts it. Several may be
  // appended in a row; an ordinary append, a pending token, fork and swap_out throw
  // std::logic_error until they are settled (free is fine).
  std::vector<BlockCopy> append_speculative_token(SeqId seq, int32_t token);
  // The step verified the proposals: the first `num_accepted` speculative tokens become
  // ordinary tokens (their full blocks hashed and published), the rest are truncated: their
  // slots freed and each block left empty returned to the pool. Returns the blocks returned.
  // `accepted_tokens`, when given (num_accepted of them), are the accepted tokens' ids: they
  // replace what append_speculative_token recorded, for a proposer whose proposals were not
  // known when their slots were planned (a draft model runs in the executor).
  // `num_later`: with overlap scheduling, the last num_later speculative slots belong to the
  // next step, planned (and possibly running) before this one's verification was known; they
  // stay speculative and move down over the rejected slots (a slot is only a position in the
  // block table, and the next step writes its tokens where the accepted count puts them).
  // Throws std::logic_error when num_accepted is outside [0, speculative tokens - num_later]
  // or accepted_tokens is neither empty nor num_accepted long.
  int settle_speculative_tokens(SeqId seq, int num_accepted,
                                std::span<const int32_t> accepted_tokens = {}, int num_later = 0);
  int num_speculative_tokens(SeqId seq) const;
  // The next slot appended to `seq` is the earliest query of the step being planned: releases
  // the blocks wholly before that query's window (see the class comment). Nothing without a
  // window. Returns the table entries released now. Throws std::logic_error for an unknown or
  // swapped-out seq.
  int release_blocks_before_window(SeqId seq);
  int sliding_window() const { return sliding_window_; }
  // `child` shares every block of `parent` (ref counts + 1). Both must be on the device.
  void fork(SeqId parent, SeqId child);
  // Finish or abort, on the device or swapped out. Full hashed blocks become cached-free.
  void free(SeqId seq);
  // Device -> CPU: returns copies (src = device block, dst = CPU block). A block already copied
  // for a sharer is not copied again; the device blocks are released (hashed ones stay cached).
  std::vector<BlockCopy> swap_out(SeqId seq);
  // CPU -> device: returns copies (src = CPU block, dst = device block). A block whose content
  // is still on the device (a sharer swapped it in, or the prefix cache holds it) is reused.
  std::vector<BlockCopy> swap_in(SeqId seq);

  // ---- per-sequence queries ----
  bool has_sequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  bool is_swapped(SeqId seq) const;
  // Device block ids in token order; valid until the next call that changes this sequence.
  // Entries released by release_blocks_before_window hold kNoBlock. Throws std::logic_error when
  // the sequence is unknown or swapped out.
  std::span<const BlockId> block_table(SeqId seq) const;
  std::span<const BlockId> cpu_block_table(SeqId seq) const;  // swapped-out sequences only
  int num_tokens(SeqId seq) const;

  // ---- accounting ----
  int num_total_device_blocks() const { return device_.num_blocks(); }
  int num_free_device_blocks() const { return device_.num_free_blocks(); }
  int num_used_device_blocks() const { return device_.num_used_blocks(); }
  int num_cached_blocks() const { return device_.num_cached_free_blocks(); }
  int num_total_cpu_blocks() const { return cpu_.num_blocks(); }
  int num_free_cpu_blocks() const { return cpu_.num_free_blocks(); }
  int watermark_blocks() const { return watermark_blocks_; }
  double usage() const;
  int64_t prefix_cache_queries_tokens() const { return prefix_queries_tokens_; }
  int64_t prefix_cache_hits_tokens() const { return prefix_hits_tokens_; }
  BlockManagerStats stats() const;

  // ---- KV-cache events (cache/kv_cache_events.h) ----
  // Records every change to the prefix-cache index into `recorder` (null: nothing is recorded,
  // the default): a store when a full block enters the index (allocate, the append or
  // resolve_pending_token that fills a block, swap_in), a removal when a cached-free block is
  // evicted. Attach it before the first allocate (throws std::logic_error once the manager
  // holds sequences or hashes). While attached, each sequence also keeps its full blocks'
  // token ids (4 bytes a token) for the events that re-publish a block.
  // Parent order: a block enters the index only after its parent (the ancestors a sequence
  // holds are re-entered first when their entry was evicted), except when a sliding window
  // released the parent from every table and it was then evicted: the block is stored with a
  // parent hash the index no longer has.
  void set_event_recorder(KvEventRecorder* recorder);
  // The hashes in the prefix-cache index, any order (tests; O(hashed blocks)).
  std::vector<BlockHash> cached_block_hashes() const { return device_.hashes(); }

  // ---- testing ----
  int device_ref_count(BlockId id) const { return device_.block(id).ref_count; }
  // The device free queue front to back: the order in which blocks will be handed out.
  std::vector<BlockId> device_free_queue() const { return device_.free_queue().ids(); }
  // Empty when every invariant holds (each block exactly free, cached-free or owned with
  // ref_count = number of tables holding it; counts; hash index; swap links); else what broke.
  // O(total blocks + total table entries).
  std::string check_invariants() const;

  // ---- observers ----
  // Every device and CPU block's state, holders, fill and hash now (cache/kv_snapshot.h), for
  // the playground's block map. Read-only; O(total blocks + total table entries).
  KvPoolSnapshot snapshot() const;

 private:
  struct Sequence {
    std::vector<BlockId> blocks;          // device ids, or CPU ids while swapped
    std::vector<BlockHash> block_hashes;  // one per full block (prefix caching only)
    // Tokens of the partial last block (caching only); a full block while its last token is
    // pending (then the slot holds a placeholder and the block is not hashed yet).
    std::vector<int32_t> tail_tokens;
    std::string cache_salt;  // hashed into the first block
    // Token ids of the full blocks (block_hashes.size() * block_size), only while an event
    // recorder is attached: a block re-entering the index is reported with its tokens.
    std::vector<int32_t> full_tokens;
    int num_tokens = 0;
    int num_released = 0;  // leading table entries given back (kNoBlock), sliding window only
    bool swapped = false;
    bool pending = false;  // the last token's value is not known yet (append_pending_token)
    // The last num_speculative tokens are proposals not yet verified (append_speculative_token):
    // the tail then holds every token after the last hashed block, possibly several blocks.
    int num_speculative = 0;
  };

  // append_token's work; `pending`: the token is a placeholder, hashing waits for its value.
  enum class SlotKind { kKnown, kPending, kSpeculative };
  std::vector<BlockCopy> append_slot(SeqId seq, int32_t token, SlotKind kind, const char* op);
  // Hashes and publishes the block the tail's first block_size tokens fill, then drops them
  // from the tail.
  void hash_full_tail(Sequence& s);
  // Enters table[i] into the prefix-cache index under hashes[i] (nothing when another block
  // holds that hash: the first stays the shared copy), after re-entering the ancestors the
  // table holds whose hashes are missing from the index, oldest first. `tokens`: the table's
  // full-block tokens, read only when events are recorded.
  void publish_block(std::span<const BlockId> table, std::span<const BlockHash> hashes,
                     std::span<const int32_t> tokens, size_t i);
  // Hashes every full block at the front of the tail whose tokens are all known and accepted.
  void hash_settled_blocks(Sequence& s);

  // The prompt's full-block hashes, computed once per prompt: can_allocate and the allocate
  // that follows it share them through this one-entry memo (checked by content, not address).
  const std::vector<BlockHash>& prompt_hashes(std::span<const int32_t> tokens,
                                              std::string_view cache_salt) const;
  // Cached blocks matching the prompt's prefix, at most (size - 1) / block_size of them.
  std::vector<BlockId> find_cached_prefix(std::span<const int32_t> tokens,
                                          std::string_view cache_salt) const;
  // Blocks the prompt takes from the free queue, hits on cached-free blocks included.
  int num_blocks_to_take(int64_t num_tokens, std::span<const BlockId> hits) const;
  int num_blocks_for(int64_t num_tokens) const;

  Sequence& device_sequence(SeqId seq, const char* op);
  const Sequence& sequence(SeqId seq, const char* op) const;
  void release_device(BlockId id);
  void release_cpu(BlockId id);
  void unlink_twin_of_device(BlockId id);
  void link_twins(BlockId device_block, BlockId cpu_block);
  int num_cpu_blocks_to_take(const Sequence& s) const;
  int num_device_blocks_to_take(const Sequence& s) const;
  std::string check_sequences() const;

  int block_size_;
  int watermark_blocks_;
  bool enable_prefix_caching_;
  int sliding_window_;
  BlockPool device_;
  BlockPool cpu_;
  std::unordered_map<SeqId, Sequence> seqs_;
  // Swap twins: a device block and a CPU block known to hold the same K/V (one was copied from
  // the other and neither has changed or been freed since). They let a block shared by several
  // sequences cross the PCIe bus once, whichever sharer swaps first.
  std::vector<BlockId> cpu_twin_of_device_;
  std::vector<BlockId> device_twin_of_cpu_;
  int64_t prefix_queries_tokens_ = 0;
  int64_t prefix_hits_tokens_ = 0;
  KvEventRecorder* events_ = nullptr;  // not owned; null: no events

  struct PromptHashMemo {
    std::vector<int32_t> tokens;  // the full-block part of the prompt
    std::string cache_salt;
    std::vector<BlockHash> hashes;
  };
  mutable PromptHashMemo memo_;
};

}  // namespace pagedserve::cache
