// SequenceText: one output sequence's text as its tokens stream in. Decodes incrementally
// (model::IncrementalDecoder, the prompt as context), finds stop strings, and holds back the
// tail that could still turn out to start one, so a client never sees text that is later
// taken back. Pure; used by the OutputProcessor (synchronous engine) and the tokenizer actor.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "model/sampling_params.h"
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::actors {

class SequenceText {
 public:
  // Keeps pointers to the tokenizer and sampling params: both must outlive this object.
  SequenceText(const model::Tokenizer& tokenizer, std::span<const int32_t> prompt_token_ids,
               const model::SamplingParams& sampling);

  // Decodes `tokens`; returns true when a stop string matched (now or before). The text is
  // then cut before the stop string and later tokens are ignored.
  bool push(std::span<const int32_t> tokens);
  // The sequence ended: flushes a partial character (which may complete a stop string).
  bool finish();
  // Text that became final since the last call. With `all`, the held-back tail too (the
  // sequence is over).
  std::string take_delta(bool all);

  bool stopped() const { return stopped_; }
  const std::string& text() const { return text_; }
  int num_tokens() const { return num_tokens_; }

 private:
  bool find_stop_string(size_t search_from);

  model::IncrementalDecoder decoder_;
  const model::SamplingParams* sampling_;
  size_t longest_stop_ = 0;
  std::string text_;     // decoded so far, cut before a stop string once one matched
  size_t num_sent_ = 0;  // bytes of text_ already taken as deltas
  int num_tokens_ = 0;   // tokens decoded
  bool stopped_ = false;
  bool finished_ = false;
};

}  // namespace pagedserve::actors
