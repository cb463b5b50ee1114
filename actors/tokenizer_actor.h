// TokenizerActor: the text edge of the engine. Handles EncodeRequest (validate the request,
// encode the prompt, pass it to the scheduler) and DecodeBatch (turn each request's new
// tokens into text deltas with model::IncrementalDecoder and push TokenEvents to its
// stream). Owns one IncrementalDecoder per live request.
//
// Lives on the tokenizer ActorThread, where its two loops (encode, decode) interleave at
// co_await. The decode loop never waits on the scheduler (pushing to a stream never blocks),
// which is what keeps the scheduler -> tokenizer -> scheduler cycle free of deadlock when
// both bounded inboxes are full: the encode loop may wait for the scheduler, the decode loop
// keeps draining.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "actors/engine_setup.h"
#include "actors/runtime/channel.h"
#include "actors/runtime/request_registry.h"
#include "actors/runtime/scheduler_messages.h"
#include "actors/runtime/tokenizer_messages.h"
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::actors {

struct TokenizerActorLimits {
  EngineConfig config;  // resolved (max_model_len, max_num_seqs): check_request's limits
  int vocab_size = 0;   // the model's: prompt ids must be below it
};

class TokenizerActor {
 public:
  TokenizerActor(std::shared_ptr<const model::Tokenizer> tokenizer, TokenizerActorLimits limits,
                 std::shared_ptr<runtime::RequestRegistry> registry,
                 runtime::Channel<runtime::EncodeRequest>& encode_inbox,
                 runtime::Channel<runtime::DecodeBatch>& decode_inbox,
                 runtime::Channel<runtime::SchedulerMessage>& scheduler_inbox);

  // The two run loops; spawn both on the tokenizer thread. Each ends when its inbox closes.
  runtime::Task<void> encode_loop();
  runtime::Task<void> decode_loop();

 private:
  struct LiveRequest {
    std::shared_ptr<runtime::StreamState> stream;
    std::vector<int32_t> prompt_ids;                    // context for each new decoder
    std::map<int, model::IncrementalDecoder> decoders;  // by output index, made on first use
  };

  runtime::Task<void> on_encode(runtime::EncodeRequest request);
  void on_decode(runtime::DecodeBatch batch);
  // The event for one delta of a live request; flushes every decoder when it is the last.
  TokenEvent make_event(LiveRequest& live, runtime::OutputDelta& delta) const;
  // "" when the request may run, else why not.
  std::string validate(const std::vector<int32_t>& prompt_ids,
                       const model::SamplingParams& sampling) const;
  // Pushes the final event and forgets the request.
  void end(runtime::StreamState& stream, TokenEvent event);

  std::shared_ptr<const model::Tokenizer> tokenizer_;
  TokenizerActorLimits limits_;
  std::shared_ptr<runtime::RequestRegistry> registry_;
  runtime::Channel<runtime::EncodeRequest>& encode_inbox_;
  runtime::Channel<runtime::DecodeBatch>& decode_inbox_;
  runtime::Channel<runtime::SchedulerMessage>& scheduler_inbox_;
  std::unordered_map<uint64_t, LiveRequest> live_;
};

}  // namespace pagedserve::actors
