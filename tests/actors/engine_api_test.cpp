// Engine, the asynchronous actor system behind the in-process client API, end to end on
// stories260K: the known greedy story as a stream of text deltas, 32 concurrent requests from
// several client threads (each equal to the same prompt run alone), aborts by id, by stream
// and by dropping the stream (every KV block free afterwards), invalid requests as error
// events, the callback form, submit's backpressure, shutdown with requests in flight, and
// overlap on/off. Also run under ThreadSanitizer by .ci/run.
#include "actors/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "actors/llm_engine.h"
#include "tests/test_paths.h"

namespace pagedserve::actors {
namespace {

using namespace std::chrono_literals;

EngineConfig stories_config() {
  EngineConfig config;
  config.model_dir = testing::stories260k_dir();
  config.num_kv_blocks = 256;
  return config;
}

model::SamplingParams greedy(int max_tokens, bool ignore_eos = false) {
  model::SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  return p;
}

GenerateRequest request(std::string prompt, model::SamplingParams sampling) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling = std::move(sampling);
  return r;
}

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  TokenEvent last;
  int num_final_events = 0;
  bool ids_match = true;  // every event carried the stream's request id
};

Collected drain(RequestStream& stream) {
  Collected out;
  while (std::optional<TokenEvent> event = stream.next()) {
    out.tokens.insert(out.tokens.end(), event->token_ids.begin(), event->token_ids.end());
    out.text += event->text;
    out.ids_match = out.ids_match && event->request_id == stream.request_id();
    if (event->finished) {
      ++out.num_final_events;
      out.last = *event;
    }
  }
  return out;
}

// Polls the engine's stats until `done` holds (the scheduler publishes them asynchronously).
bool wait_for_stats(const Engine& engine, const std::function<bool(const EngineStats&)>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done(engine.stats())) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

bool idle_and_all_blocks_free(const EngineStats& s) {
  return s.num_unfinished_requests == 0 && s.num_running_seqs == 0 && s.num_waiting_seqs == 0 &&
         s.num_kv_blocks_used == 0 && s.num_kv_blocks_free == s.num_kv_blocks_total;
}

const std::vector<std::string> kPrompts = {
    "Once upon a time",   "Lily and Tom",    "The cat sat", "One day, a little bird",
    "Tim had a red ball", "The sun was hot", "Mom said",    "A big dog ran to the park and"};

TEST(EngineApi, GreedyStreamIsTheKnownStory) {
  auto engine = Engine::start(stories_config());
  auto stream = engine->submit(request("Once upon a time", greedy(40)));
  const Collected got = drain(*stream);
  EXPECT_EQ(got.text.rfind(", there was a little girl named Lily.", 0), 0u) << got.text;
  EXPECT_EQ(got.text, engine->tokenizer().decode(got.tokens, /*skip_special_tokens=*/true));
  EXPECT_EQ(got.tokens.size(), 40u);
  EXPECT_EQ(got.num_final_events, 1);
  EXPECT_EQ(got.last.finish_reason, "length");
  EXPECT_EQ(got.last.num_prompt_tokens, 5);
  EXPECT_TRUE(got.last.error.empty());
  EXPECT_TRUE(got.ids_match);
  EXPECT_TRUE(stream->finished());
  EXPECT_FALSE(stream->next().has_value()) << "nothing after the final event";
  EXPECT_TRUE(wait_for_stats(*engine, idle_and_all_blocks_free));
  EXPECT_EQ(engine->stats().num_generated_tokens, 40);
}

TEST(EngineApi, ThirtyTwoConcurrentRequestsFromFourThreadsEachGetTheirOwnStream) {
  auto engine = Engine::start(stories_config());
  const int kMaxTokens = 32;
  // The reference: each prompt alone (a batch of one, as the synchronous loop would run it).
  std::vector<Collected> alone;
  for (const std::string& prompt : kPrompts) {
    alone.push_back(drain(*engine->submit(request(prompt, greedy(kMaxTokens)))));
  }

  constexpr int kThreads = 4;
  constexpr int kRequests = 32;
  std::vector<Collected> results(kRequests);
  std::vector<uint64_t> ids(kRequests);
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      // Submit all of this thread's requests first so that all 32 run together.
      std::vector<std::pair<int, std::shared_ptr<RequestStream>>> mine;
      for (int i = t; i < kRequests; i += kThreads) {
        mine.emplace_back(
            i, engine->submit(request(kPrompts[i % kPrompts.size()], greedy(kMaxTokens))));
      }
      for (auto& [i, stream] : mine) {
        ids[i] = stream->request_id();
        results[i] = drain(*stream);
      }
    });
  }
  for (std::thread& client : clients) client.join();

  EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), static_cast<size_t>(kRequests));
  for (int i = 0; i < kRequests; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const Collected& want = alone[i % kPrompts.size()];
    EXPECT_EQ(results[i].tokens, want.tokens);
    EXPECT_EQ(results[i].text, want.text);
    EXPECT_EQ(results[i].last.finish_reason, want.last.finish_reason);
    EXPECT_EQ(results[i].num_final_events, 1);
    EXPECT_TRUE(results[i].ids_match);
  }
  EXPECT_TRUE(wait_for_stats(*engine, idle_and_all_blocks_free));
}

TEST(EngineApi, AbortMidStreamEndsWithAbortAndFreesEveryBlock) {
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    EngineOptions options;
    options.overlap = overlap;
    auto engine = Engine::start(stories_config(), options);
    auto stream = engine->submit(request("Once upon a time", greedy(400, /*ignore_eos=*/true)));
    for (int i = 0; i < 3; ++i) {
      std::optional<TokenEvent> event = stream->next();
      ASSERT_TRUE(event.has_value());
      ASSERT_FALSE(event->finished);
    }
    engine->abort(stream->request_id());
    const Collected rest = drain(*stream);
    EXPECT_EQ(rest.last.finish_reason, "abort");
    EXPECT_EQ(rest.num_final_events, 1);
    const EngineStats stats = engine->stats();
    EXPECT_EQ(stats.num_running_seqs, 0);
    if (!overlap) {
      // One step in flight at most, retired by the update that ends the request: the scheduler
      // frees the blocks, and publishes that, before the final event goes out.
      EXPECT_EQ(stats.num_kv_blocks_used, 0);
      EXPECT_EQ(stats.num_kv_blocks_free, stats.num_kv_blocks_total);
    }
    // With overlap the step queued behind the running one may still hold the request: its
    // blocks come back when that step is retired, a step later (never leaked).
    EXPECT_TRUE(wait_for_stats(*engine, idle_and_all_blocks_free));
  }
  auto engine = Engine::start(stories_config());

  // The same through the stream's own abort(), and aborting twice or late is harmless.
  auto second = engine->submit(request("Lily and Tom", greedy(400, true)));
  ASSERT_TRUE(second->next().has_value());
  second->abort();
  second->abort();
  EXPECT_EQ(drain(*second).last.finish_reason, "abort");
  second->abort();
  engine->abort(second->request_id());
  engine->abort(123456789);
  EXPECT_TRUE(wait_for_stats(*engine, idle_and_all_blocks_free));
}

TEST(EngineApi, DroppingAStreamAbortsItsRequest) {
  auto engine = Engine::start(stories_config());
  {
    auto stream = engine->submit(request("Once upon a time", greedy(400, true)));
    ASSERT_TRUE(stream->next().has_value());
    ASSERT_TRUE(stream->next().has_value());
  }
  // Dropped before the first event, and before the tokenizer even saw it.
  for (int i = 0; i < 8; ++i) engine->submit(request(kPrompts[i], greedy(400, true)));
  EXPECT_TRUE(wait_for_stats(*engine, idle_and_all_blocks_free));
  EXPECT_LT(engine->stats().num_generated_tokens, 8 * 400);
}

// Parallel sampling streams each output under its own index; beam search, which knows its
// outputs only at the end, sends them all just before the final event.
TEST(EngineApi, MultipleOutputsStreamUnderTheirIndex) {
  auto engine = Engine::start(stories_config());
  for (bool beam : {false, true}) {
    SCOPED_TRACE(beam ? "beam search" : "n = 2 sampling");
    model::SamplingParams p = greedy(10, /*ignore_eos=*/true);
    p.n = 2;
    if (beam) {
      p.use_beam_search = true;
    } else {
      p.temperature = 1.0f;
      p.seed = 7;
    }
    auto stream = engine->submit(request("Once upon a time", p));
    std::map<int, std::vector<int32_t>> tokens;
    TokenEvent last;
    while (std::optional<TokenEvent> event = stream->next()) {
      tokens[event->index].insert(tokens[event->index].end(), event->token_ids.begin(),
                                  event->token_ids.end());
      if (event->finished) last = *event;
    }
    EXPECT_EQ(last.finish_reason, "length") << last.error;
    ASSERT_EQ(tokens.size(), 2u);
    EXPECT_EQ(tokens[0].size(), 10u);
    EXPECT_EQ(tokens[1].size(), 10u);
    EXPECT_NE(tokens[0], tokens[1]);
  }
  EXPECT_TRUE(wait_for_stats(*engine, idle_and_all_blocks_free));
}

TEST(EngineApi, InvalidRequestsEndWithOneErrorEvent) {
  EngineConfig config = stories_config();
  config.max_model_len = 64;
  auto engine = Engine::start(config);
  auto expect_error = [&](GenerateRequest r, const std::string& needle) {
    SCOPED_TRACE(needle);
    auto stream = engine->submit(std::move(r));
    const Collected got = drain(*stream);
    EXPECT_EQ(got.num_final_events, 1);
    EXPECT_TRUE(got.tokens.empty());
    EXPECT_EQ(got.last.finish_reason, "error");
    EXPECT_NE(got.last.error.find(needle), std::string::npos) << got.last.error;
  };
  expect_error(request("", greedy(5)), "at least one token");
  GenerateRequest ids = request("", greedy(5));
  ids.prompt_token_ids = {1, 5000};
  expect_error(ids, "outside the vocabulary");
  ids.prompt_token_ids = std::vector<int32_t>(64, 5);
  expect_error(ids, "max_model_len");
  model::SamplingParams bad = greedy(5);
  bad.top_p = 3.0f;
  expect_error(request("Once upon a time", bad), "top_p");
  // Token ids win over the text when both are given.
  ids.prompt_token_ids = {1, 403, 407, 261, 378};
  ids.prompt = "ignored";
  ids.sampling = greedy(8);
  const Collected got = drain(*engine->submit(ids));
  EXPECT_EQ(got.text.rfind(", there was", 0), 0u) << got.text;
  EXPECT_TRUE(wait_for_stats(*engine, idle_and_all_blocks_free));
}

TEST(EngineApi, CallbackGetsEveryEventInOrderOnAnotherThread) {
  auto engine = Engine::start(stories_config());
  std::mutex mu;
  std::condition_variable done_cv;
  std::vector<TokenEvent> events;
  bool done = false;
  const std::thread::id client = std::this_thread::get_id();
  std::atomic<bool> on_client_thread{false};
  auto stream = engine->submit(request("Once upon a time", greedy(20)), [&](TokenEvent event) {
    if (std::this_thread::get_id() == client) on_client_thread = true;
    std::lock_guard lock(mu);
    done = event.finished;
    events.push_back(std::move(event));
    done_cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(done_cv.wait_for(lock, 20s, [&] { return done; }));
  }
  EXPECT_FALSE(on_client_thread);
  EXPECT_FALSE(stream->next().has_value()) << "callback mode queues nothing";
  std::string text;
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].finished, i + 1 == events.size());
    text += events[i].text;
    tokens.insert(tokens.end(), events[i].token_ids.begin(), events[i].token_ids.end());
  }
  EXPECT_EQ(tokens.size(), 20u);
  EXPECT_EQ(text.rfind(", there was a little girl named Lily.", 0), 0u) << text;
}

TEST(EngineApi, SubmitBlocksWhileTooManyRequestsAreUnfinished) {
  EngineOptions options;
  options.max_unfinished_requests = 2;
  auto engine = Engine::start(stories_config(), options);
  // stories260K finishes any request in milliseconds, so hold two unfinished by stalling the
  // tokenizer thread in the first one's callback (a callback must not block; here that is
  // the point).
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  auto first = engine->submit(request("Once upon a time", greedy(8)), [&](TokenEvent) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return release; });
  });
  auto second = engine->submit(request("Lily and Tom", greedy(8)));
  std::atomic<bool> third_returned{false};
  std::shared_ptr<RequestStream> third;
  std::thread client([&] {
    third = engine->submit(request("The cat sat", greedy(4)));
    third_returned = true;
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(third_returned) << "submit must wait while 2 requests are unfinished";
  EXPECT_EQ(engine->stats().num_unfinished_requests, 2);
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  client.join();
  EXPECT_TRUE(third_returned);
  EXPECT_EQ(drain(*third).last.finish_reason, "length");
  EXPECT_EQ(drain(*second).last.finish_reason, "length");
  EXPECT_TRUE(wait_for_stats(*engine, idle_and_all_blocks_free));
}

TEST(EngineApi, ShutdownWithRequestsInFlightEndsEveryStreamAndRefusesNewOnes) {
  auto engine = Engine::start(stories_config());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const std::string& prompt : kPrompts) {
    streams.push_back(engine->submit(request(prompt, greedy(400, true))));
  }
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(streams[i]->next().has_value());
  engine->shutdown();  // returns once every actor thread is joined
  for (auto& stream : streams) {
    const Collected rest = drain(*stream);
    EXPECT_EQ(rest.num_final_events, 1);
    EXPECT_EQ(rest.last.finish_reason, "abort");
  }
  const Collected late = drain(*engine->submit(request("Once upon a time", greedy(5))));
  EXPECT_EQ(late.last.finish_reason, "error");
  EXPECT_NE(late.last.error.find("shut down"), std::string::npos) << late.last.error;
  EXPECT_EQ(engine->stats().num_unfinished_requests, 0);
  engine->shutdown();  // idempotent
}

TEST(EngineActors, OverlapOnAndOffGiveTheSameOutputAndBothMeasureTheExecutor) {
  std::vector<std::vector<int32_t>> outputs[2];
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "no overlap");
    EngineOptions options;
    options.overlap = overlap;
    auto engine = Engine::start(stories_config(), options);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const std::string& prompt : kPrompts) {
      streams.push_back(engine->submit(request(prompt, greedy(24))));
    }
    for (auto& stream : streams) outputs[overlap].push_back(drain(*stream).tokens);
    const EngineStats stats = engine->stats();
    EXPECT_GE(stats.num_steps, 24);
    EXPECT_GT(stats.executor_busy_s, 0.0);
    EXPECT_GE(stats.executor_idle_s, 0.0);
    EXPECT_EQ(stats.num_steps_planned_ahead > 0, overlap);
    // Every stage of a served step was timed, and the executor's stages fit in its busy time.
    const StageSeconds& s = stats.stage_s;
    for (double stage : {s.schedule, s.forward, s.sampling, s.process_outputs, s.detokenize}) {
      EXPECT_GT(stage, 0.0);
    }
    EXPECT_LE(s.copies + s.forward + s.sampling, stats.executor_busy_s * 1.0001);
  }
  EXPECT_EQ(outputs[0], outputs[1]);
}

// Through the actors, under memory pressure in both preemption modes: seeded sampling, n > 1,
// stop strings and penalties give every output the same tokens and text with overlap on and
// off, and the same as the synchronous engine (LlmEngine) running them one at a time.
TEST(EngineActors, OverlapKeepsSampledParallelAndStoppedOutputsUnderPressure) {
  std::vector<GenerateRequest> requests;
  for (size_t i = 0; i < 16; ++i) {
    model::SamplingParams p;
    p.temperature = 0.9f;
    p.seed = 40 + i;
    p.max_tokens = 10 + static_cast<int>(i * 7) % 30;
    if (i % 3 == 1) p.n = 2;
    if (i % 4 == 2) p.stop = {"Lily", " the"};
    if (i % 5 == 3) p.frequency_penalty = 0.4f;
    requests.push_back(request(kPrompts[i % kPrompts.size()], p));
  }
  // Reference: each request alone on the synchronous engine, outputs by index.
  std::vector<std::map<int, std::pair<std::vector<int32_t>, std::string>>> expected;
  {
    LlmEngine reference(stories_config());
    for (const GenerateRequest& r : requests) {
      const uint64_t id = reference.add_request(reference.tokenizer().encode(r.prompt), r.sampling);
      auto& outputs = expected.emplace_back();
      while (reference.has_unfinished_requests()) {
        for (const RequestOutput& out : reference.step()) {
          if (out.request_id != id || !out.finished) continue;
          for (const CompletionOutput& c : out.outputs) outputs[c.index] = {c.token_ids, c.text};
        }
      }
    }
  }
  for (auto [mode, overlap] :
       {std::pair{PreemptionMode::kSwap, true}, std::pair{PreemptionMode::kRecompute, true},
        std::pair{PreemptionMode::kSwap, false}}) {
    SCOPED_TRACE(std::string(preemption_mode_name(mode)) + (overlap ? ", overlap" : ""));
    EngineConfig config = stories_config();
    config.num_kv_blocks = 24;
    config.max_model_len = 96;
    config.preemption_mode = mode;
    if (mode == PreemptionMode::kSwap) config.swap_space_bytes = int64_t{8} << 20;
    EngineOptions options;
    options.overlap = overlap;
    auto engine = Engine::start(config, options);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerateRequest& r : requests) streams.push_back(engine->submit(r));
    for (size_t i = 0; i < streams.size(); ++i) {
      std::map<int, std::pair<std::vector<int32_t>, std::string>> got;
      while (std::optional<TokenEvent> event = streams[i]->next()) {
        auto& [tokens, text] = got[event->index];
        tokens.insert(tokens.end(), event->token_ids.begin(), event->token_ids.end());
        text += event->text;
        if (event->finished) {
          EXPECT_NE(event->finish_reason, "error") << event->error;
        }
      }
      // Streams stop at a stop string; compare the text, and the tokens up to where it ended.
      ASSERT_EQ(got.size(), expected[i].size()) << "request " << i;
      for (const auto& [index, want] : expected[i]) {
        EXPECT_EQ(got[index].second, want.second) << "request " << i << " output " << index;
        const std::vector<int32_t>& tokens = got[index].first;
        ASSERT_LE(tokens.size(), want.first.size()) << "request " << i << " output " << index;
        EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), want.first.begin()))
            << "request " << i << " output " << index;
      }
    }
    const EngineStats stats = engine->stats();
    EXPECT_GT(stats.num_preemptions_swap + stats.num_preemptions_recompute, 0);
    if (overlap) {
      EXPECT_GT(stats.num_steps_planned_ahead, 0);
    } else {
      EXPECT_EQ(stats.num_steps_planned_ahead, 0);
    }
    EXPECT_TRUE(wait_for_stats(*engine, idle_and_all_blocks_free));
  }
}

}  // namespace
}  // namespace pagedserve::actors

namespace pagedserve::actors {
namespace {

// Stop strings through the actors: the same text as the synchronous engine (which the
// OutputProcessor handles), the stop string and what follows never streamed, finish "stop",
// and the request's blocks freed once the stop is seen.
TEST(EngineApi, StopStringEndsTheStreamLikeTheSynchronousEngine) {
  model::SamplingParams p = greedy(60, true);
  p.stop = {"girl named"};
  LlmEngine reference(stories_config());
  const uint64_t id = reference.add_request(reference.tokenizer().encode("Once upon a time"), p);
  std::string expected;
  std::string expected_reason;
  while (reference.has_unfinished_requests()) {
    for (const RequestOutput& out : reference.step()) {
      if (out.request_id == id && out.finished) {
        expected = out.outputs.at(0).text;
        expected_reason = finish_reason_name(out.outputs.at(0).finish_reason);
      }
    }
  }
  ASSERT_EQ(expected, ", there was a little ");
  ASSERT_EQ(expected_reason, "stop");

  auto engine = Engine::start(stories_config());
  auto stream = engine->submit(request("Once upon a time", p));
  const Collected got = drain(*stream);
  EXPECT_EQ(got.text, expected);
  EXPECT_EQ(got.last.finish_reason, "stop");
  EXPECT_TRUE(got.last.sequence_finished);
  EXPECT_EQ(got.num_final_events, 1);
  EXPECT_TRUE(wait_for_stats(*engine, idle_and_all_blocks_free));
}

// n = 3: every output ends with its own sequence_finished event before the stream's last.
TEST(EngineApi, EveryOutputReportsItsOwnEnd) {
  auto engine = Engine::start(stories_config());
  model::SamplingParams p;
  p.n = 3;
  p.temperature = 1.0f;
  p.seed = 7;
  p.max_tokens = 12;
  p.ignore_eos = true;
  auto stream = engine->submit(request("Once upon a time", p));
  std::map<int, int> ends;
  std::map<int, size_t> tokens;
  int finals = 0;
  while (std::optional<TokenEvent> event = stream->next()) {
    tokens[event->index] += event->token_ids.size();
    if (event->sequence_finished) {
      ++ends[event->index];
      EXPECT_EQ(event->finish_reason, "length");
    }
    finals += event->finished;
  }
  EXPECT_EQ(finals, 1);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ends[i], 1) << "output " << i;
    EXPECT_EQ(tokens[i], 12u) << "output " << i;
  }
}

}  // namespace
}  // namespace pagedserve::actors
