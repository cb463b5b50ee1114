// OutputProcessor: incremental detokenization, stop strings and final texts.
#include "actors/output_processor.h"

#include <algorithm>

namespace pagedserve::actors {
void OutputProcessor::add_request(uint64_t request_id, std::span<const int32_t> prompt_token_ids,
                                  const model::SamplingParams& sampling) {
  Request request;
  request.prompt_token_ids.assign(prompt_token_ids.begin(), prompt_token_ids.end());
  request.sampling = sampling;
  requests_[request_id] = std::move(request);
}

SequenceOutput OutputProcessor::process_sequence(uint64_t request_id, Request& request,
                                                 const SequenceUpdate& update,
                                                 std::vector<SequenceStop>& stops) {
  std::unique_ptr<SequenceText>& seq = request.seqs[update.index];
  if (!seq) {
    seq = std::make_unique<SequenceText>(*tokenizer_, request.prompt_token_ids, request.sampling);
  }
  SequenceOutput out;
  out.index = update.index;
  out.finish_reason = update.finish_reason;
  if (seq->stopped()) return out;  // a step that raced with the stop

  out.new_token_ids = update.new_token_ids;
  out.logprobs = update.logprobs;
  const int before = seq->num_tokens();
  seq->push(update.new_token_ids);
  // Several tokens in one step (speculative decoding): none after the stop string's.
  const size_t consumed = static_cast<size_t>(seq->num_tokens() - before);
  if (seq->stopped() && consumed < out.new_token_ids.size()) {
    out.new_token_ids.resize(consumed);
    if (out.logprobs.size() > consumed) out.logprobs.resize(consumed);
  }
  if (update.finished()) seq->finish();
  if (seq->stopped()) {
    // A sequence the scheduler already ended (e.g. by length) needs no stop call.
    if (!update.finished()) stops.push_back({request_id, update.index, seq->num_tokens()});
    out.finish_reason = FinishReason::kStop;
  }
  out.text_delta = seq->take_delta(out.finish_reason != FinishReason::kNone);
  return out;
}

CompletionOutput OutputProcessor::completion(Request& request,
                                             const CompletedSequence& done) const {
  CompletionOutput out;
  out.index = done.index;
  out.token_ids = done.token_ids;
  out.cumulative_logprob = done.cumulative_logprob;
  out.finish_reason = done.finish_reason;
  auto seq = request.seqs.find(done.source_index);
  if (done.source_index >= 0 && seq != request.seqs.end()) {
    out.text = seq->second->text();
    if (seq->second->stopped()) {
      out.finish_reason = FinishReason::kStop;
      // The scheduler ended it in the same step, tokens after the stop string included.
      const size_t kept = static_cast<size_t>(seq->second->num_tokens());
      for (size_t i = kept; i < out.token_ids.size() && i < done.token_logprobs.size(); ++i) {
        out.cumulative_logprob -= done.token_logprobs[i];
      }
      if (out.token_ids.size() > kept) out.token_ids.resize(kept);
    }
    return out;
  }
  // Beam search (or a sequence that never produced a token): decode it whole, with the prompt
  // as context exactly as streaming would have.
  model::IncrementalDecoder decoder(*tokenizer_, request.prompt_token_ids);
  for (int32_t token : done.token_ids) out.text += decoder.push(token);
  out.text += decoder.flush();
  return out;
}

std::vector<RequestOutput> OutputProcessor::process(std::vector<RequestUpdate> updates,
                                                    std::vector<SequenceStop>& stops) {
  std::vector<RequestOutput> outputs;
  for (RequestUpdate& update : updates) {
    auto it = requests_.find(update.request_id);
    if (it == requests_.end()) {
      it = requests_.emplace(update.request_id, Request{}).first;  // added behind our back
    }
    Request& request = it->second;
    RequestOutput out;
    out.request_id = update.request_id;
    out.num_cached_tokens = update.num_cached_tokens;
    out.error = std::move(update.error);
    for (const SequenceUpdate& seq : update.seqs) {
      out.deltas.push_back(process_sequence(update.request_id, request, seq, stops));
    }
    if (update.finished) {
      out.finished = true;
      for (const CompletedSequence& done : update.outputs) {
        out.outputs.push_back(completion(request, done));
      }
      requests_.erase(it);
    }
    outputs.push_back(std::move(out));
  }
  return outputs;
}

std::vector<RequestOutput> process_step(Scheduler& scheduler, OutputProcessor& processor,
                                        std::vector<RequestUpdate> updates) {
  std::vector<SequenceStop> stops;
  std::vector<RequestOutput> outputs = processor.process(std::move(updates), stops);
  while (!stops.empty()) {
    std::vector<RequestUpdate> finals;
    for (const SequenceStop& stop : stops) {
      if (auto final_update =
              scheduler.stop_sequence(stop.request_id, stop.index, stop.num_tokens)) {
        finals.push_back(std::move(*final_update));
      }
    }
    stops.clear();
    for (RequestOutput& final_output : processor.process(std::move(finals), stops)) {
      auto same = std::find_if(outputs.begin(), outputs.end(), [&](const RequestOutput& o) {
        return o.request_id == final_output.request_id;
      });
      if (same == outputs.end()) {
        outputs.push_back(std::move(final_output));
        continue;
      }
      same->finished = true;
      same->outputs = std::move(final_output.outputs);
    }
  }
  return outputs;
}

}  // namespace pagedserve::actors
