// GrammarCache: an LRU of compiled grammars (see grammar_cache.h).
#include "net/protocol/grammar_cache.h"

#include <utility>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace pagedserve::net {

std::shared_ptr<const model::grammar::TokenVocabulary> vocabulary_of(
    const model::Tokenizer& tokenizer, std::vector<int32_t> end_token_ids) {
  const int size = tokenizer.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(size));
  for (int32_t id = 0; id < size; ++id) {
    if (!tokenizer.is_special(id)) {
      bytes[static_cast<size_t>(id)] = tokenizer.token_bytes_after_text(id);
    }
  }
  return std::make_shared<const model::grammar::TokenVocabulary>(std::move(bytes),
                                                                 std::move(end_token_ids));
}

GrammarCache::GrammarCache(const model::Tokenizer& tokenizer, std::vector<int32_t> end_token_ids,
                           model::grammar::PrewarmLimits prewarm)
    : tokenizer_(tokenizer), end_token_ids_(std::move(end_token_ids)), prewarm_limits_(prewarm) {}

GrammarCache::~GrammarCache() {
  {
    std::lock_guard lock(prewarm_mu_);
    stopping_ = true;
  }
  prewarm_cv_.notify_all();
  if (prewarm_thread_.joinable()) prewarm_thread_.join();
}

void GrammarCache::enqueue_prewarm(std::weak_ptr<const model::grammar::CompiledGrammar> compiled) {
  if (prewarm_limits_.max_states == 0) return;
  {
    std::lock_guard lock(prewarm_mu_);
    prewarm_queue_.push_back(std::move(compiled));
    if (!prewarm_thread_.joinable()) prewarm_thread_ = std::thread([this] { prewarm_loop(); });
  }
  prewarm_cv_.notify_all();
}

void GrammarCache::prewarm_loop() {
#if defined(__linux__)
  // Below the serving threads: on a busy machine a prewarm takes what the steps leave (a step
  // that needs a mask first computes it itself, as without a prewarm). On Linux a thread id
  // given to setpriority names that thread alone.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
#endif
  model::grammar::PrewarmLimits limits = prewarm_limits_;
  limits.stop = &stopping_;
  std::unique_lock lock(prewarm_mu_);
  while (true) {
    prewarm_cv_.wait(lock, [&] { return stopping_ || !prewarm_queue_.empty(); });
    if (stopping_) return;
    std::shared_ptr<const model::grammar::CompiledGrammar> compiled = prewarm_queue_.front().lock();
    prewarm_queue_.pop_front();
    if (!compiled) continue;
    prewarm_busy_ = true;
    lock.unlock();
    compiled->prewarm(limits);
    compiled.reset();  // a grammar dropped from the cache meanwhile is freed here
    lock.lock();
    prewarm_busy_ = false;
    prewarm_cv_.notify_all();
  }
}

void GrammarCache::wait_for_prewarm() {
  std::unique_lock lock(prewarm_mu_);
  prewarm_cv_.wait(lock, [&] { return stopping_ || (prewarm_queue_.empty() && !prewarm_busy_); });
}

std::shared_ptr<const model::grammar::TokenVocabulary> GrammarCache::vocabulary() {
  std::lock_guard lock(mu_);
  if (!vocabulary_) vocabulary_ = vocabulary_of(tokenizer_, end_token_ids_);
  return vocabulary_;
}

std::shared_ptr<const model::grammar::CompiledGrammar> GrammarCache::get(const std::string& gbnf,
                                                                         const std::string& root) {
  const std::string text = root + "\n" + gbnf;  // the key
  {
    std::lock_guard lock(mu_);
    if (auto it = by_text_.find(text); it != by_text_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Parsed and compiled outside the lock: a large grammar must not stall other requests.
  auto compiled = model::grammar::CompiledGrammar::compile(model::grammar::parse_gbnf(gbnf, root),
                                                           vocabulary());
  std::lock_guard lock(mu_);
  if (auto it = by_text_.find(text); it != by_text_.end()) return it->second->second;
  lru_.emplace_front(text, compiled);
  by_text_[text] = lru_.begin();
  if (lru_.size() > kMaxGrammars) {
    by_text_.erase(lru_.back().first);
    lru_.pop_back();
  }
  enqueue_prewarm(compiled);
  return compiled;
}

}  // namespace pagedserve::net
