// ZmqKvEventPublisher over real ZeroMQ sockets on loopback: a SUB socket receives every batch
// as [topic, 8-byte big-endian sequence number, payload] with sequence numbers one apart, and a
// DEALER client asking the replay socket for a start number gets the buffered batches from
// there in order, then [-1, empty] (vLLM's replay protocol). A refused endpoint is an error
// naming its flag.
#include "net/kv_events/zmq_kv_event_publisher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace pagedserve::net {
namespace {

uint64_t read_seq(const zmq::message_t& frame) {
  uint64_t seq = 0;
  for (uint8_t byte : frame.to_string_view()) seq = seq << 8 | byte;
  return seq;
}

actors::KvEventBatch batch_with(uint64_t low) {
  actors::KvEventBatch batch;
  batch.timestamp_s = 1000.0 + static_cast<double>(low);
  batch.events.emplace_back(cache::KvBlockRemoved{{cache::BlockHash{low, 0}}});
  return batch;
}

ZmqKvEventPublisherConfig config() {
  ZmqKvEventPublisherConfig c;
  c.endpoint = "tcp://127.0.0.1:*";
  c.replay_endpoint = "tcp://127.0.0.1:*";
  c.topic = "kv@pod@model";
  c.wire.block_size = 16;
  return c;
}

// Receives one multipart message, waiting at most `timeout`; empty on timeout.
std::vector<zmq::message_t> receive(zmq::socket_t& socket, std::chrono::milliseconds timeout) {
  std::vector<zmq::message_t> frames;
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return frames;
  if (!zmq::recv_multipart(socket, std::back_inserter(frames))) frames.clear();
  return frames;
}

TEST(ZmqKvEventPublisher, SubscriberSeesConsecutiveBatchesAndReplayReturnsThem) {
  ZmqKvEventPublisher publisher(config());
  ASSERT_NE(publisher.endpoint().find("tcp://127.0.0.1:"), std::string::npos);
  zmq::context_t context;
  zmq::socket_t sub(context, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv@");
  sub.connect(publisher.endpoint());

  // A SUB socket misses what is sent before its subscription reaches the publisher: publish
  // until one arrives, then everything after it must arrive, one sequence number apart.
  uint64_t low = 1;
  std::vector<zmq::message_t> first;
  for (int attempt = 0; attempt < 100 && first.empty(); ++attempt) {
    publisher.publish(batch_with(low++));
    first = receive(sub, std::chrono::milliseconds(100));
  }
  ASSERT_EQ(first.size(), 3u) << "no batch reached the subscriber";
  EXPECT_EQ(first[0].to_string(), "kv@pod@model");
  ASSERT_EQ(first[1].size(), 8u);
  uint64_t previous = read_seq(first[1]);
  EXPECT_EQ(first[2].to_string(), encode_kv_event_batch(batch_with(previous + 1), config().wire))
      << "sequence numbers start at 0 for the first batch (low 1)";
  std::vector<std::string> live_payloads;
  for (int i = 0; i < 5; ++i) publisher.publish(batch_with(low++));
  for (int i = 0; i < 5; ++i) {
    std::vector<zmq::message_t> frames = receive(sub, std::chrono::seconds(5));
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(read_seq(frames[1]), previous + 1);
    previous = read_seq(frames[1]);
    live_payloads.push_back(frames[2].to_string());
  }

  // Replay from the first of the five.
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.connect(publisher.replay_endpoint());
  const uint64_t start = previous - 4;
  const std::string start_frame = sequence_frame(static_cast<int64_t>(start));
  dealer.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start_frame), zmq::send_flags::none);
  for (uint64_t seq = start; seq <= previous; ++seq) {
    std::vector<zmq::message_t> frames = receive(dealer, std::chrono::seconds(5));
    ASSERT_EQ(frames.size(), 3u);  // [empty delimiter, seq, payload]
    EXPECT_EQ(frames[0].size(), 0u);
    EXPECT_EQ(read_seq(frames[1]), seq);
    EXPECT_EQ(frames[2].to_string(), live_payloads[seq - start]);
  }
  std::vector<zmq::message_t> end = receive(dealer, std::chrono::seconds(5));
  ASSERT_EQ(end.size(), 3u);
  EXPECT_EQ(end[1].to_string(), sequence_frame(-1));
  EXPECT_EQ(end[2].size(), 0u);
  EXPECT_EQ(publisher.num_dropped_batches(), 0u);
}

TEST(ZmqKvEventPublisher, ARefusedEndpointNamesItsFlag) {
  ZmqKvEventPublisherConfig bad = config();
  bad.endpoint = "tcp://*:not-a-port";
  try {
    ZmqKvEventPublisher publisher(bad);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-events-endpoint 'tcp://*:not-a-port'"),
              std::string::npos)
        << e.what();
  }
  bad = config();
  bad.replay_endpoint = "nonsense://x";
  EXPECT_THROW(ZmqKvEventPublisher publisher(bad), std::runtime_error);
}

}  // namespace
}  // namespace pagedserve::net
