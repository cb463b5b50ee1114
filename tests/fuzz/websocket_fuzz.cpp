// Fuzzes the WebSocket protocol: a client text frame (parse_ws_client_frame), then, for a start
// frame, a script of engine events, cancels and failures fed to WsResponseStream, as
// ws_session.cpp would. The input is the frame, then the script (FuzzedDataProvider).
//
// Checks, from docs/websocket-protocol.md: parsing never throws; an invalid frame's error has a
// message; a start frame's id is non-empty and at most kMaxWsClientIdBytes, and its request is
// runnable; every server frame is a JSON object of a known type carrying the request's id; a
// choice gets at most one done frame; nothing follows the end of the request; once every prompt
// has had its final event, the request has ended with one done frame per choice (or an error).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <set>

#include "net/protocol/websocket.h"
#include "tests/fuzz/served_models.h"

using namespace pagedserve;

namespace {

struct FrameTally {
  std::set<int> done_choices;
  int errors = 0;
};

void check_frames(const std::vector<std::string>& frames, const net::WsStart& start, bool was_done,
                  FrameTally& tally) {
  FUZZ_CHECK(!was_done || frames.empty(), "frames after the request ended");
  const int num_choices = static_cast<int>(start.request.num_choices());
  for (const std::string& text : frames) {
    const nlohmann::json frame = nlohmann::json::parse(text, nullptr, false);
    FUZZ_CHECK(frame.is_object() && frame.contains("type") && frame.contains("id"), text);
    FUZZ_CHECK(frame["id"] == start.id, text);
    const std::string type = frame["type"];
    if (type == "error") {
      ++tally.errors;
      continue;
    }
    FUZZ_CHECK(type == "token" || type == "done", text);
    const int index = frame.at("index");
    FUZZ_CHECK(index >= 0 && index < num_choices, text);
    FUZZ_CHECK(tally.errors == 0, "a frame after the error frame: " + text);
    FUZZ_CHECK(!tally.done_choices.contains(index), "a frame after the choice's done: " + text);
    if (type == "done") tally.done_choices.insert(index);
  }
}

void run_script(FuzzedDataProvider& script, const net::WsStart& start) {
  net::WsResponseStream stream(start.id, start.request);
  FrameTally tally;
  const size_t num_prompts = start.request.prompts.size();
  std::vector<bool> prompt_finished(num_prompts, false);
  size_t num_finished = 0;
  std::vector<bool> choice_finished(start.request.num_choices(), false);
  bool interrupted = false;  // cancelled or failed: the engine's remaining events still come
  while (script.remaining_bytes() > 0 && num_finished < num_prompts) {
    const bool was_done = stream.done();
    const uint8_t action = script.ConsumeIntegral<uint8_t>();
    if (action == 0) {
      check_frames(stream.cancel(), start, was_done, tally);
      interrupted = true;
      continue;
    }
    if (action == 1) {
      const std::string frame = stream.fail(net::ws_slow_reader_error());
      if (!frame.empty()) check_frames({frame}, start, was_done, tally);
      FUZZ_CHECK(stream.done(), "fail() did not end the request");
      interrupted = true;
      continue;
    }
    const size_t prompt = script.ConsumeIntegralInRange<size_t>(0, num_prompts - 1);
    if (prompt_finished[prompt]) continue;  // the engine sends nothing after the final event
    actors::TokenEvent event;
    event.index = script.ConsumeIntegralInRange<int>(0, start.request.n - 1);
    // The engine sends nothing more for an output after its sequence_finished event.
    const size_t choice = prompt * static_cast<size_t>(start.request.n) + event.index;
    if (choice_finished[choice]) continue;
    const int num_tokens = script.ConsumeIntegralInRange<int>(0, 3);
    for (int i = 0; i < num_tokens; ++i)
      event.token_ids.push_back(script.ConsumeIntegral<uint16_t>());
    event.text = script.ConsumeRandomLengthString(16);
    event.sequence_finished = script.ConsumeBool();
    event.finished = script.ConsumeBool();
    if (event.sequence_finished || event.finished) {
      event.finish_reason = script.PickValueInArray({"stop", "length", "abort", "error"});
      if (event.finish_reason == "error") event.error = "engine error";
    }
    event.num_prompt_tokens =
        static_cast<int>(start.request.prompts[prompt].prompt_token_ids.size());
    check_frames(stream.on_event(prompt, event), start, was_done, tally);
    if (event.sequence_finished) choice_finished[choice] = true;
    if (event.finished) {
      prompt_finished[prompt] = true;
      ++num_finished;
    }
  }
  if (num_finished == num_prompts) {
    FUZZ_CHECK(stream.done(), "every prompt finished but the request has not ended");
    if (!interrupted && tally.errors == 0) {
      FUZZ_CHECK(tally.done_choices.size() == start.request.num_choices(),
                 std::to_string(tally.done_choices.size()) + " done frames for " +
                     std::to_string(start.request.num_choices()) + " choices");
    }
  }
  FUZZ_CHECK(tally.errors <= 1, "more than one error frame");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::stories_model();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider provider(data, size);
  const std::string text = provider.ConsumeRandomLengthString(size);
  const net::ServedModel& served = fuzz::stories_model();
  net::WsClientFrame frame = net::parse_ws_client_frame(text, served);
  if (const auto* invalid = std::get_if<net::WsInvalid>(&frame)) {
    FUZZ_CHECK(!invalid->error.message.empty(), "invalid frame without a message");
    const nlohmann::json error =
        nlohmann::json::parse(net::ws_error_frame(invalid->id, invalid->error));
    FUZZ_CHECK(error.at("type") == "error", text);
  } else if (const auto* cancel = std::get_if<net::WsCancel>(&frame)) {
    FUZZ_CHECK(!cancel->id.empty() && cancel->id.size() <= net::kMaxWsClientIdBytes, cancel->id);
  } else if (const auto* subscription = std::get_if<net::WsSubscribe>(&frame)) {
    FUZZ_CHECK(subscription->topic == net::kWsTopicKv, subscription->topic);
  } else {
    const auto& start = std::get<net::WsStart>(frame);
    FUZZ_CHECK(!start.id.empty() && start.id.size() <= net::kMaxWsClientIdBytes, start.id);
    fuzz::check_generation_request(start.request, served);
    run_script(provider, start);
  }
  return 0;
}
