// Engine: builds the actor system (the composition root) and implements the client API.
//
// Threads and channels (every channel bounded, bound to its receiver's thread):
//   client threads --EncodeRequest--> [tokenizer thread]   encode loop
//   tokenizer      --AddRequest-----> [scheduler thread]   one inbox: AddRequest, CheckAborts,
//   executor       --StepDone-------> [scheduler thread]              StepDone
//   scheduler      --ExecuteStep----> [executor thread]    capacity 2: with overlap, the next
//                                                         step waits while one runs
//   scheduler      --DecodeBatch----> [tokenizer thread]   decode loop -> RequestStream
//   client aborts  --CheckAborts----> [scheduler thread]   (try_send; plus a flag if full)
//   scheduler      --ApplyMemoryOps-> [prefix-cache thread] one per step, capacity 1: the
//   prefix cache   --MemoryOpsApplied-> [scheduler thread]  scheduler awaits each reply
// The EncodeRequest channel holds max_unfinished_requests, so the registry's admission limit
// is the one place a client waits.
#include "actors/engine.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

#include "actors/engine_setup.h"
#include "actors/executor_actor.h"
#include "actors/fault_hooks.h"
#include "actors/prefix_cache_actor.h"
#include "actors/runtime/actor_thread.h"
#include "actors/runtime/kv_map_board.h"
#include "actors/runtime/request_registry.h"
#include "actors/runtime/stats_board.h"
#include "actors/scheduler_actor.h"
#include "actors/tokenizer_actor.h"

namespace pagedserve::actors {

// ---- RequestStream ----

RequestStream::RequestStream(std::shared_ptr<runtime::StreamState> state,
                             std::shared_ptr<runtime::RequestRegistry> registry)
    : state_(std::move(state)), registry_(std::move(registry)) {}

RequestStream::~RequestStream() {
  if (!state_->finished()) registry_->abort(state_->request_id());
}

uint64_t RequestStream::request_id() const { return state_->request_id(); }
std::optional<TokenEvent> RequestStream::next() { return state_->next(); }
std::optional<TokenEvent> RequestStream::try_next() { return state_->try_next(); }
bool RequestStream::finished() const { return state_->finished(); }
void RequestStream::abort() { registry_->abort(state_->request_id()); }

// ---- Engine ----

// Members are declared in dependency order: threads (their io_contexts) outlive the channels
// bound to them, and channels outlive the actors that hold references to them.
struct Engine::Impl {
  Impl(const EngineConfig& config, const EngineOptions& options,
       std::shared_ptr<const model::Tokenizer> tokenizer);
  void shutdown();

  EngineConfig config;
  std::vector<int32_t> eos_token_ids;  // the scheduler's: the model's ids and the tokenizer's
  const EngineOptions options;
  const std::shared_ptr<const model::Tokenizer> tokenizer;
  const std::shared_ptr<runtime::RequestRegistry> registry;
  runtime::StatsBoard stats;
  // Shared with the KvMapWatch handles, which may outlive the engine.
  const std::shared_ptr<runtime::KvMapBoard> kv_map_board =
      std::make_shared<runtime::KvMapBoard>();
  std::atomic<uint64_t> next_request_id{1};
  std::mutex shutdown_mu;
  bool shut_down = false;

  runtime::ActorThread tokenizer_thread{"tokenizer"};
  runtime::ActorThread scheduler_thread{"scheduler"};
  runtime::ActorThread executor_thread{"executor"};
  runtime::ActorThread prefix_cache_thread{"prefix-cache"};

  runtime::Channel<runtime::EncodeRequest> encode_inbox;
  runtime::Channel<runtime::DecodeBatch> decode_inbox;
  runtime::Channel<runtime::SchedulerMessage> scheduler_inbox;
  runtime::Channel<runtime::ExecuteStep> executor_inbox;
  runtime::Channel<runtime::ApplyMemoryOps> prefix_cache_inbox;
  runtime::Channel<runtime::MemoryOpsApplied> prefix_cache_reply;

  std::unique_ptr<ExecutorActor> executor_actor;
  std::unique_ptr<PrefixCacheActor> prefix_cache_actor;
  std::unique_ptr<SchedulerActor> scheduler_actor;
  std::unique_ptr<TokenizerActor> tokenizer_actor;
};

Engine::Impl::Impl(const EngineConfig& config_in, const EngineOptions& options_in,
                   std::shared_ptr<const model::Tokenizer> tokenizer_in)
    : config(config_in),
      options(options_in),
      tokenizer(std::move(tokenizer_in)),
      registry(std::make_shared<runtime::RequestRegistry>(options_in.max_unfinished_requests)),
      encode_inbox(tokenizer_thread.executor(),
                   static_cast<size_t>(std::max(options_in.max_unfinished_requests, 1))),
      decode_inbox(tokenizer_thread.executor(),
                   static_cast<size_t>(std::max(options_in.channel_capacity, 1))),
      scheduler_inbox(scheduler_thread.executor(),
                      static_cast<size_t>(std::max(options_in.channel_capacity, 1))),
      executor_inbox(executor_thread.executor(), 2),
      prefix_cache_inbox(prefix_cache_thread.executor(), 1),
      prefix_cache_reply(scheduler_thread.executor(), 1) {}

std::unique_ptr<Engine> Engine::start(const EngineConfig& config_in, const EngineOptions& options) {
  EngineSetup setup = set_up_engine(config_in);
  const EngineConfig& config = setup.config;
  auto tokenizer = setup.tokenizer;
  const int vocab_size = setup.executor->model_config().vocab_size;
  SchedulerActorConfig sched{setup.scheduler, setup.blocks, options.overlap};
  auto executor = std::move(setup.executor);
  const FaultHooks* faults = options.fault_hooks.get();
#ifdef PAGEDSERVE_FAULT_INJECTION
  if (faults != nullptr && faults->wrap_executor)
    executor = faults->wrap_executor(std::move(executor));
#endif

  auto impl = std::make_unique<Impl>(config, options, tokenizer);
  Impl& s = *impl;
  s.eos_token_ids = setup.scheduler.eos_token_ids;
  s.executor_actor = std::make_unique<ExecutorActor>(std::move(executor), s.executor_inbox,
                                                     s.scheduler_inbox, s.stats, faults);
  s.prefix_cache_actor = std::make_unique<PrefixCacheActor>(
      [kind = setup.scheduler.kv_allocator, blocks = setup.blocks] {
        return cache::make_kv_allocator(kind, blocks);
      },
      s.prefix_cache_inbox, s.prefix_cache_reply, faults, options.kv_event_publisher);
  s.prefix_cache_actor->set_kv_map_board(s.kv_map_board.get());
  s.scheduler_actor = std::make_unique<SchedulerActor>(
      sched, s.scheduler_inbox, s.executor_inbox, s.decode_inbox,
      PrefixCacheLink{s.prefix_cache_inbox, s.prefix_cache_reply}, s.stats, faults);
  s.tokenizer_actor = std::make_unique<TokenizerActor>(
      tokenizer, TokenizerActorLimits{config, vocab_size}, s.registry, s.encode_inbox,
      s.decode_inbox, s.scheduler_inbox, s.stats, faults);
  s.registry->set_abort_hook([actor = s.scheduler_actor.get()] { actor->notify_abort(); });

  s.executor_thread.spawn(s.executor_actor->run());
  s.prefix_cache_thread.spawn(s.prefix_cache_actor->run());
  s.prefix_cache_thread.spawn(s.prefix_cache_actor->publish_kv_maps());
  s.scheduler_thread.spawn(s.scheduler_actor->run());
  s.tokenizer_thread.spawn(s.tokenizer_actor->encode_loop());
  s.tokenizer_thread.spawn(s.tokenizer_actor->decode_loop());
  s.executor_thread.start();
  s.prefix_cache_thread.start();
  s.scheduler_thread.start();
  s.tokenizer_thread.start();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { shutdown(); }

std::shared_ptr<RequestStream> Engine::submit(GenerateRequest request, TokenCallback callback) {
  Impl& s = *impl_;
  const uint64_t id = s.next_request_id.fetch_add(1);
  auto state = std::make_shared<runtime::StreamState>(id, std::move(callback));
  auto stream = std::make_shared<RequestStream>(state, s.registry);
  if (!s.registry->admit(state)) {
    state->push(runtime::error_event(id, "the engine is shut down"));
    return stream;
  }
  runtime::EncodeRequest message;
  message.request_id = id;
  message.prompt = std::move(request.prompt);
  message.prompt_token_ids = std::move(request.prompt_token_ids);
  message.sampling = std::move(request.sampling);
  message.stream = state;
  // The channel holds as many requests as the registry admits, so this fails only once the
  // channel is closed (a shutdown that timed out).
  if (!s.encode_inbox.try_send(boost::system::error_code{}, std::move(message))) {
    s.registry->finish(id);
    state->push(runtime::error_event(id, "the engine is shut down"));
  }
  return stream;
}

void Engine::abort(uint64_t request_id) { impl_->registry->abort(request_id); }

void Engine::shutdown() { impl_->shutdown(); }

void Engine::Impl::shutdown() {
  std::lock_guard lock(shutdown_mu);
  if (shut_down) return;
  shut_down = true;
  // 1. Stop accepting; 2. abort what is in flight and let the actors end every stream.
  registry->close();
  registry->abort_all();
  const auto deadline = std::chrono::steady_clock::now() + options.shutdown_timeout;
  const bool drained = registry->wait_until_empty(deadline);
  registry->set_abort_hook({});
  // 3. Close the inboxes upstream first; the tokenizer's decode inbox last, so the scheduler
  // can always hand over (and, overlap off, see delivered) what it still holds.
  encode_inbox.close();
  scheduler_inbox.close();
  executor_inbox.close();
  const auto join_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  scheduler_thread.join_until(join_deadline);
  executor_thread.join_until(join_deadline);
  // After the scheduler: its last act is handing the allocator the frees still queued.
  prefix_cache_inbox.close();
  prefix_cache_reply.close();
  prefix_cache_thread.join_until(join_deadline);
  decode_inbox.close();
  tokenizer_thread.join_until(join_deadline);
  // 4. No actor is left to end a stream that did not drain in time: end it here.
  if (!drained) registry->fail_all("the engine shut down before the request finished");
}

EngineStats Engine::stats() const {
  EngineStats stats = impl_->stats.snapshot();
  stats.num_unfinished_requests = impl_->registry->num_unfinished();
  return stats;
}

KvMapWatch::KvMapWatch(std::shared_ptr<runtime::KvMapBoard> board) : board_(std::move(board)) {
  board_->add_subscriber();
}

KvMapWatch::~KvMapWatch() { board_->remove_subscriber(); }

std::unique_ptr<KvMapWatch> Engine::watch_kv_map() {
  return std::make_unique<KvMapWatch>(impl_->kv_map_board);
}

std::shared_ptr<const cache::KvMapSnapshot> Engine::kv_map() const {
  return impl_->kv_map_board->latest();
}

const model::Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }

const EngineConfig& Engine::config() const { return impl_->config; }

const std::vector<int32_t>& Engine::eos_token_ids() const { return impl_->eos_token_ids; }

}  // namespace pagedserve::actors
