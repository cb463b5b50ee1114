// PushdownArena: closure, one-byte steps and canonical forms of the grammar's automaton.
#include "model/grammar/pushdown.h"

#include <algorithm>

namespace pagedserve::model::grammar::detail {

// Follows `pos` (with return stack `parent`) to the terminals it can match next: a kEnd pops to
// the return point, a rule reference pushes a return point and expands every alternative. A
// reference last in its alternative pushes nothing (tail call), so right recursion (x*) keeps
// the stacks flat. Terminates because the builder refused left recursion.
void PushdownArena::closure(uint32_t pos, uint32_t parent, std::vector<uint32_t>& heads) {
  const std::vector<Element>& el = g_->elements;
  for (;;) {
    const Element e = el[pos];
    if (e.kind == ElementKind::kBytes) {
      heads.push_back(push(pos, parent));
      return;
    }
    if (e.kind == ElementKind::kEnd) {
      if (parent == kNoNode) {
        heads.push_back(kNoNode);
        return;
      }
      const StackNode up = nodes_[parent];
      pos = up.pos;
      parent = up.parent;
      continue;
    }
    const uint32_t ret = el[pos + 1].kind == ElementKind::kEnd ? parent : push(pos + 1, parent);
    for (uint32_t alt : g_->rule_alternatives[e.index]) closure(alt, ret, heads);
    return;
  }
}

void PushdownArena::start(std::vector<uint32_t>& heads) {
  const size_t begin = heads.size();
  for (uint32_t alt : g_->rule_alternatives[g_->root]) closure(alt, kNoNode, heads);
  dedupe(heads, begin);
}

void PushdownArena::load(const StackSet& state, std::vector<uint32_t>& heads) {
  for (const std::vector<uint32_t>& stack : state) {
    uint32_t node = kNoNode;
    for (uint32_t pos : stack) node = push(pos, node);
    heads.push_back(node);
  }
}

void PushdownArena::advance(std::vector<uint32_t>& heads, size_t begin, size_t end, uint8_t byte) {
  const std::vector<Element>& el = g_->elements;
  const size_t out = heads.size();
  for (size_t i = begin; i < end; ++i) {
    const uint32_t h = heads[i];
    if (h == kNoNode) continue;
    const StackNode n = nodes_[h];
    if (!g_->byte_sets[el[n.pos].index].test(byte)) continue;
    if (el[n.pos + 1].kind == ElementKind::kBytes) {
      heads.push_back(push(n.pos + 1, n.parent));
    } else {
      closure(n.pos + 1, n.parent, heads);
    }
  }
  if (heads.size() - out > 1) dedupe(heads, out);
}

// Removes heads equal in (position, parent node); equal stacks with different parent nodes
// stay (extract merges them), which only costs time.
void PushdownArena::dedupe(std::vector<uint32_t>& heads, size_t begin) {
  const auto key = [this](uint32_t h) {
    return h == kNoNode ? uint64_t{0} : ((uint64_t{nodes_[h].pos} + 1) << 32) | nodes_[h].parent;
  };
  auto first = heads.begin() + static_cast<std::ptrdiff_t>(begin);
  std::sort(first, heads.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
  heads.erase(
      std::unique(first, heads.end(), [&](uint32_t a, uint32_t b) { return key(a) == key(b); }),
      heads.end());
}

StackSet PushdownArena::extract(const std::vector<uint32_t>& heads, size_t begin,
                                size_t end) const {
  StackSet out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) {
    std::vector<uint32_t> stack;
    for (uint32_t n = heads[i]; n != kNoNode; n = nodes_[n].parent) stack.push_back(nodes_[n].pos);
    std::reverse(stack.begin(), stack.end());
    out.push_back(std::move(stack));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace pagedserve::model::grammar::detail
