// The CPU executor's checks on what it is asked to run.
#include "actors/cpu_executor.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "actors/engine_setup.h"
#include "tests/actors/engine_test_util.h"

namespace pagedserve::actors {
namespace {

// A sampling row must carry its params (ScheduledSequence::sampling): without them the
// executor refuses the step by name instead of dereferencing null.
TEST(CpuExecutor, ASamplingRowWithoutParamsIsRefused) {
  EngineSetup setup = set_up_engine(testing_util::stories_config());
  StepInput step;
  ScheduledSequence seq;
  seq.request_id = 1;
  seq.seq_id = 7;
  seq.new_token_ids = {1, 403, 407};
  seq.block_table = {0};
  seq.sample = true;
  seq.sample_seeds = {1};
  step.seqs.push_back(seq);
  try {
    setup.executor->execute(step);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 7 samples but has no sampling params"),
              std::string::npos)
        << e.what();
  }
  model::SamplingParams greedy;
  greedy.temperature = 0.0f;
  step.seqs[0].sampling = std::make_shared<const model::SamplingParams>(greedy);
  const StepOutput out = setup.executor->execute(step);
  ASSERT_EQ(out.seqs.size(), 1u);
  EXPECT_EQ(out.seqs[0].samples.size(), 1u);
}

}  // namespace
}  // namespace pagedserve::actors
