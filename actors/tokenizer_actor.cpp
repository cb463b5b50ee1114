// TokenizerActor: prompt validation and encoding on the way in, incremental detokenization
// and delivery to the client's stream on the way out.
#include "actors/tokenizer_actor.h"

#include <exception>
#include <utility>

namespace pagedserve::actors {

TokenizerActor::TokenizerActor(std::shared_ptr<const model::Tokenizer> tokenizer,
                               TokenizerActorLimits limits,
                               std::shared_ptr<runtime::RequestRegistry> registry,
                               runtime::Channel<runtime::EncodeRequest>& encode_inbox,
                               runtime::Channel<runtime::DecodeBatch>& decode_inbox,
                               runtime::Channel<runtime::SchedulerMessage>& scheduler_inbox)
    : tokenizer_(std::move(tokenizer)),
      limits_(limits),
      registry_(std::move(registry)),
      encode_inbox_(encode_inbox),
      decode_inbox_(decode_inbox),
      scheduler_inbox_(scheduler_inbox) {}

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
    on_decode(std::move(batch));
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
  live_.emplace(id, LiveRequest{stream, prompt_ids, {}});
  runtime::AddRequest add;
  add.request_id = id;
  add.prompt_token_ids = std::move(prompt_ids);
  add.sampling = std::move(request.sampling);
  add.cancel = stream->cancel_token();
  // May wait while the scheduler's inbox is full: that is the backpressure on arrivals.
  auto [error] = co_await scheduler_inbox_.async_send(
      boost::system::error_code{}, runtime::SchedulerMessage(std::move(add)), runtime::kAwaitTuple);
  if (error) {
    final_event.finish_reason = "error";
    final_event.error = "the engine is shutting down";
    final_event.num_prompt_tokens = num_prompt_tokens;
    end(*stream, std::move(final_event));
  }
}

TokenEvent TokenizerActor::make_event(LiveRequest& live, runtime::OutputDelta& delta) const {
  TokenEvent event;
  event.request_id = delta.request_id;
  event.index = delta.index;
  event.num_prompt_tokens = static_cast<int>(live.prompt_ids.size());
  event.num_cached_tokens = delta.num_cached_tokens;
  if (!delta.token_ids.empty()) {
    auto it = live.decoders.find(delta.index);
    if (it == live.decoders.end()) {
      it = live.decoders
               .emplace(delta.index, model::IncrementalDecoder(*tokenizer_, live.prompt_ids))
               .first;
    }
    for (int32_t id : delta.token_ids) event.text += it->second.push(id);
    event.token_ids = std::move(delta.token_ids);
  }
  if (delta.finished) {
    // Text held back for a partial character ends with the stream (n > 1: all outputs').
    for (auto& [index, decoder] : live.decoders) event.text += decoder.flush();
    event.finished = true;
    event.finish_reason = std::move(delta.finish_reason);
    event.error = std::move(delta.error);
  }
  return event;
}

void TokenizerActor::on_decode(runtime::DecodeBatch batch) {
  for (runtime::OutputDelta& delta : batch.deltas) {
    auto it = live_.find(delta.request_id);
    if (it == live_.end()) continue;  // ended early (a detokenization error)
    LiveRequest& live = it->second;
    TokenEvent event;
    try {
      event = make_event(live, delta);
    } catch (const std::exception& e) {
      // Stop the request too; the abort's delta will find no live request.
      registry_->abort(delta.request_id);
      event =
          runtime::error_event(delta.request_id, std::string("detokenization failed: ") + e.what());
    }
    if (!event.finished) {
      live.stream->push(std::move(event));
      continue;
    }
    std::shared_ptr<runtime::StreamState> stream = live.stream;  // `live` dies in end()
    end(*stream, std::move(event));
  }
  if (batch.delivered) batch.delivered->set_value();
}

}  // namespace pagedserve::actors
