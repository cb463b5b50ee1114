// Faults that leave KV memory untrusted (issue 19), injected at the actor seams on stories260K:
// the executor throwing in a step (on a prompt, and mid-generation with a step queued behind
// it), the prefix-cache actor refusing a memory-op list (overlap on and off), and a step that
// cannot be sent to the executor. For each: the requests holding KV memory end with finish
// reason "error" and a message naming the fault, tokens streamed before it are the fault-free
// ones; requests still queued continue and produce exactly the fault-free tokens; afterwards
// every block is free and a new request (the prompt of a failed one) gets the fault-free
// tokens, i.e. nothing the failed step was to write is served from the prefix cache.
// The reference for every request is the same prompt alone on a fault-free engine (greedy).
// Each test holds the first step until all its requests are queued, so which ones run and
// which wait when the fault comes does not depend on the machine's speed.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
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
const std::vector<std::string> kPrompts = {"Once upon a time, there was a little girl",
                                           "Tim had a red ball", "The sun was hot",
                                           "A big dog ran to the park and", "Mom said"};

// Submits kPrompts[0], waits until the executor holds its first step, submits the rest and
// waits until the scheduler has them all, then (after `before_release`) lets the step go.
std::vector<std::shared_ptr<RequestStream>> submit_behind_held_step(
    Engine& engine, ExecutorFaultControl& control, size_t num_prompts,
    const std::function<void()>& before_release = {}) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  streams.push_back(engine.submit(prompt_request(kPrompts[0], kMaxTokens)));
  EXPECT_TRUE(control.wait_until_first_step_held(kNoHangTimeout));
  for (size_t i = 1; i < num_prompts; ++i) {
    streams.push_back(engine.submit(prompt_request(kPrompts[i], kMaxTokens)));
  }
  EXPECT_TRUE(wait_for_stats(engine, [&](const EngineStats& s) {
    return s.num_running_seqs + s.num_waiting_seqs == static_cast<int>(num_prompts);
  }));
  if (before_release) before_release();
  control.release();
  return streams;
}

class FaultMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_FAULT_INJECTION();
    reference_ = reference_tokens(kPrompts, kMaxTokens, 2);
  }
  const std::vector<int32_t>& ref(size_t i) { return reference_.at(kPrompts[i]); }

  std::map<std::string, std::vector<int32_t>> reference_;
};

// One request runs at a time; its prompt step throws before computing anything. The prompt's
// full blocks were allocated (and hashed) for that step but never written: a new request with
// the same prompt must not be served them.
TEST_F(FaultMemory, ExecutorThrowOnAPromptFailsThatRequestOnlyAndServesNoUnwrittenBlock) {
  auto control = std::make_shared<ExecutorFaultControl>();
  control->hold_first_step = true;
  control->fail_when = [](const StepInput&) { return true; };  // the first step
  auto engine = Engine::start(fault_test_config(1), options_with(executor_fault_hooks(control)));
  auto streams = submit_behind_held_step(*engine, *control, 3);

  expect_failed(drain_stream(*streams[0]), ref(0), kInjectedExecutorFault, "the failed prompt");
  expect_unaffected(drain_stream(*streams[1]), ref(1), "queued request 1");
  expect_unaffected(drain_stream(*streams[2]), ref(2), "queued request 2");
  EXPECT_EQ(control->num_failures.load(), 1);

  expect_recovered(*engine, kPrompts[0], ref(0));
  engine->shutdown();
}

// Two requests decode together when the step throws (after computing it: its samples are lost);
// with overlap the next step, planned on those samples, is already queued behind it. Both end
// with the error after the tokens they had; the two queued requests run as if nothing happened.
TEST_F(FaultMemory, ExecutorThrowMidGenerationFailsThatStepsRequestsAndQueuedOnesContinue) {
  auto control = std::make_shared<ExecutorFaultControl>();
  control->hold_first_step = true;
  control->run_step_before_throwing = true;
  control->fail_when = [](const StepInput& input) {
    int decodes = 0;
    for (const ScheduledSequence& seq : input.seqs) {
      decodes += seq.num_computed_tokens > 0 && seq.new_token_ids.size() == 1 ? 1 : 0;
    }
    return decodes == 2;  // both running requests past their prompts
  };
  auto engine = Engine::start(fault_test_config(2), options_with(executor_fault_hooks(control)));
  auto streams = submit_behind_held_step(*engine, *control, 4);

  const Drained first = drain_stream(*streams[0]);
  const Drained second = drain_stream(*streams[1]);
  expect_failed(first, ref(0), kInjectedExecutorFault, "running request 0");
  expect_failed(second, ref(1), kInjectedExecutorFault, "running request 1");
  EXPECT_GE(first.tokens.size(), 1u) << "the fault came mid-generation";
  EXPECT_GE(second.tokens.size(), 1u);
  expect_unaffected(drain_stream(*streams[2]), ref(2), "queued request 2");
  expect_unaffected(drain_stream(*streams[3]), ref(3), "queued request 3");

  expect_recovered(*engine, kPrompts[1], ref(1));
  engine->shutdown();
}

// The prefix-cache actor refuses the first list that reserves a decode slot once every request
// is queued: the requests running then end with the error; the queued ones continue.
class FaultMemoryRefusal : public FaultMemory, public ::testing::WithParamInterface<bool> {};

TEST_P(FaultMemoryRefusal, RefusedOpListFailsRunningRequestsAndQueuedOnesContinue) {
  const bool overlap = GetParam();
  auto control = std::make_shared<ExecutorFaultControl>();
  control->hold_first_step = true;
  auto armed = std::make_shared<std::atomic<bool>>(false);
  auto refusals = std::make_shared<std::atomic<int>>(0);
  FaultHooks hooks = executor_fault_hooks(control);
  hooks.before_memory_op = [armed, refusals](const cache::KvMemoryOp& op) {
    const bool decode_slot =
        op.kind == cache::KvOpKind::kAppend || op.kind == cache::KvOpKind::kAppendPending;
    if (decode_slot && armed->exchange(false)) {
      refusals->fetch_add(1);
      throw std::logic_error("injected refusal: sequence " + std::to_string(op.seq) +
                             " is unknown here");
    }
  };
  auto engine = Engine::start(fault_test_config(2), options_with(std::move(hooks), overlap));
  auto streams = submit_behind_held_step(*engine, *control, 4, [&] { armed->store(true); });

  // Request 0 is running for sure (its prompt is the held step); request 1 may have been
  // admitted beside it or still be queued; with two running at most, 2 and 3 are queued.
  expect_failed(drain_stream(*streams[0]), ref(0), "injected refusal", "running request 0");
  const Drained second = drain_stream(*streams[1]);
  if (second.last.finish_reason == "error") {
    expect_failed(second, ref(1), "injected refusal", "request 1 (was running)");
  } else {
    expect_unaffected(second, ref(1), "request 1 (was queued)");
  }
  expect_unaffected(drain_stream(*streams[2]), ref(2), "queued request 2");
  expect_unaffected(drain_stream(*streams[3]), ref(3), "queued request 3");
  EXPECT_EQ(refusals->load(), 1);

  expect_recovered(*engine, kPrompts[0], ref(0));
  engine->shutdown();
}

INSTANTIATE_TEST_SUITE_P(FaultOverlap, FaultMemoryRefusal, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("On") : std::string("Off");
                         });

// A step that cannot be handed to the executor (its inbox closed, as at shutdown) never runs,
// yet its memory ops were applied: it is recovered from as a failed step.
TEST_F(FaultMemory, StepThatCannotBeSentFailsItsRequestsAndQueuedOnesContinue) {
  auto control = std::make_shared<ExecutorFaultControl>();
  control->hold_first_step = true;
  auto armed = std::make_shared<std::atomic<bool>>(false);
  FaultHooks hooks = executor_fault_hooks(control);
  hooks.fail_send = [armed](ChannelSend send) {
    return send == ChannelSend::kExecuteStep && armed->exchange(false);
  };
  auto engine = Engine::start(fault_test_config(1), options_with(std::move(hooks)));
  auto streams = submit_behind_held_step(*engine, *control, 3, [&] { armed->store(true); });

  expect_failed(drain_stream(*streams[0]), ref(0), "could not be sent to the executor",
                "the running request");
  expect_unaffected(drain_stream(*streams[1]), ref(1), "queued request 1");
  expect_unaffected(drain_stream(*streams[2]), ref(2), "queued request 2");

  expect_recovered(*engine, kPrompts[0], ref(0));
  engine->shutdown();
}

}  // namespace
}  // namespace pagedserve::actors
