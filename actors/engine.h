// Engine: the in-process client API of the asynchronous engine, used by generate, the HTTP and
// WebSocket servers and the benchmarks. submit() a request, read its TokenEvents from the
// RequestStream it returns (blocking next(), or a callback run on the tokenizer actor's
// thread), abort() it or drop the stream. Behind it run the tokenizer, scheduler and executor
// actors (actors/*_actor.h), each on its own thread. No Boost in this header (pimpl): only
// engine.cpp and the actor/runtime sources see Asio.
//
// Thread safety: every public method may be called from any number of client threads.
// Errors come back as values: an invalid request, or one submitted after shutdown, gets one
// final TokenEvent with finish_reason "error" and the message in `error`; nothing throws
// across threads (only start() throws, in the calling thread, for a bad model or config).
// Backpressure: submit() blocks while EngineOptions::max_unfinished_requests requests have
// not yet received their final event; every channel between the actors is bounded too.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine_setup.h"  // EngineConfig
#include "cache/kv_snapshot.h"
#include "model/sampling_params.h"
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::actors {

struct FaultHooks;  // actors/fault_hooks.h: test-only fault injection
class KvEventPublisher;  // actors/kv_event_publisher.h

namespace runtime {
class StreamState;
class RequestRegistry;
class KvMapBoard;
}  // namespace runtime

struct GenerateRequest {
  std::string prompt;                     // encoded with the model's special tokens (BOS)
  std::vector<int32_t> prompt_token_ids;  // used instead of `prompt` when non-empty
  model::SamplingParams sampling;
};

// One candidate token's log-probability as a client sees it (SamplingParams::logprobs; raw
// logprobs, see model/sampler.h). `token` is the token decoded on its own, as vLLM reports it
// (valid UTF-8: a partial character decodes to U+FFFD); `bytes` the raw bytes it stands for.
struct TokenLogprobInfo {
  int32_t token_id = -1;
  float logprob = 0.0f;
  std::string token;
  std::string bytes;
};
// One generated token: its own logprob and the `logprobs` most likely candidates.
struct TokenLogprobs {
  TokenLogprobInfo sampled;
  std::vector<TokenLogprobInfo> top;  // best first
};

// One step of one request's output. Each output (index) ends with an event whose
// `sequence_finished` is true; the stream ends with exactly one event whose `finished` is true
// (for n == 1 both are set on the same event, which may also carry the last tokens).
struct TokenEvent {
  uint64_t request_id = 0;
  int index = 0;                   // which of the request's outputs (0 .. n-1)
  std::vector<int32_t> token_ids;  // the tokens this event adds (may be empty)
  // Only when the request set sampling.logprobs: one per token in token_ids.
  std::vector<TokenLogprobs> logprobs;
  std::string text;                // the text they complete (UTF-8; held back while it might
                                   // start a stop string or ends in a partial character)
  bool sequence_finished = false;  // output `index` is complete; finish_reason says why
  bool finished = false;           // the whole request is complete: the stream's last event
  std::string finish_reason;       // with sequence_finished or finished: "stop", "length", "abort"
                                   // or "error"
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;  // prompt tokens served by the prefix cache
  std::string error;          // set when finish_reason is "error"
  // Speculative decoding, over the request so far (0 when it is off): tokens proposed, and
  // of those accepted.
  int64_t num_proposed_tokens = 0;
  int64_t num_accepted_tokens = 0;
};

// Called on the tokenizer actor's thread, in order, once per event. It must not block (post
// the event to your own executor instead: a blocked callback stalls every request's output),
// must not call back into the same stream, and must not shut down or destroy the Engine.
using TokenCallback = std::function<void(TokenEvent)>;

// The client's handle on one request. Dropping it before the final event aborts the request.
class RequestStream {
 public:
  RequestStream(std::shared_ptr<runtime::StreamState> state,
                std::shared_ptr<runtime::RequestRegistry> registry);
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;
  ~RequestStream();

  uint64_t request_id() const;
  // Blocks for the next event; nullopt after the final one (and always in callback mode).
  std::optional<TokenEvent> next();
  // The next event if one is queued now, else nullopt.
  std::optional<TokenEvent> try_next();
  // True once the final event has been produced (it may still be queued).
  bool finished() const;
  // Asks the engine to stop the request; the stream then ends with finish_reason "abort"
  // (unless it finished first).
  void abort();

 private:
  std::shared_ptr<runtime::StreamState> state_;
  std::shared_ptr<runtime::RequestRegistry> registry_;
};

// An observer of the KV block map (Engine::watch_kv_map): while at least one is alive, the
// prefix-cache actor publishes a snapshot of the pools at most every 100 ms when they changed.
class KvMapWatch {
 public:
  explicit KvMapWatch(std::shared_ptr<runtime::KvMapBoard> board);
  KvMapWatch(const KvMapWatch&) = delete;
  KvMapWatch& operator=(const KvMapWatch&) = delete;
  ~KvMapWatch();

 private:
  std::shared_ptr<runtime::KvMapBoard> board_;
};

struct EngineOptions {
  // Overlap host work with the executor: the scheduler launches step N+1 as soon as step N's
  // results are applied, and detokenization, client delivery and arrivals run while the
  // executor computes. false: the scheduler waits until step N's tokens reached the clients
  // before it schedules step N+1 (the synchronous loop; for measuring the overlap).
  bool overlap = true;
  int max_unfinished_requests = 1024;                 // submit() blocks beyond this
  int channel_capacity = 64;                          // messages buffered between two actors
  std::chrono::milliseconds shutdown_timeout{10000};  // to end in-flight requests
  // Tests only: faults to inject at the actor seams (actors/fault_hooks.h). Null in every
  // program; ignored in Release builds.
  std::shared_ptr<const FaultHooks> fault_hooks;
  // KV-cache events (actors/kv_event_publisher.h, `serve --kv-events-endpoint`): the
  // prefix-cache actor hands it each step's prefix-cache changes. Null: nothing is recorded.
  std::shared_ptr<KvEventPublisher> kv_event_publisher;
};

// Where the served steps' time went, in seconds summed since the engine started: the
// executor's stages on its thread, and the host work around them on the other actors' threads
// (which overlaps the executor's when overlap scheduling is on).
struct StageSeconds {
  double schedule = 0;         // scheduler: planning, the KV memory-op round trip, step assembly
  double copies = 0;           // executor: swap and copy-on-write block copies
  double forward = 0;          // executor: the forward pass and its logits
  double sampling = 0;         // executor: penalties, sampling and logprobs of every row
  double process_outputs = 0;  // scheduler: applying a step's samples (stops, forks, beams)
  double detokenize = 0;       // tokenizer: incremental detokenization, stop strings, delivery
};

struct EngineStats {
  int num_running_seqs = 0;
  int num_waiting_seqs = 0;
  int num_unfinished_requests = 0;  // submitted, final event not yet produced
  int num_kv_blocks_total = 0;
  int num_kv_blocks_used = 0;
  int num_kv_blocks_free = 0;  // allocatable, including evictable prefix-cache blocks
  int num_swapped_seqs = 0;
  int num_kv_blocks_cached = 0;  // free blocks still holding a reusable prefix
  int peak_kv_blocks_used = 0;
  int64_t prefix_cache_queries_tokens = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits_tokens = 0;     // of those, tokens found
  int64_t num_preemptions_swap = 0;
  int64_t num_preemptions_recompute = 0;
  int64_t num_generated_tokens = 0;
  int64_t num_steps = 0;
  // The executor's time computing steps, and its time waiting between two steps when the
  // second was launched as the continuation of the first (work was pending): host overhead.
  double executor_busy_s = 0;
  double executor_idle_s = 0;
  // Steps planned while the one before was still running (overlap scheduling).
  int64_t num_steps_planned_ahead = 0;
  StageSeconds stage_s;
  // Speculative decoding: sequence-steps that verified proposals, tokens proposed, accepted.
  int64_t num_spec_rows = 0;
  int64_t num_spec_proposed_tokens = 0;
  int64_t num_spec_accepted_tokens = 0;
};

class Engine {
 public:
  // Loads the model and tokenizer and starts the actor threads. Throws model::ModelError or
  // std::invalid_argument (in this thread) for a bad model directory or engine setting.
  static std::unique_ptr<Engine> start(const EngineConfig& config,
                                       const EngineOptions& options = {});
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();  // shutdown()

  // Queues a request; never throws. With a callback, events go to it instead of next().
  std::shared_ptr<RequestStream> submit(GenerateRequest request, TokenCallback callback = {});
  // Stops a request by id (a no-op for an unknown or finished one).
  void abort(uint64_t request_id);
  // Stops accepting requests, aborts those in flight, waits (up to shutdown_timeout) for
  // their final events, then stops and joins every actor thread. Idempotent.
  void shutdown();

  EngineStats stats() const;
  // The KV block map (cache/kv_snapshot.h) for observers such as the playground. Published
  // only while a KvMapWatch is alive; kv_map() is null until the first one after that (and
  // always with a non-paged --kv-allocator, which has no blocks to show).
  std::unique_ptr<KvMapWatch> watch_kv_map();
  std::shared_ptr<const cache::KvMapSnapshot> kv_map() const;
  const model::Tokenizer& tokenizer() const;
  const EngineConfig& config() const;  // with max_model_len and num_kv_blocks resolved
  // The ids that end a sequence (the model config's eos_token_id list and the tokenizer's EOS).
  const std::vector<int32_t>& eos_token_ids() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagedserve::actors
