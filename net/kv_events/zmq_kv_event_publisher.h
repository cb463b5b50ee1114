// ZmqKvEventPublisher: `serve --kv-events-endpoint`'s KvEventPublisher. publish() (on the
// prefix-cache actor's thread) only stamps the batch with the next sequence number and queues
// it; a thread of its own encodes it (kv_event_wire.h) and sends it on a ZeroMQ PUB socket, keeps
// the last replay_buffer_batches payloads, and answers replay requests on an optional ROUTER
// socket (vLLM's protocol: a request [start sequence number, 8 bytes big-endian] is answered
// with every buffered batch from there, [seq, payload] each, then [-1, empty]). Nothing on the
// actor's thread touches a socket or can block on the network.
//
// Loss: the queue is bounded; a batch that finds it full is dropped (counted, logged) after
// taking its sequence number, so subscribers see the gap. The PUB socket drops too when a
// subscriber falls behind by send_hwm messages (ZeroMQ's rule); send never blocks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "actors/kv_event_publisher.h"
#include "net/kv_events/kv_event_wire.h"

namespace pagedserve::net {

struct ZmqKvEventPublisherConfig {
  // PUB address: bound when it has a wildcard ('*': every interface, or "tcp://HOST:*" for any
  // free port) or is ipc:// / inproc://, else connected (kv_events_endpoint_binds).
  std::string endpoint;
  std::string replay_endpoint;  // ROUTER, always bound; empty: no replay socket
  std::string topic;            // kv_events_topic(pod, model)
  KvEventWireOptions wire;
  size_t max_queued_batches = 10000;     // between publish() and the sending thread
  size_t replay_buffer_batches = 10000;  // vLLM's buffer_steps
  int send_hwm = 100000;                 // PUB high-water mark (messages), vLLM's default
};

class ZmqKvEventPublisher final : public actors::KvEventPublisher {
 public:
  // Opens the sockets and starts the sending thread. Throws std::runtime_error naming the
  // endpoint when ZeroMQ refuses it (malformed, port in use, unknown interface).
  explicit ZmqKvEventPublisher(ZmqKvEventPublisherConfig config);
  // Sends what is still queued, then stops the thread and closes the sockets (waiting up to
  // half a second for the last messages to leave).
  ~ZmqKvEventPublisher() override;
  ZmqKvEventPublisher(const ZmqKvEventPublisher&) = delete;
  ZmqKvEventPublisher& operator=(const ZmqKvEventPublisher&) = delete;

  void publish(actors::KvEventBatch batch) override;

  // The addresses as ZeroMQ resolved them (a bound "tcp://127.0.0.1:*" shows its port).
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  const std::string& topic() const { return config_.topic; }
  uint64_t num_dropped_batches() const { return num_dropped_.load(); }

 private:
  struct Queued {
    uint64_t seq = 0;
    actors::KvEventBatch batch;
  };
  struct Sockets;  // ZeroMQ's context and sockets: used only by the sending thread after start

  void run();
  void send(const Queued& queued);
  void serve_replay_requests();

  const ZmqKvEventPublisherConfig config_;
  std::unique_ptr<Sockets> sockets_;
  std::string endpoint_;
  std::string replay_endpoint_;
  std::deque<std::pair<uint64_t, std::string>> replay_buffer_;  // sending thread only

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Queued> queue_;  // guarded by mu_
  uint64_t next_seq_ = 0;     // guarded by mu_
  bool stopping_ = false;     // guarded by mu_
  std::atomic<uint64_t> num_dropped_{0};
  std::thread thread_;
};

}  // namespace pagedserve::net
