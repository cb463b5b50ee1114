// TokenizerActor: the text edge of the engine. Handles EncodeRequest (validate the request,
// encode the prompt, pass it to the scheduler) and DecodeBatch (turn each request's new
// tokens into text deltas with a SequenceText per output, which also finds stop strings, and
// push TokenEvents to its stream). A stop string found here ends its output at once; when it
// ends the request's last output, the request is aborted in the scheduler, as vLLM's
// detokenizer does, so its blocks are freed within a step.
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
#include <set>
#include <string>
#include <unordered_map>

#include "actors/engine_setup.h"
#include "actors/fault_hooks.h"
#include "actors/runtime/channel.h"
#include "actors/runtime/request_registry.h"
#include "actors/runtime/scheduler_messages.h"
#include "actors/runtime/stats_board.h"
#include "actors/runtime/tokenizer_messages.h"
#include "actors/sequence_text.h"
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
                 runtime::Channel<runtime::SchedulerMessage>& scheduler_inbox,
                 runtime::StatsBoard& stats, const FaultHooks* faults = nullptr);

  // The two run loops; spawn both on the tokenizer thread. Each ends when its inbox closes.
  runtime::Task<void> encode_loop();
  runtime::Task<void> decode_loop();

 private:
  struct LiveRequest {
    std::shared_ptr<runtime::StreamState> stream;
    std::vector<int32_t> prompt_ids;  // context for each output's decoder
    model::SamplingParams sampling;   // stop strings; SequenceText points at it
    std::map<int, std::unique_ptr<SequenceText>> outputs;  // by index, made on first use
    std::set<int> ended;  // outputs whose sequence_finished event was sent
  };

  runtime::Task<void> on_encode(runtime::EncodeRequest request);
  void on_decode(runtime::DecodeBatch batch);
  SequenceText& output(LiveRequest& live, int index) const;
  // The event for one delta of a live request.
  TokenEvent make_event(LiveRequest& live, runtime::OutputDelta& delta) const;
  // Events that end every output not ended yet, with `reason` (the request is over).
  std::vector<TokenEvent> end_outputs(LiveRequest& live, const runtime::OutputDelta& end) const;
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
  runtime::StatsBoard& stats_;          // detokenization time
  const FaultHooks* faults_ = nullptr;  // tests only
  std::unordered_map<uint64_t, LiveRequest> live_;
};

}  // namespace pagedserve::actors
