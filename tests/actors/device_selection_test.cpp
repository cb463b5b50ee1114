// --device resolution: cpu always works, auto falls back to cpu without a GPU (or without a
// CUDA build), and cuda without one fails at once with a message saying why.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "actors/engine_setup.h"
#include "actors/llm_engine.h"
#include "tests/actors/engine_test_util.h"

namespace pagedserve::actors {
namespace {

TEST(DeviceSelection, CpuAndAutoResolve) {
  EXPECT_EQ(resolve_device("cpu"), "cpu");
  const std::string automatic = resolve_device("auto");
  EXPECT_TRUE(automatic == "cpu" || automatic == "cuda") << automatic;
}

TEST(DeviceSelection, UnknownDeviceIsRefusedByName) {
  try {
    resolve_device("tpu");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'tpu'"), std::string::npos) << e.what();
  }
}

TEST(DeviceSelection, CudaWithoutADeviceFailsClearly) {
  if (resolve_device("auto") == "cuda") GTEST_SKIP() << "a CUDA device is visible here";
  try {
    resolve_device("cuda");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("no CUDA device") != std::string::npos ||
                what.find("built without CUDA") != std::string::npos)
        << what;
  }
  EngineConfig config = testing_util::stories_config();
  config.device = "cuda";
  EXPECT_THROW(LlmEngine engine(config), std::invalid_argument);
}

TEST(DeviceSelection, AutoWithoutADeviceRunsOnTheCpu) {
  if (resolve_device("auto") == "cuda") GTEST_SKIP() << "a CUDA device is visible here";
  EngineConfig config = testing_util::stories_config();
  config.device = "auto";
  LlmEngine engine(config);
  EXPECT_EQ(engine.config().device, "cpu");
  engine.add_request({1, 403, 407}, testing_util::greedy(4));
  const auto finished = testing_util::run_to_completion(engine);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished.begin()->second.tokens().size(), 4u);
}

}  // namespace
}  // namespace pagedserve::actors
