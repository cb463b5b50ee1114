// The usage object of a request that had speculative proposals: a "speculative_decoding"
// entry with the request's proposed and accepted tokens (the largest the events reported, as
// they are running totals), and none for a request without proposals.
#include <gtest/gtest.h>

#include "net/protocol/response_assembler.h"
#include "net/protocol/websocket.h"

namespace pagedserve::net {
namespace {

using nlohmann::json;

GenerationRequest one_prompt() {
  GenerationRequest req;
  req.endpoint = Endpoint::kCompletions;
  req.model = "m";
  actors::GenerateRequest prompt;
  prompt.prompt_token_ids = {1, 2, 3};
  req.prompts.push_back(prompt);
  req.prompt_texts.push_back("P");
  return req;
}

actors::TokenEvent event(std::vector<int32_t> ids, int64_t proposed, int64_t accepted, bool last) {
  actors::TokenEvent e;
  e.token_ids = std::move(ids);
  e.text = "t";
  e.num_prompt_tokens = 3;
  e.num_proposed_tokens = proposed;
  e.num_accepted_tokens = accepted;
  e.finished = last;
  e.sequence_finished = last;
  if (last) e.finish_reason = "length";
  return e;
}

TEST(SpeculativeUsage, ReportsTheRequestsProposedAndAcceptedTokens) {
  ResponseAssembler a(one_prompt(), "cmpl-s", 1);
  a.on_event(0, event({4, 5, 6}, 0, 0, false));
  a.on_event(0, event({7, 8}, 4, 2, false));
  a.on_event(0, event({9}, 8, 3, true));
  ASSERT_TRUE(a.done());
  const json usage = json::parse(a.response().body)["usage"];
  EXPECT_EQ(usage["completion_tokens"], 6);
  const json expected = {
      {"proposed_tokens", 8}, {"accepted_tokens", 3}, {"acceptance_rate", 3.0 / 8.0}};
  EXPECT_EQ(usage["speculative_decoding"], expected);
}

TEST(SpeculativeUsage, AbsentWithoutProposals) {
  ResponseAssembler a(one_prompt(), "cmpl-n", 1);
  a.on_event(0, event({4}, 0, 0, true));
  ASSERT_TRUE(a.done());
  EXPECT_FALSE(json::parse(a.response().body)["usage"].contains("speculative_decoding"));
}

// The WebSocket protocol's done frame carries the same entry (docs/websocket-protocol.md).
TEST(SpeculativeUsage, TheWebSocketDoneFrameReportsThemToo) {
  WsResponseStream with("w", one_prompt());
  with.on_event(0, event({4, 5}, 4, 1, false));
  std::vector<std::string> frames = with.on_event(0, event({6}, 6, 2, true));
  ASSERT_FALSE(frames.empty());
  const json done = json::parse(frames.back());
  ASSERT_EQ(done["type"], "done");
  const json expected = {
      {"proposed_tokens", 6}, {"accepted_tokens", 2}, {"acceptance_rate", 2.0 / 6.0}};
  EXPECT_EQ(done["usage"]["speculative_decoding"], expected);
  EXPECT_EQ(done["usage"]["completion_tokens"], 3);

  WsResponseStream without("v", one_prompt());
  frames = without.on_event(0, event({4}, 0, 0, true));
  ASSERT_FALSE(frames.empty());
  EXPECT_FALSE(json::parse(frames.back())["usage"].contains("speculative_decoding"));
}

}  // namespace
}  // namespace pagedserve::net
