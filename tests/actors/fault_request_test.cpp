// Faults that concern one request, or the engine's last moments (issue 19), injected at the
// actor seams on stories260K: the tokenizer actor failing one request's encoding or, mid-stream,
// its detokenization; the tokenizer's send of one request to the scheduler failing; and the
// executor's or the scheduler's send failing as a closed channel does at shutdown. A fault of
// one request ends that request only (finish reason "error" and a message), the others produce
// exactly the fault-free tokens, and every KV block is free afterwards; a lost message at
// shutdown still leaves no stream open and no shutdown hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "actors/fault_hooks.h"
#include "tests/actors/fault_test_util.h"
#include "tests/actors/faulty_executor.h"

namespace pagedserve::actors {
namespace {

using namespace testing_util;

constexpr int kMaxTokens = 24;
const std::vector<std::string> kPrompts = {"Once upon a time", "Lily and Tom", "The cat sat",
                                           "One day, a little bird"};

class FaultRequest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_FAULT_INJECTION();
    reference_ = reference_tokens(kPrompts, kMaxTokens, 8);
  }
  const std::vector<int32_t>& ref(size_t i) { return reference_.at(kPrompts[i]); }

  // Submits every prompt at once; request ids on a fresh engine are 1, 2, ... in this order.
  std::vector<Drained> run_all(Engine& engine) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      streams.push_back(engine.submit(prompt_request(kPrompts[i], kMaxTokens)));
      EXPECT_EQ(streams.back()->request_id(), i + 1);
    }
    std::vector<Drained> out;
    for (auto& stream : streams) out.push_back(drain_stream(*stream));
    return out;
  }

  std::map<std::string, std::vector<int32_t>> reference_;
};

// Request 2's third detokenization throws (tokens already streamed), request 3's encoding
// throws: each ends alone, with its own message; 1 and 4 are untouched.
TEST_F(FaultRequest, TokenizerFailingOneRequestEndsThatRequestOnly) {
  auto detokenize_calls = std::make_shared<std::atomic<int>>(0);
  FaultHooks hooks;
  hooks.before_detokenize = [detokenize_calls](uint64_t request_id, std::span<const int32_t>) {
    if (request_id == 2 && detokenize_calls->fetch_add(1) == 2) {
      throw std::runtime_error("injected: no such token in the vocabulary");
    }
  };
  hooks.before_encode = [](uint64_t request_id) {
    if (request_id == 3) throw std::runtime_error("injected: the tokenizer gave up");
  };
  auto engine = Engine::start(fault_test_config(8), options_with(std::move(hooks)));
  const std::vector<Drained> got = run_all(*engine);

  expect_unaffected(got[0], ref(0), "request 1");
  expect_failed(got[1], ref(1), "detokenization failed: injected: no such token",
                "request 2 (detokenization)");
  EXPECT_EQ(got[1].tokens.size(), 2u) << "the two events before the fault were delivered";
  expect_failed(got[2], ref(2), "the prompt could not be encoded: injected: the tokenizer gave up",
                "request 3 (encoding)");
  EXPECT_TRUE(got[2].tokens.empty());
  expect_unaffected(got[3], ref(3), "request 4");

  expect_recovered(*engine, kPrompts[1], ref(1));
  engine->shutdown();
}

// The tokenizer cannot hand request 2 to the scheduler (its inbox closed, as at shutdown).
TEST_F(FaultRequest, AddRequestSendFailingEndsThatRequestOnly) {
  auto sends = std::make_shared<std::atomic<int>>(0);
  FaultHooks hooks;
  hooks.fail_send = [sends](ChannelSend send) {
    return send == ChannelSend::kAddRequest && sends->fetch_add(1) == 1;
  };
  auto engine = Engine::start(fault_test_config(8), options_with(std::move(hooks)));
  const std::vector<Drained> got = run_all(*engine);

  expect_unaffected(got[0], ref(0), "request 1");
  expect_failed(got[1], ref(1), "the engine is shutting down", "request 2");
  EXPECT_TRUE(got[1].tokens.empty());
  expect_unaffected(got[2], ref(2), "request 3");
  expect_unaffected(got[3], ref(3), "request 4");

  expect_recovered(*engine, kPrompts[1], ref(1));
  engine->shutdown();
}

// From the first step on, the executor's results (StepDone) or the scheduler's tokens
// (DecodeBatch) are lost as a send to a closed inbox is at shutdown. Nothing can finish those
// requests any more; shutdown must still return (after its drain timeout) and end every stream
// with an error naming the shutdown.
class FaultRequestShutdown : public FaultRequest,
                             public ::testing::WithParamInterface<ChannelSend> {};

TEST_P(FaultRequestShutdown, LostMessageStillEndsEveryStreamAndShutdownReturns) {
  const ChannelSend lost = GetParam();
  auto control = std::make_shared<ExecutorFaultControl>();
  control->hold_first_step = true;
  auto armed = std::make_shared<std::atomic<bool>>(false);
  FaultHooks hooks = executor_fault_hooks(control);
  hooks.fail_send = [armed, lost](ChannelSend send) { return send == lost && armed->load(); };
  EngineOptions options = options_with(std::move(hooks));
  options.shutdown_timeout = std::chrono::milliseconds(300);
  auto engine = Engine::start(fault_test_config(8), options);

  std::vector<std::shared_ptr<RequestStream>> streams;
  streams.push_back(engine->submit(prompt_request(kPrompts[0], kMaxTokens)));
  ASSERT_TRUE(control->wait_until_first_step_held(kNoHangTimeout));
  for (size_t i = 1; i < kPrompts.size(); ++i) {
    streams.push_back(engine->submit(prompt_request(kPrompts[i], kMaxTokens)));
  }
  ASSERT_TRUE(wait_for_stats(
      *engine, [](const EngineStats& s) { return s.num_running_seqs + s.num_waiting_seqs == 4; }));
  armed->store(true);
  control->release();

  const auto start = std::chrono::steady_clock::now();
  engine->shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, kNoHangTimeout);
  for (size_t i = 0; i < streams.size(); ++i) {
    const Drained got = drain_stream(*streams[i]);
    EXPECT_EQ(got.num_final_events, 1) << "request " << i + 1;
    EXPECT_EQ(got.last.finish_reason, "error") << "request " << i + 1;
    EXPECT_NE(got.last.error.find("shut down"), std::string::npos)
        << "request " << i + 1 << ": '" << got.last.error << "'";
    EXPECT_TRUE(got.tokens.empty()) << "request " << i + 1 << ": nothing was delivered";
  }
  EXPECT_EQ(engine->stats().num_unfinished_requests, 0);
}

INSTANTIATE_TEST_SUITE_P(FaultSeam, FaultRequestShutdown,
                         ::testing::Values(ChannelSend::kStepDone, ChannelSend::kDecodeBatch),
                         [](const ::testing::TestParamInfo<ChannelSend>& info) {
                           return std::string(channel_send_name(info.param));
                         });

}  // namespace
}  // namespace pagedserve::actors
