// FaultHooks: test-only fault injection at the actor seams (issue 19), so the failure paths that
// never run in a healthy engine (the prefix-cache actor refusing an op list, the executor
// throwing in a step, the tokenizer failing one request, a channel send failing at shutdown) run
// in tests. Every member is empty by default; a test sets the ones it needs and hands the struct
// to Engine::start through EngineOptions::fault_hooks, which no flag or config file reaches.
// Each hook is called where the real component can fail, inside the handling that already turns
// that failure into an error value, so a hook exercises the same path a real failure takes.
//
// Compiled in tests, not in release builds: the calls are guarded by PAGEDSERVE_FAULT_INJECTION,
// which CMake defines for every build type but Release (CMakeLists.txt); in a Release build the
// hooks are ignored and kFaultInjectionCompiledIn is false (the fault tests skip). Elsewhere
// each call costs one test of an empty std::function. Design: docs/actors.md, "Failures".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>

#include "actors/executor.h"
#include "cache/kv_memory_ops.h"

namespace pagedserve::actors {

#ifdef PAGEDSERVE_FAULT_INJECTION
inline constexpr bool kFaultInjectionCompiledIn = true;
#else
inline constexpr bool kFaultInjectionCompiledIn = false;
#endif

// The channel sends a hook may fail as a closed channel fails them at shutdown.
enum class ChannelSend {
  kAddRequest,   // tokenizer -> scheduler: a validated request
  kExecuteStep,  // scheduler -> executor: a planned step
  kStepDone,     // executor -> scheduler: a step's results
  kDecodeBatch,  // scheduler -> tokenizer: a step's tokens for the clients
};
inline const char* channel_send_name(ChannelSend send) {
  switch (send) {
    case ChannelSend::kAddRequest:
      return "AddRequest";
    case ChannelSend::kExecuteStep:
      return "ExecuteStep";
    case ChannelSend::kStepDone:
      return "StepDone";
    case ChannelSend::kDecodeBatch:
      return "DecodeBatch";
  }
  return "?";
}

struct FaultHooks {
  // Engine::start: wraps the executor the engine built (a test double around the real one that
  // throws in a chosen step). Runs on the thread calling start(); the wrapper runs on the
  // executor actor's thread.
  std::function<std::unique_ptr<Executor>(std::unique_ptr<Executor>)> wrap_executor;
  // Prefix-cache actor, before it applies each op of a list (its thread): throwing refuses the
  // op, and so the list, as the allocator does when the scheduler's view disagrees with it.
  std::function<void(const cache::KvMemoryOp&)> before_memory_op;
  // Tokenizer actor (its thread), before it encodes a request's prompt: throwing fails that
  // request as an encoding error does.
  std::function<void(uint64_t request_id)> before_encode;
  // Tokenizer actor (its thread), before it detokenizes a request's new tokens: throwing fails
  // that request as a detokenization error does.
  std::function<void(uint64_t request_id, std::span<const int32_t> token_ids)> before_detokenize;
  // Before each send on the channel named (the sender's thread): true makes the send fail as it
  // does once the receiver's inbox is closed.
  std::function<bool(ChannelSend send)> fail_send;
};

// The call sites' one-liners: nothing / false when the hook is empty or compiled out.
template <class Hook, class... Args>
void call_fault_hook(const FaultHooks* hooks, Hook FaultHooks::*hook, Args&&... args) {
#ifdef PAGEDSERVE_FAULT_INJECTION
  if (hooks != nullptr && hooks->*hook) (hooks->*hook)(std::forward<Args>(args)...);
#else
  (void)hooks;
  (void)hook;
  ((void)args, ...);
#endif
}

inline bool fault_fails_send(const FaultHooks* hooks, ChannelSend send) {
#ifdef PAGEDSERVE_FAULT_INJECTION
  return hooks != nullptr && hooks->fail_send && hooks->fail_send(send);
#else
  (void)hooks;
  (void)send;
  return false;
#endif
}

}  // namespace pagedserve::actors
