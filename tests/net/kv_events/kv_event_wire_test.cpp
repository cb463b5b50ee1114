// The KV-cache event wire format, byte for byte against the MessagePack spec
// (github.com/msgpack/msgpack/blob/master/spec.md): each form at its width boundaries, then
// whole batches in vLLM's array form as llm-d's indexer decodes them, the topic, the sequence
// frame and the bind-or-connect rule. Expected bytes are written out by hand from the spec.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "net/kv_events/kv_event_wire.h"
#include "net/kv_events/msgpack_writer.h"

namespace pagedserve::net {
namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

template <typename Write>
std::string written(Write write) {
  MsgpackWriter out;
  write(out);
  return out.take();
}

TEST(MsgpackWriter, UnsignedIntegersTakeTheirShortestForm) {
  EXPECT_EQ(written([](auto& w) { w.uint(0); }), bytes({0x00}));
  EXPECT_EQ(written([](auto& w) { w.uint(127); }), bytes({0x7f}));
  EXPECT_EQ(written([](auto& w) { w.uint(128); }), bytes({0xcc, 0x80}));
  EXPECT_EQ(written([](auto& w) { w.uint(255); }), bytes({0xcc, 0xff}));
  EXPECT_EQ(written([](auto& w) { w.uint(256); }), bytes({0xcd, 0x01, 0x00}));
  EXPECT_EQ(written([](auto& w) { w.uint(65535); }), bytes({0xcd, 0xff, 0xff}));
  EXPECT_EQ(written([](auto& w) { w.uint(65536); }), bytes({0xce, 0x00, 0x01, 0x00, 0x00}));
  EXPECT_EQ(written([](auto& w) { w.uint(0xffffffffULL); }), bytes({0xce, 0xff, 0xff, 0xff, 0xff}));
  EXPECT_EQ(written([](auto& w) { w.uint(0x100000000ULL); }),
            bytes({0xcf, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00}));
}

TEST(MsgpackWriter, NegativeIntegersTakeTheirShortestForm) {
  EXPECT_EQ(written([](auto& w) { w.integer(-1); }), bytes({0xff}));
  EXPECT_EQ(written([](auto& w) { w.integer(-32); }), bytes({0xe0}));
  EXPECT_EQ(written([](auto& w) { w.integer(-33); }), bytes({0xd0, 0xdf}));
  EXPECT_EQ(written([](auto& w) { w.integer(-128); }), bytes({0xd0, 0x80}));
  EXPECT_EQ(written([](auto& w) { w.integer(-129); }), bytes({0xd1, 0xff, 0x7f}));
  EXPECT_EQ(written([](auto& w) { w.integer(-32769); }), bytes({0xd2, 0xff, 0xff, 0x7f, 0xff}));
  EXPECT_EQ(written([](auto& w) { w.integer(INT64_MIN); }),
            bytes({0xd3, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}));
  EXPECT_EQ(written([](auto& w) { w.integer(300); }), bytes({0xcd, 0x01, 0x2c}));
}

TEST(MsgpackWriter, FixedUint64IsAlwaysNineBytes) {
  EXPECT_EQ(written([](auto& w) { w.fixed_uint64(5); }),
            bytes({0xcf, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05}));
  EXPECT_EQ(written([](auto& w) { w.fixed_uint64(0x0102030405060708ULL); }),
            bytes({0xcf, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}));
}

TEST(MsgpackWriter, FloatsStringsArraysNil) {
  // 1.5 = 0x3ff8000000000000 in IEEE 754 binary64.
  EXPECT_EQ(written([](auto& w) { w.float64(1.5); }),
            bytes({0xcb, 0x3f, 0xf8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}));
  EXPECT_EQ(written([](auto& w) { w.nil(); }), bytes({0xc0}));
  EXPECT_EQ(written([](auto& w) { w.str("abc"); }), bytes({0xa3, 'a', 'b', 'c'}));
  EXPECT_EQ(written([](auto& w) { w.str(std::string(31, 'x')); }),
            bytes({0xbf}) + std::string(31, 'x'));
  EXPECT_EQ(written([](auto& w) { w.str(std::string(32, 'x')); }),
            bytes({0xd9, 0x20}) + std::string(32, 'x'));
  EXPECT_EQ(written([](auto& w) { w.str(std::string(256, 'x')); }),
            bytes({0xda, 0x01, 0x00}) + std::string(256, 'x'));
  EXPECT_EQ(written([](auto& w) { w.array_header(15); }), bytes({0x9f}));
  EXPECT_EQ(written([](auto& w) { w.array_header(16); }), bytes({0xdc, 0x00, 0x10}));
  EXPECT_EQ(written([](auto& w) { w.array_header(70000); }), bytes({0xdd, 0x00, 0x01, 0x11, 0x70}));
}

const std::string kBlockStored = bytes({0xab}) + "BlockStored";
const std::string kBlockRemoved = bytes({0xac}) + "BlockRemoved";
const std::string kGpu = bytes({0xa3}) + "GPU";

TEST(KvEventWire, BatchOfEveryEventKind) {
  const cache::BlockHash first{0x0102030405060708ULL, 0xaaaaaaaaaaaaaaaaULL};
  const cache::BlockHash second{0x1112131415161718ULL, 0xbbbbbbbbbbbbbbbbULL};
  actors::KvEventBatch batch;
  batch.timestamp_s = 1.5;
  batch.events.emplace_back(cache::KvBlockStored{{first, second}, std::nullopt, {1, 300, 7, 0}});
  batch.events.emplace_back(cache::KvBlockStored{{second}, first, {9, 9}});
  batch.events.emplace_back(cache::KvBlockRemoved{{first}});
  batch.events.emplace_back(cache::KvAllBlocksCleared{});
  const std::string hash1 = bytes({0xcf, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08});
  const std::string hash2 = bytes({0xcf, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18});
  const std::string expected =
      bytes({0x93, 0xcb, 0x3f, 0xf8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}) +  // [1.5,
      bytes({0x94}) +                                                        //  [4 events:
      // ["BlockStored", [h1, h2], nil, [1, 300, 7, 0], 2, nil, "GPU"]
      bytes({0x97}) + kBlockStored + bytes({0x92}) + hash1 + hash2 + bytes({0xc0}) +
      bytes({0x94, 0x01, 0xcd, 0x01, 0x2c, 0x07, 0x00}) + bytes({0x02, 0xc0}) + kGpu +
      // ["BlockStored", [h2], h1, [9, 9], 2, nil, "GPU"]
      bytes({0x97}) + kBlockStored + bytes({0x91}) + hash2 + hash1 +
      bytes({0x92, 0x09, 0x09, 0x02, 0xc0}) + kGpu +
      // ["BlockRemoved", [h1], "GPU"]
      bytes({0x93}) + kBlockRemoved + bytes({0x91}) + hash1 + kGpu +
      // ["AllBlocksCleared"]
      bytes({0x91, 0xb0}) + "AllBlocksCleared" + bytes({0x00});  // data_parallel_rank 0]
  EXPECT_EQ(encode_kv_event_batch(batch, KvEventWireOptions{2, 0}), expected);
}

TEST(KvEventWire, NilRankAndEmptyBatch) {
  actors::KvEventBatch batch;
  batch.timestamp_s = 0.0;
  EXPECT_EQ(encode_kv_event_batch(batch, KvEventWireOptions{16, std::nullopt}),
            bytes({0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0xc0}));
}

TEST(KvEventWire, TopicIsKvAtPodAtModel) {
  EXPECT_EQ(kv_events_topic("pod-1", "stories260K"), "kv@pod-1@stories260K");
  EXPECT_EQ(kv_events_topic("10.0.0.7", "org/model"), "kv@10.0.0.7@org/model");
  EXPECT_THROW(kv_events_topic("a@b", "m"), std::invalid_argument);
  EXPECT_THROW(kv_events_topic("pod", "m@1"), std::invalid_argument);
  EXPECT_THROW(kv_events_topic("", "m"), std::invalid_argument);
}

TEST(KvEventWire, SequenceFrameIsEightBytesBigEndian) {
  EXPECT_EQ(sequence_frame(0), bytes({0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(sequence_frame(258), bytes({0, 0, 0, 0, 0, 0, 1, 2}));
  EXPECT_EQ(sequence_frame(-1), bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
}

TEST(KvEventWire, WildcardsAndLocalTransportsBindOthersConnect) {
  EXPECT_TRUE(kv_events_endpoint_binds("tcp://*:5557"));
  EXPECT_TRUE(kv_events_endpoint_binds("tcp://127.0.0.1:*"));
  EXPECT_TRUE(kv_events_endpoint_binds("tcp://[::]:5557"));
  EXPECT_TRUE(kv_events_endpoint_binds("ipc:///tmp/kv"));
  EXPECT_TRUE(kv_events_endpoint_binds("inproc://kv"));
  EXPECT_FALSE(kv_events_endpoint_binds("tcp://indexer:5557"));
  EXPECT_FALSE(kv_events_endpoint_binds("tcp://10.0.0.1:5557"));
}

}  // namespace
}  // namespace pagedserve::net
