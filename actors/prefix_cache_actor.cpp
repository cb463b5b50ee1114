// PrefixCacheActor: receive an op list, apply it, send the result back.
#include "actors/prefix_cache_actor.h"

#include <boost/asio/this_coro.hpp>
#include <chrono>
#include <exception>
#include <utility>

namespace pagedserve::actors {

PrefixCacheActor::PrefixCacheActor(AllocatorFactory make_allocator,
                                   runtime::Channel<runtime::ApplyMemoryOps>& inbox,
                                   runtime::Channel<runtime::MemoryOpsApplied>& reply,
                                   const FaultHooks* faults,
                                   std::shared_ptr<KvEventPublisher> events)
    : make_allocator_(std::move(make_allocator)),
      faults_(faults),
      events_(std::move(events)),
      allocator_(this->make_allocator()),  // the member, not the moved-from parameter
      inbox_(inbox),
      reply_(reply) {}

std::unique_ptr<cache::KvAllocator> PrefixCacheActor::make_allocator() {
  std::unique_ptr<cache::KvAllocator> allocator = make_allocator_();
  if (events_) allocator->set_event_recorder(&recorder_);
  return allocator;
}

void PrefixCacheActor::publish_events() {
  if (recorder_.empty()) return;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  events_->publish(KvEventBatch{std::chrono::duration<double>(now).count(), recorder_.take()});
}

runtime::Task<void> PrefixCacheActor::run() {
  for (;;) {
    auto [error, request] = co_await inbox_.async_receive(runtime::kAwaitTuple);
    if (error) break;  // closed: shutdown
    runtime::MemoryOpsApplied applied = on_apply(std::move(request));
    auto [send_error] = co_await reply_.async_send(boost::system::error_code{}, std::move(applied),
                                                   runtime::kAwaitTuple);
    if (send_error) break;
  }
  stopped_ = true;
  if (kv_timer_ != nullptr) kv_timer_->cancel();
}

runtime::Task<void> PrefixCacheActor::publish_kv_maps() {
  boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor);
  while (!stopped_) {
    timer.expires_after(kKvMapInterval);
    kv_timer_ = &timer;
    co_await timer.async_wait(runtime::kAwaitTuple);
    kv_timer_ = nullptr;
    if (stopped_) break;
    publish_kv_map_if_wanted();
  }
}

bool PrefixCacheActor::publish_kv_map_if_wanted() {
  if (kv_board_ == nullptr || !kv_board_->wanted()) return false;
  const cache::BlockManager* blocks = allocator_->block_manager();
  if (blocks == nullptr) return false;  // only the paged allocator has blocks to show
  // A new subscriber after a quiet spell finds the board empty: publish even without changes.
  if (num_changes_ == num_changes_published_ && kv_board_->latest() != nullptr) return false;
  num_changes_published_ = num_changes_;
  kv_board_->publish(std::make_shared<const cache::KvMapSnapshot>(
      cache::make_kv_map_snapshot(++kv_map_version_, blocks->snapshot(), seq_requests_)));
  return true;
}

runtime::MemoryOpsApplied PrefixCacheActor::on_apply(runtime::ApplyMemoryOps request) {
  runtime::MemoryOpsApplied applied;
  applied.request_id = request.request_id;
  // The scheduler starts over: nothing the old allocator held is trusted any more.
  if (request.reset) {
    if (events_) recorder_.cache_cleared(allocator_->cached_block_hashes());
    allocator_ = make_allocator();
    seq_requests_.clear();
  }
  ++num_changes_;
  cache::KvMemoryApplier applier(*allocator_);
  // Exceptions stay in this actor: a refused op comes back as an error value.
  try {
    for (const cache::KvMemoryOp& op : request.ops) {
      call_fault_hook(faults_, &FaultHooks::before_memory_op, op);
      applier.apply(op);
      seq_requests_.observe(op);
    }
  } catch (const std::exception& e) {
    applied.error = std::string("the prefix-cache actor failed: ") + e.what();
  }
  applied.result = applier.finish();
  if (events_) publish_events();  // what the ops did, also when one was refused midway
  return applied;
}

}  // namespace pagedserve::actors
