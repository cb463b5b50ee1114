// TokenizerActor: prompt validation and encoding on the way in, incremental detokenization
// and delivery to the client's stream on the way out.
#include "actors/tokenizer_actor.h"

#include <chrono>
#include <exception>
#include <utility>

namespace pagedserve::actors {

TokenizerActor::TokenizerActor(std::shared_ptr<const model::Tokenizer> tokenizer,
                               TokenizerActorLimits limits,
                               std::shared_ptr<runtime::RequestRegistry> registry,
                               runtime::Channel<runtime::EncodeRequest>& encode_inbox,
                               runtime::Channel<runtime::DecodeBatch>& decode_inbox,
                               runtime::Channel<runtime::SchedulerMessage>& scheduler_inbox,
                               runtime::StatsBoard& stats, const FaultHooks* faults)
    : tokenizer_(std::move(tokenizer)),
      limits_(limits),
      registry_(std::move(registry)),
      encode_inbox_(encode_inbox),
      decode_inbox_(decode_inbox),
      scheduler_inbox_(scheduler_inbox),
      stats_(stats),
      faults_(faults) {}

runtime::Task<void> TokenizerActor::encode_loop() {
  for (;;) {
    auto [error, request] = co_await encode_inbox_.async_receive(runtime::kAwaitTuple);
    if (error) break;
    co_await on_encode(std::move(request));
  }
}

runtime::Task<void> TokenizerActor::decode_loop() {
  for (;;) {
    auto [error, batch] = co_await decode_inbox_.async_receive(runtime::kAwaitTuple);
    if (error) break;
    const auto start = std::chrono::steady_clock::now();
    on_decode(std::move(batch));
    stats_.add_stage(
        runtime::StatsBoard::Stage::kDetokenize,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

std::string TokenizerActor::validate(const std::vector<int32_t>& prompt_ids,
                                     const model::SamplingParams& sampling) const {
  return check_request(prompt_ids, sampling, limits_.config, limits_.vocab_size);
}

void TokenizerActor::end(runtime::StreamState& stream, TokenEvent event) {
  const uint64_t id = stream.request_id();
  event.finished = true;
  stream.push(std::move(event));
  live_.erase(id);
  registry_->finish(id);
}

runtime::Task<void> TokenizerActor::on_encode(runtime::EncodeRequest request) {
  std::shared_ptr<runtime::StreamState> stream = std::move(request.stream);
  const uint64_t id = request.request_id;
  TokenEvent final_event;
  final_event.request_id = id;
  if (stream->cancel_token().stop_requested()) {
    final_event.finish_reason = "abort";
    end(*stream, std::move(final_event));
    co_return;
  }

  std::vector<int32_t> prompt_ids = std::move(request.prompt_token_ids);
  std::string problem;
  try {
    call_fault_hook(faults_, &FaultHooks::before_encode, id);
    // An empty prompt would still encode to BOS; refuse it as LlmEngine refuses no tokens.
    if (prompt_ids.empty() && !request.prompt.empty()) {
      prompt_ids = tokenizer_->encode(request.prompt, true);
    }
    problem = validate(prompt_ids, request.sampling);
  } catch (const std::exception& e) {
    problem = std::string("the prompt could not be encoded: ") + e.what();
  }
  if (!problem.empty()) {
    final_event.finish_reason = "error";
    final_event.error = std::move(problem);
    final_event.num_prompt_tokens = static_cast<int>(prompt_ids.size());
    end(*stream, std::move(final_event));
    co_return;
  }

  const int num_prompt_tokens = static_cast<int>(prompt_ids.size());
  live_.emplace(id, LiveRequest{stream, prompt_ids, request.sampling, {}, {}});
  runtime::AddRequest add;
  add.request_id = id;
  add.prompt_token_ids = std::move(prompt_ids);
  add.sampling = std::move(request.sampling);
  add.cancel = stream->cancel_token();
  // May wait while the scheduler's inbox is full: that is the backpressure on arrivals.
  bool sent = false;
  if (!fault_fails_send(faults_, ChannelSend::kAddRequest)) {
    auto [error] = co_await scheduler_inbox_.async_send(boost::system::error_code{},
                                                        runtime::SchedulerMessage(std::move(add)),
                                                        runtime::kAwaitTuple);
    sent = !error;
  }
  if (!sent) {
    final_event.finish_reason = "error";
    final_event.error = "the engine is shutting down";
    final_event.num_prompt_tokens = num_prompt_tokens;
    end(*stream, std::move(final_event));
  }
}

namespace {

// One candidate as the client sees it: the token decoded on its own (as vLLM's
// convert_ids_list_to_tokens, no cleanup) and its raw bytes.
TokenLogprobInfo describe_logprob(const model::Tokenizer& tokenizer, model::TokenLogprob entry) {
  TokenLogprobInfo info;
  info.token_id = entry.token_id;
  info.logprob = entry.logprob;
  const int32_t ids[1] = {entry.token_id};
  info.token = tokenizer.decode(ids, /*skip_special_tokens=*/false, /*cleanup=*/false);
  info.bytes = tokenizer.token_bytes(entry.token_id);
  return info;
}

// Outputs a client sees streamed: every sequence when sampling (best_of of them), the n
// final beams for beam search.
int num_streamed_outputs(const model::SamplingParams& sampling) {
  return sampling.use_beam_search ? sampling.n : sampling.num_sequences();
}

}  // namespace

SequenceText& TokenizerActor::output(LiveRequest& live, int index) const {
  std::unique_ptr<SequenceText>& text = live.outputs[index];
  if (!text) text = std::make_unique<SequenceText>(*tokenizer_, live.prompt_ids, live.sampling);
  return *text;
}

TokenEvent TokenizerActor::make_event(LiveRequest& live, runtime::OutputDelta& delta) const {
  TokenEvent event;
  event.request_id = delta.request_id;
  event.index = delta.index;
  event.num_prompt_tokens = static_cast<int>(live.prompt_ids.size());
  event.num_cached_tokens = delta.num_cached_tokens;
  event.num_proposed_tokens = delta.num_proposed_tokens;
  event.num_accepted_tokens = delta.num_accepted_tokens;
  if (live.ended.count(delta.index)) return event;  // tokens that raced with a stop string
  call_fault_hook(faults_, &FaultHooks::before_detokenize, delta.request_id,
                  std::span<const int32_t>(delta.token_ids));
  SequenceText& text = output(live, delta.index);
  const int before = text.num_tokens();
  text.push(delta.token_ids);
  // Several tokens in one step (speculative decoding): none after the stop string's.
  const size_t consumed = static_cast<size_t>(text.num_tokens() - before);
  if (text.stopped() && consumed < delta.token_ids.size()) {
    delta.token_ids.resize(consumed);
    if (delta.logprobs.size() > consumed) delta.logprobs.resize(consumed);
  }
  const bool sequence_over = !delta.sequence_finish_reason.empty();
  if (sequence_over) text.finish();
  event.text = text.take_delta(sequence_over || text.stopped());
  event.token_ids = std::move(delta.token_ids);
  for (const model::SampleLogprobs& entry : delta.logprobs) {
    TokenLogprobs& out = event.logprobs.emplace_back();
    out.sampled = describe_logprob(*tokenizer_, entry.sampled);
    for (const model::TokenLogprob& candidate : entry.top) {
      out.top.push_back(describe_logprob(*tokenizer_, candidate));
    }
  }
  if (sequence_over || text.stopped()) {
    event.sequence_finished = true;
    event.finish_reason = text.stopped() ? "stop" : delta.sequence_finish_reason;
    live.ended.insert(delta.index);
  }
  return event;
}

std::vector<TokenEvent> TokenizerActor::end_outputs(LiveRequest& live,
                                                    const runtime::OutputDelta& end) const {
  std::vector<TokenEvent> events;
  const int num_outputs = num_streamed_outputs(live.sampling);
  for (int index = 0; index < num_outputs; ++index) {
    if (live.ended.count(index)) continue;
    SequenceText& text = output(live, index);
    text.finish();
    TokenEvent event;
    event.request_id = end.request_id;
    event.index = index;
    event.num_prompt_tokens = static_cast<int>(live.prompt_ids.size());
    event.num_cached_tokens = end.num_cached_tokens;
    event.num_proposed_tokens = end.num_proposed_tokens;
    event.num_accepted_tokens = end.num_accepted_tokens;
    event.text = text.take_delta(true);
    event.sequence_finished = true;
    event.finish_reason = text.stopped() ? "stop" : end.finish_reason;
    event.error = end.error;
    live.ended.insert(index);
    events.push_back(std::move(event));
  }
  return events;
}

void TokenizerActor::on_decode(runtime::DecodeBatch batch) {
  for (runtime::OutputDelta& delta : batch.deltas) {
    auto it = live_.find(delta.request_id);
    if (it == live_.end()) continue;  // ended early (a stop string or a detokenization error)
    LiveRequest& live = it->second;
    std::vector<TokenEvent> events;
    try {
      if (!delta.token_ids.empty() || !delta.sequence_finish_reason.empty()) {
        TokenEvent event = make_event(live, delta);
        if (!event.token_ids.empty() || event.sequence_finished) events.push_back(std::move(event));
      }
      const bool all_stopped =
          static_cast<int>(live.ended.size()) >= num_streamed_outputs(live.sampling);
      if (delta.finished || all_stopped) {
        if (!delta.finished) {
          // Every output hit a stop string: the scheduler need not run the request any more.
          registry_->abort(delta.request_id);
          delta.finish_reason = "stop";
        }
        for (TokenEvent& event : end_outputs(live, delta)) events.push_back(std::move(event));
        if (events.empty()) events.push_back(TokenEvent{});
        TokenEvent& last = events.back();
        last.request_id = delta.request_id;
        last.finished = true;
        if (last.finish_reason.empty()) last.finish_reason = delta.finish_reason;
        if (delta.finish_reason == "error" || delta.finish_reason == "abort") {
          last.finish_reason = delta.finish_reason;
          last.error = delta.error;
        }
      }
    } catch (const std::exception& e) {
      // Stop the request too; the abort's delta will find no live request.
      registry_->abort(delta.request_id);
      events.clear();
      events.push_back(runtime::error_event(delta.request_id,
                                            std::string("detokenization failed: ") + e.what()));
      events.back().finished = true;
    }
    std::shared_ptr<runtime::StreamState> stream = live.stream;  // `live` dies in end()
    for (TokenEvent& event : events) {
      if (event.finished) {
        end(*stream, std::move(event));
        break;
      }
      stream->push(std::move(event));
    }
  }
  if (batch.delivered) batch.delivered->set_value();
}

}  // namespace pagedserve::actors
