// SequenceText: incremental detokenization with stop strings and hold-back.
#include "actors/sequence_text.h"

#include <algorithm>

namespace pagedserve::actors {
namespace {

// Moves `cut` back to the start of a UTF-8 character so a delta never ends mid-character.
size_t utf8_boundary(const std::string& text, size_t cut) {
  while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return cut;
}

}  // namespace

SequenceText::SequenceText(const model::Tokenizer& tokenizer,
                           std::span<const int32_t> prompt_token_ids,
                           const model::SamplingParams& sampling)
    : decoder_(tokenizer, prompt_token_ids), sampling_(&sampling) {
  for (const std::string& stop : sampling.stop)
    longest_stop_ = std::max(longest_stop_, stop.size());
}

// Looks for the earliest stop string that ends in text_[search_from..]; on a match cuts the
// text before it. Stop strings count only once min_tokens tokens exist (as EOS does).
bool SequenceText::find_stop_string(size_t search_from) {
  if (sampling_->stop.empty() || num_tokens_ <= sampling_->min_tokens) return false;
  const size_t from = search_from >= longest_stop_ ? search_from - longest_stop_ + 1 : 0;
  size_t best = std::string::npos;
  for (const std::string& stop : sampling_->stop) best = std::min(best, text_.find(stop, from));
  if (best == std::string::npos) return false;
  text_.resize(best);
  num_sent_ = std::min(num_sent_, text_.size());
  stopped_ = true;
  return true;
}

bool SequenceText::push(std::span<const int32_t> tokens) {
  for (int32_t token : tokens) {
    if (stopped_ || finished_) break;
    const size_t before = text_.size();
    text_ += decoder_.push(token);
    ++num_tokens_;
    find_stop_string(before);
  }
  return stopped_;
}

bool SequenceText::finish() {
  if (!stopped_ && !finished_) {
    const size_t before = text_.size();
    text_ += decoder_.flush();
    find_stop_string(before);
  }
  finished_ = true;
  return stopped_;
}

std::string SequenceText::take_delta(bool all) {
  size_t cut = text_.size();
  if (!all && !stopped_ && !finished_) {
    const size_t hold = std::max<size_t>(longest_stop_, 1) - 1;
    cut = utf8_boundary(text_, cut >= hold ? cut - hold : 0);
  }
  if (cut <= num_sent_) return {};
  std::string delta = text_.substr(num_sent_, cut - num_sent_);
  num_sent_ = cut;
  return delta;
}

}  // namespace pagedserve::actors
