// The byte-level pushdown automaton over a Grammar (llama.cpp's design): a state is a set of
// stacks of positions; the top of each stack is a terminal (a byte set) or the stack is empty
// (the root is complete). Stacks live in an arena as linked nodes (position, parent), so that a
// step shares the unchanged rest of every stack; the arena only grows within one walk and is
// truncated as a depth-first walk backtracks. Not thread-safe: one per thread or matcher.
#pragma once

#include <cstdint>
#include <vector>

#include "model/grammar/grammar_ir.h"

namespace pagedserve::model::grammar::detail {

inline constexpr uint32_t kNoNode = UINT32_MAX;  // as a head: a completed (empty) stack

struct StackNode {
  uint32_t pos = 0;     // position in Grammar::elements: the top's terminal, or a return point
  uint32_t parent = 0;  // the node below, kNoNode at the bottom
};

// A state in canonical form: each stack bottom to top, sorted, no duplicates. Equal states
// have equal StackSets (the key of the mask cache).
using StackSet = std::vector<std::vector<uint32_t>>;

class PushdownArena {
 public:
  explicit PushdownArena(const Grammar& grammar) : g_(&grammar) {}

  // Appends the heads of the start state (the closure of the root's alternatives).
  void start(std::vector<uint32_t>& heads);
  // Appends the heads of `state`.
  void load(const StackSet& state, std::vector<uint32_t>& heads);
  // Appends to `heads` the heads reached from heads[begin, end) on `byte`, deduplicated.
  void advance(std::vector<uint32_t>& heads, size_t begin, size_t end, uint8_t byte);
  // The canonical form of the state heads[begin, end).
  StackSet extract(const std::vector<uint32_t>& heads, size_t begin, size_t end) const;

  size_t num_nodes() const { return nodes_.size(); }
  void truncate(size_t num_nodes) { nodes_.resize(num_nodes); }
  void clear() { nodes_.clear(); }

 private:
  uint32_t push(uint32_t pos, uint32_t parent) {
    nodes_.push_back({pos, parent});
    return static_cast<uint32_t>(nodes_.size() - 1);
  }
  void closure(uint32_t pos, uint32_t parent, std::vector<uint32_t>& heads);
  void dedupe(std::vector<uint32_t>& heads, size_t begin);

  const Grammar* g_;
  std::vector<StackNode> nodes_;
};

}  // namespace pagedserve::model::grammar::detail
