// OutputProcessor: incremental detokenization, stop strings and final texts.
#include "actors/output_processor.h"

#include <algorithm>

namespace pagedserve::actors {
namespace {

size_t longest_stop(const model::SamplingParams& sampling) {
  size_t longest = 0;
  for (const std::string& stop : sampling.stop) longest = std::max(longest, stop.size());
  return longest;
}

// Moves `cut` back to the start of a UTF-8 character so a delta never ends mid-character.
size_t utf8_boundary(const std::string& text, size_t cut) {
  while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return cut;
}

}  // namespace

void OutputProcessor::add_request(uint64_t request_id, std::span<const int32_t> prompt_token_ids,
                                  const model::SamplingParams& sampling) {
  Request request;
  request.prompt_token_ids.assign(prompt_token_ids.begin(), prompt_token_ids.end());
  request.sampling = sampling;
  requests_[request_id] = std::move(request);
}

// Looks for the earliest stop string that ends in text[search_from..]; on a match cuts the
// text before it and marks the sequence stopped.
bool OutputProcessor::find_stop_string(const Request& request, SequenceText& seq,
                                       size_t search_from) const {
  if (request.sampling.stop.empty() || seq.num_tokens <= request.sampling.min_tokens) return false;
  const size_t longest = longest_stop(request.sampling);
  const size_t from = search_from >= longest ? search_from - longest + 1 : 0;
  size_t best = std::string::npos;
  for (const std::string& stop : request.sampling.stop) {
    best = std::min(best, seq.text.find(stop, from));
  }
  if (best == std::string::npos) return false;
  seq.text.resize(best);
  seq.stopped = FinishReason::kStop;
  return true;
}

SequenceOutput OutputProcessor::process_sequence(uint64_t request_id, Request& request,
                                                 const SequenceUpdate& update,
                                                 std::vector<SequenceStop>& stops) {
  SequenceText& seq = request.seqs[update.index];
  if (!seq.decoder) {
    seq.decoder =
        std::make_unique<model::IncrementalDecoder>(*tokenizer_, request.prompt_token_ids);
  }
  SequenceOutput out;
  out.index = update.index;
  out.finish_reason = update.finish_reason;
  if (seq.stopped != FinishReason::kNone) return out;  // a step that raced with the stop

  out.new_token_ids = update.new_token_ids;
  for (int32_t token : update.new_token_ids) {
    const size_t before = seq.text.size();
    seq.text += seq.decoder->push(token);
    ++seq.num_tokens;
    if (find_stop_string(request, seq, before)) break;
  }
  if (seq.stopped == FinishReason::kNone && update.finished()) {
    const size_t before = seq.text.size();
    seq.text += seq.decoder->flush();
    find_stop_string(request, seq, before);
  }
  if (seq.stopped != FinishReason::kNone) {
    // A sequence the scheduler already ended (e.g. by length) needs no stop call.
    if (!update.finished()) stops.push_back({request_id, update.index});
    out.finish_reason = FinishReason::kStop;
  }
  size_t cut = seq.text.size();
  if (out.finish_reason == FinishReason::kNone) {
    const size_t hold = std::max<size_t>(longest_stop(request.sampling), 1) - 1;
    cut = utf8_boundary(seq.text, cut >= hold ? cut - hold : 0);
  }
  if (cut > seq.num_sent) {
    out.text_delta = seq.text.substr(seq.num_sent, cut - seq.num_sent);
    seq.num_sent = cut;
  }
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
    out.text = seq->second.text;
    if (seq->second.stopped != FinishReason::kNone) out.finish_reason = seq->second.stopped;
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
      if (auto final_update = scheduler.stop_sequence(stop.request_id, stop.index)) {
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
