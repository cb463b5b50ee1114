// PrefixCacheActor: receive an op list, apply it, send the result back.
#include "actors/prefix_cache_actor.h"

#include <exception>
#include <utility>

namespace pagedserve::actors {

PrefixCacheActor::PrefixCacheActor(AllocatorFactory make_allocator,
                                   runtime::Channel<runtime::ApplyMemoryOps>& inbox,
                                   runtime::Channel<runtime::MemoryOpsApplied>& reply,
                                   const FaultHooks* faults)
    : make_allocator_(std::move(make_allocator)),
      allocator_(make_allocator_()),
      faults_(faults),
      inbox_(inbox),
      reply_(reply) {}

runtime::Task<void> PrefixCacheActor::run() {
  for (;;) {
    auto [error, request] = co_await inbox_.async_receive(runtime::kAwaitTuple);
    if (error) break;  // closed: shutdown
    runtime::MemoryOpsApplied applied = on_apply(std::move(request));
    auto [send_error] = co_await reply_.async_send(boost::system::error_code{}, std::move(applied),
                                                   runtime::kAwaitTuple);
    if (send_error) break;
  }
}

runtime::MemoryOpsApplied PrefixCacheActor::on_apply(runtime::ApplyMemoryOps request) {
  runtime::MemoryOpsApplied applied;
  applied.request_id = request.request_id;
  // The scheduler starts over: nothing the old allocator held is trusted any more.
  if (request.reset) allocator_ = make_allocator_();
  cache::KvMemoryApplier applier(*allocator_);
  // Exceptions stay in this actor: a refused op comes back as an error value.
  try {
    for (const cache::KvMemoryOp& op : request.ops) {
      call_fault_hook(faults_, &FaultHooks::before_memory_op, op);
      applier.apply(op);
    }
  } catch (const std::exception& e) {
    applied.error = std::string("the prefix-cache actor failed: ") + e.what();
  }
  applied.result = applier.finish();
  return applied;
}

}  // namespace pagedserve::actors
