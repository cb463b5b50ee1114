// ZmqKvEventPublisher: the queue, the sending thread and the replay ring (see the header).
#include "net/kv_events/zmq_kv_event_publisher.h"

#include <bit>
#include <chrono>
#include <iostream>
#include <stdexcept>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace pagedserve::net {

struct ZmqKvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  std::optional<zmq::socket_t> replay;
};

namespace {

// How often the sending thread looks for replay requests while no batch arrives.
constexpr auto kReplayPollPeriod = std::chrono::milliseconds(20);

std::runtime_error endpoint_error(const char* flag, const std::string& endpoint,
                                  const zmq::error_t& e) {
  return std::runtime_error(std::string(flag) + " '" + endpoint + "': " + e.what());
}

}  // namespace

ZmqKvEventPublisher::ZmqKvEventPublisher(ZmqKvEventPublisherConfig config)
    : config_(std::move(config)), sockets_(std::make_unique<Sockets>()) {
  Sockets& s = *sockets_;
  try {
    s.pub.set(zmq::sockopt::sndhwm, config_.send_hwm);
    s.pub.set(zmq::sockopt::linger, 500);
    if (kv_events_endpoint_binds(config_.endpoint)) {
      s.pub.bind(config_.endpoint);
    } else {
      s.pub.connect(config_.endpoint);
    }
    endpoint_ = s.pub.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    throw endpoint_error("--kv-events-endpoint", config_.endpoint, e);
  }
  if (!config_.replay_endpoint.empty()) {
    try {
      s.replay.emplace(s.context, zmq::socket_type::router);
      s.replay->set(zmq::sockopt::linger, 0);
      s.replay->bind(config_.replay_endpoint);
      replay_endpoint_ = s.replay->get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      throw endpoint_error("--kv-events-replay-endpoint", config_.replay_endpoint, e);
    }
  }
  // The thread's start orders the socket setup above before its first use there.
  thread_ = std::thread([this] { run(); });
}

ZmqKvEventPublisher::~ZmqKvEventPublisher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void ZmqKvEventPublisher::publish(actors::KvEventBatch batch) {
  uint64_t dropped = 0;
  {
    std::lock_guard lock(mu_);
    const uint64_t seq = next_seq_++;
    if (queue_.size() < config_.max_queued_batches) {
      queue_.push_back(Queued{seq, std::move(batch)});
    } else {
      dropped = num_dropped_.fetch_add(1) + 1;
    }
  }
  if (dropped == 0) {
    wake_.notify_one();
  } else if (std::has_single_bit(dropped)) {  // 1, 2, 4, ...: a slow sender is logged, not spammed
    std::cerr << "pagedserve: KV-cache events: the send queue is full, " << dropped
              << " batches dropped so far" << std::endl;
  }
}

void ZmqKvEventPublisher::run() {
  for (;;) {
    std::deque<Queued> work;
    {
      std::unique_lock lock(mu_);
      const auto ready = [this] { return stopping_ || !queue_.empty(); };
      if (sockets_->replay) {
        wake_.wait_for(lock, kReplayPollPeriod, ready);
      } else {
        wake_.wait(lock, ready);
      }
      work.swap(queue_);
      if (work.empty() && stopping_) break;
    }
    for (const Queued& queued : work) send(queued);
    if (sockets_->replay) serve_replay_requests();
  }
}

void ZmqKvEventPublisher::send(const Queued& queued) {
  std::string payload = encode_kv_event_batch(queued.batch, config_.wire);
  const std::string seq = sequence_frame(static_cast<int64_t>(queued.seq));
  try {
    // A PUB socket never blocks: past the high-water mark ZeroMQ drops the message.
    const auto more = zmq::send_flags::sndmore | zmq::send_flags::dontwait;
    sockets_->pub.send(zmq::buffer(config_.topic), more);
    sockets_->pub.send(zmq::buffer(seq), more);
    sockets_->pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    std::cerr << "pagedserve: KV-cache events: send failed: " << e.what() << std::endl;
  }
  if (sockets_->replay) {
    replay_buffer_.emplace_back(queued.seq, std::move(payload));
    if (replay_buffer_.size() > config_.replay_buffer_batches) replay_buffer_.pop_front();
  }
}

void ZmqKvEventPublisher::serve_replay_requests() {
  zmq::socket_t& router = *sockets_->replay;
  for (;;) {
    std::vector<zmq::message_t> request;
    try {
      if (!zmq::recv_multipart(router, std::back_inserter(request), zmq::recv_flags::dontwait)) {
        return;  // nothing waiting
      }
    } catch (const zmq::error_t& e) {
      std::cerr << "pagedserve: KV-cache events: replay receive failed: " << e.what() << std::endl;
      return;
    }
    // [client identity, empty delimiter, start seq]: a REQ or DEALER client's frames.
    if (request.size() != 3 || request[2].size() != 8) {
      std::cerr << "pagedserve: KV-cache events: ignoring a malformed replay request ("
                << request.size() << " frames)" << std::endl;
      continue;
    }
    uint64_t start = 0;
    for (uint8_t byte : request[2].to_string_view()) start = start << 8 | byte;
    const std::string client(request[0].to_string_view());
    const auto reply = [&](int64_t seq, std::string_view payload) {
      const auto more = zmq::send_flags::sndmore | zmq::send_flags::dontwait;
      try {
        router.send(zmq::buffer(client), more);
        router.send(zmq::const_buffer(nullptr, 0), more);
        router.send(zmq::buffer(sequence_frame(seq)), more);
        router.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      } catch (const zmq::error_t&) {
        // The client left or is too slow: ROUTER drops what it cannot deliver.
      }
    };
    for (const auto& [seq, payload] : replay_buffer_) {
      if (seq >= start) reply(static_cast<int64_t>(seq), payload);
    }
    reply(-1, {});  // the end marker
  }
}

}  // namespace pagedserve::net
