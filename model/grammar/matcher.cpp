// TokenVocabulary (sorting ids by bytes), CompiledGrammar, and GrammarMatcher: advancing one
// sequence's automaton state on bytes and tokens. Masks: token_mask.cpp.
#include <algorithm>
#include <cassert>
#include <numeric>

#include "model/grammar/matcher_impl.h"

namespace pagedserve::model::grammar {

namespace {

// The trie of `ids` (sorted here by their bytes).
std::unique_ptr<TokenVocabulary::Trie> build_trie(const std::vector<std::string>& bytes,
                                                  std::vector<int32_t> ids) {
  auto trie = std::make_unique<TokenVocabulary::Trie>();
  trie->ids = std::move(ids);
  std::sort(trie->ids.begin(), trie->ids.end(),
            [&](int32_t a, int32_t b) { return bytes[a] < bytes[b]; });
  trie->offsets.push_back(0);
  const std::string* prev = nullptr;
  for (int32_t id : trie->ids) {
    const std::string& s = bytes[id];
    trie->data += s;
    trie->offsets.push_back(static_cast<uint32_t>(trie->data.size()));
    uint32_t common = 0;
    if (prev) {
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    }
    trie->lcp.push_back(common);
    trie->max_length = std::max(trie->max_length, s.size());
    prev = &s;
  }
  return trie;
}

}  // namespace

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes,
                                 std::vector<int32_t> end_token_ids)
    : bytes_(std::move(token_bytes)), end_ids_(std::move(end_token_ids)) {
  std::sort(end_ids_.begin(), end_ids_.end());
  end_ids_.erase(std::unique(end_ids_.begin(), end_ids_.end()), end_ids_.end());
  std::vector<int32_t> ids, rest_ids;
  std::vector<uint32_t> content(bitmask_words(bytes_.size()), 0);
  bool has_content = false;
  for (int32_t id = 0; id < static_cast<int32_t>(bytes_.size()); ++id) {
    if (bytes_[id].empty() || is_end_token(id)) continue;
    ids.push_back(id);
    if (detail::is_string_content(bytes_[id])) {
      content[id >> 5] |= uint32_t{1} << (id & 31);
      has_content = true;
    } else {
      rest_ids.push_back(id);
    }
  }
  trie_ = build_trie(bytes_, std::move(ids));
  trie_->rest = build_trie(bytes_, std::move(rest_ids));
  trie_->content = std::move(content);
  trie_->has_content = has_content;
  for (int32_t id : end_ids_)
    if (id >= 0 && static_cast<size_t>(id) < bytes_.size()) trie_->end_ids.push_back(id);
}

TokenVocabulary::~TokenVocabulary() = default;
size_t TokenVocabulary::size() const { return bytes_.size(); }
const std::string& TokenVocabulary::bytes(int32_t id) const { return bytes_.at(id); }
bool TokenVocabulary::is_end_token(int32_t id) const {
  return std::binary_search(end_ids_.begin(), end_ids_.end(), id);
}

// ---- CompiledGrammar ----

CompiledGrammar::CompiledGrammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGrammar::~CompiledGrammar() = default;
const Grammar& CompiledGrammar::grammar() const { return *impl_->grammar; }
const TokenVocabulary& CompiledGrammar::vocabulary() const { return *impl_->vocab; }

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(
    std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocab) {
  auto impl = std::make_unique<Impl>();
  detail::PushdownArena arena(*grammar);
  arena.set_interning(true);
  std::vector<uint32_t> heads;
  arena.start(heads);
  impl->start = arena.extract(heads, 0, heads.size());
  impl->min_rest = detail::min_completion_table(*grammar);
  impl->grammar = std::move(grammar);
  impl->vocab = std::move(vocab);
  return std::shared_ptr<const CompiledGrammar>(new CompiledGrammar(std::move(impl)));
}

PrewarmStats CompiledGrammar::prewarm(const PrewarmLimits& limits) const {
  std::lock_guard lock(impl_->prewarm_mutex);
  if (!impl_->prewarmed) impl_->prewarmed = detail::prewarm_masks(*impl_, limits);
  return *impl_->prewarmed;
}

size_t CompiledGrammar::cached_masks() const { return impl_->cache.size(); }

// ---- GrammarMatcher ----

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> compiled)
    : compiled_(std::move(compiled)), state_(std::make_unique<State>()) {
  state_->stacks = compiled_->impl().start;
}

GrammarMatcher::GrammarMatcher(const GrammarMatcher& other)
    : compiled_(other.compiled_), state_(std::make_unique<State>(*other.state_)) {}

GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& other) {
  if (this != &other) {
    compiled_ = other.compiled_;
    state_ = std::make_unique<State>(*other.state_);
  }
  return *this;
}

GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;
GrammarMatcher::~GrammarMatcher() = default;

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (state_->terminated) return bytes.empty();
  if (bytes.empty()) return true;
  thread_local detail::PushdownArena arena;  // keeps its memory between calls
  thread_local std::vector<uint32_t> heads;
  arena.rebind(compiled_->grammar());
  arena.set_interning(true);
  heads.clear();
  arena.load(state_->stacks, heads);
  size_t begin = 0;
  for (char c : bytes) {
    const size_t end = heads.size();
    arena.advance(heads, begin, end, static_cast<uint8_t>(c));
    if (heads.size() == end) return false;
    begin = end;
  }
  state_->stacks = arena.extract(heads, begin, heads.size());
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  const TokenVocabulary& vocab = compiled_->vocabulary();
  if (state_->terminated || id < 0 || static_cast<size_t>(id) >= vocab.size()) return false;
  if (vocab.is_end_token(id)) {
    if (!can_end()) return false;
    state_->terminated = true;
  } else {
    const std::string& bytes = vocab.bytes(id);
    if (bytes.empty() || !accept_bytes(bytes)) return false;
  }
  ++state_->num_tokens;
  return true;
}

bool GrammarMatcher::can_end() const {
  // Stacks are sorted: an empty (completed) one comes first.
  return !state_->stacks.empty() && state_->stacks.front().empty();
}

bool GrammarMatcher::is_terminated() const { return state_->terminated; }

bool GrammarMatcher::must_end() const { return can_end() && state_->stacks.size() == 1; }

size_t GrammarMatcher::num_tokens_accepted() const { return state_->num_tokens; }

void GrammarMatcher::fill_next_token_bitmask(std::span<uint32_t> bitmask) const {
  fill_next_token_bitmask(bitmask, SIZE_MAX);
}

void GrammarMatcher::fill_next_token_bitmask(std::span<uint32_t> bitmask,
                                             size_t max_bytes_after) const {
  const CompiledGrammar::Impl& impl = compiled_->impl();
  assert(bitmask.size() >= bitmask_words(impl.vocab->size()));
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  if (state_->terminated) return;
  const MaskCache::Key key = detail::state_key(state_->stacks);
  uint32_t max_cost = 0;
  if (!impl.cache.lookup(key, bitmask, &max_cost)) {
    detail::compute_mask(impl, state_->stacks, bitmask, detail::kNoBudget, &max_cost);
    impl.cache.insert(key, bitmask, max_cost);
  }
  if (max_bytes_after >= max_cost) return;  // no allowed token breaks the budget
  // The tail of a budget: only tokens that leave a completion short enough (not cached: the
  // budget changes every step). None at all (the budget is already too small): the plain mask.
  thread_local std::vector<uint32_t> budgeted;
  budgeted.assign(bitmask.size(), 0u);
  detail::compute_mask(
      impl, state_->stacks, budgeted,
      static_cast<uint32_t>(std::min<size_t>(max_bytes_after, detail::kNoBudget - 2)));
  if (std::any_of(budgeted.begin(), budgeted.end(), [](uint32_t w) { return w != 0; })) {
    std::copy(budgeted.begin(), budgeted.end(), bitmask.begin());
  }
}

size_t GrammarMatcher::min_completion_bytes() const {
  if (state_->terminated) return 0;
  uint32_t best = detail::kNoBudget;
  for (const std::vector<uint32_t>& stack : state_->stacks) {
    best = std::min(best, detail::stack_cost(stack, compiled_->impl().min_rest));
  }
  return best;
}

}  // namespace pagedserve::model::grammar
