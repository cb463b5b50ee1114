// OutputProcessor: turns the scheduler's RequestUpdates into what a client sees (RequestOutput):
// each sequence's text, decoded incrementally (model::IncrementalDecoder), stop strings found
// in that text, and the final outputs with their texts. Pure: no I/O, no threads; owned by one
// thread (the engine loop now, later whichever actor detokenizes). Stop strings end sequences
// here, so the caller hands the SequenceStops back to Scheduler::stop_sequence; process_step()
// does that round trip for the synchronous engine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actors/scheduler.h"
#include "actors/sequence_text.h"
#include "model/sampling_params.h"
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::actors {

// One sequence's news in one step.
struct SequenceOutput {
  int index = 0;                                // the sequence's index in its request
  std::vector<int32_t> new_token_ids;           // tokens sampled this step
  std::vector<model::SampleLogprobs> logprobs;  // parallel to new_token_ids, when asked for
  // Text that became final this step. Text that could still turn out to start a stop string is
  // held back until it cannot; a matched stop string and anything after it are never sent.
  std::string text_delta;
  FinishReason finish_reason = FinishReason::kNone;  // set in the step it finishes
};

// One returned completion of a finished request.
struct CompletionOutput {
  int index = 0;                   // 0 .. n-1, the OpenAI `choices[].index`
  std::vector<int32_t> token_ids;  // every generated token, the stop-string one included
  std::string text;                // their text, cut before a matched stop string
  double cumulative_logprob = 0.0;
  FinishReason finish_reason = FinishReason::kNone;
};

// What one step did to one request, as a client sees it.
struct RequestOutput {
  uint64_t request_id = 0;
  // Per-sequence news (sampling requests; beam search reports only its final outputs). With
  // best_of > n the indexes run over all best_of sequences, not only those returned.
  std::vector<SequenceOutput> deltas;
  bool finished = false;                  // the request is done and `outputs` is set
  std::vector<CompletionOutput> outputs;  // when finished: the n completions
  int num_cached_tokens = 0;              // prompt tokens the prefix cache served
  std::string error;                      // set when the request failed
};

// A sequence whose text reached a stop string: the scheduler must end it.
struct SequenceStop {
  uint64_t request_id = 0;
  int index = 0;
  // Tokens the sequence keeps: a step that verified speculative proposals may have appended
  // tokens after the one that completed the stop string; they are dropped. -1: all.
  int num_tokens = -1;
};

class OutputProcessor {
 public:
  // Keeps a pointer: the tokenizer must outlive the processor.
  explicit OutputProcessor(const model::Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  void add_request(uint64_t request_id, std::span<const int32_t> prompt_token_ids,
                   const model::SamplingParams& sampling);
  // Appends to `stops` the sequences that matched a stop string in this call.
  std::vector<RequestOutput> process(std::vector<RequestUpdate> updates,
                                     std::vector<SequenceStop>& stops);
  size_t num_requests() const { return requests_.size(); }

 private:
  struct Request {
    std::vector<int32_t> prompt_token_ids;
    model::SamplingParams sampling;
    std::map<int, std::unique_ptr<SequenceText>> seqs;  // by sequence index, on first token
  };

  SequenceOutput process_sequence(uint64_t request_id, Request& request,
                                  const SequenceUpdate& update, std::vector<SequenceStop>& stops);
  CompletionOutput completion(Request& request, const CompletedSequence& done) const;

  const model::Tokenizer* tokenizer_;
  std::map<uint64_t, Request> requests_;
};

// The bookkeeping after one Scheduler::update: processes the updates and ends the sequences
// that matched a stop string, folding any request this finishes into the outputs.
std::vector<RequestOutput> process_step(Scheduler& scheduler, OutputProcessor& processor,
                                        std::vector<RequestUpdate> updates);

}  // namespace pagedserve::actors
