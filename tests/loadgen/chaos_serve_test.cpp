// Each chaos client kind against a real `pagedserve serve` on stories260K: it does what its
// name says and gets the answer the README and docs/websocket-protocol.md promise (400, 413,
// a closed idle socket, abort done frames, a request counted as aborted), and afterwards the
// server holds no request and no KV block. Then `pagedserve bench soak` end to end, briefly.
// Nothing here is timed: waits are bounded "no hang" checks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/test_paths.h"
#include "tools/loadgen/chaos_client.h"
#include "tools/loadgen/client.h"
#include "tools/loadgen/server_process.h"

namespace pagedserve::loadgen {
namespace {

// pagedserve_request_success_total{finish_reason="REASON"} in a /metrics text; -1 if absent.
double finished_with(const std::string& metrics, const std::string& reason) {
  const std::regex line("pagedserve_request_success_total\\{finish_reason=\"" + reason +
                        "\"\\} ([0-9.e+]+)");
  std::smatch match;
  return std::regex_search(metrics, match, line) ? std::stod(match[1]) : -1;
}

class ChaosAgainstServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::filesystem::path model = pagedserve::testing::stories260k_dir();
    if (!std::filesystem::exists(PAGEDSERVE_BINARY) || !std::filesystem::exists(model)) return;
    log_ = std::filesystem::temp_directory_path() / ("chaos_serve_" + std::to_string(getpid()));
    server_ = new ServerProcess(start_server(PAGEDSERVE_BINARY,
                                             {"--model", model.string(), "--log-interval", "0",
                                              "--idle-timeout", "1", "--max-body-bytes", "64K"},
                                             log_.string(), 120));
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      kill(server_->pid, SIGTERM);
      wait_for_exit(server_->pid, 60);
      delete server_;
      server_ = nullptr;
      std::filesystem::remove(log_);
    }
  }
  void SetUp() override {
    if (server_ == nullptr) GTEST_SKIP() << "pagedserve or stories260K is missing";
  }

  // One client of `kind`, its trace request a 16-token forced completion; streams that get cut
  // or cancelled are `misbehaving_max_tokens` long.
  ChaosResult play(ChaosKind kind, int64_t misbehaving_max_tokens = 48) {
    OutgoingRequest request;
    request.payload = {{"model", "stories260K"},
                       {"prompt", "Once upon a time"},
                       {"max_tokens", 16},
                       {"ignore_eos", true}};
    request.max_tokens = 16;
    ChaosClientOptions options;
    options.base_url = server_->base_url;
    options.model = "stories260K";
    options.max_body_bytes = 64 << 10;
    options.idle_deadline_s = 60;  // the server's idle timeout is 1 s
    options.slow_read_for_s = 0.5;
    options.misbehaving_max_tokens = misbehaving_max_tokens;
    auto results = run_chaos(options, {kind}, {request}, {0.0});
    return results.at(0);
  }

  std::string metrics() { return http_fetch(server_->base_url, "/metrics", "", "", 10).body; }

  // Waits (60 s at most) for nothing running or waiting and every KV block free.
  bool settled() {
    for (int i = 0; i < 600; ++i) {
      const std::string text = metrics();
      if (prometheus_value(text, "pagedserve_num_requests_running") == 0 &&
          prometheus_value(text, "pagedserve_num_requests_waiting") == 0 &&
          prometheus_value(text, "pagedserve_kv_blocks_free") ==
              prometheus_value(text, "pagedserve_kv_blocks_total")) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // Waits (60 s at most) for the aborted-request count to pass `before`.
  double aborted_after(double before) {
    for (int i = 0; i < 600; ++i) {
      const double now = finished_with(metrics(), "abort");
      if (now > before) return now;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return before;
  }

  static inline ServerProcess* server_ = nullptr;
  static inline std::filesystem::path log_;
};

TEST_F(ChaosAgainstServe, WellBehavedRequestsCompleteWithTheirForcedLength) {
  for (ChaosKind kind : {ChaosKind::kStreamed, ChaosKind::kNonStreamed}) {
    const ChaosResult r = play(kind);
    EXPECT_EQ(r.seen.status, 200) << chaos_kind_name(kind);
    EXPECT_TRUE(r.seen.completed);
    EXPECT_EQ(r.seen.output_tokens, 16);
    EXPECT_EQ(r.verdict.outcome, "completed");
    EXPECT_TRUE(r.record.ok);
  }
  EXPECT_TRUE(settled());
}

TEST_F(ChaosAgainstServe, MalformedAbsurdAndOversizedBodiesGetTheirStatusAndAnErrorBody) {
  const ChaosResult malformed = play(ChaosKind::kMalformedJson);
  EXPECT_EQ(malformed.seen.status, 400);
  EXPECT_TRUE(malformed.seen.error_body);
  const ChaosResult absurd = play(ChaosKind::kAbsurdParams);
  EXPECT_EQ(absurd.seen.status, 400);
  EXPECT_TRUE(absurd.seen.error_body);
  const ChaosResult oversized = play(ChaosKind::kOversizedBody);
  EXPECT_EQ(oversized.seen.status, 413) << oversized.seen.transport_error;
  EXPECT_TRUE(oversized.seen.error_body);
  for (const ChaosResult* r : {&malformed, &absurd, &oversized}) {
    EXPECT_FALSE(r->verdict.violation) << r->verdict.outcome;
  }
}

TEST_F(ChaosAgainstServe, EveryAbsurdVariantIsA400) {
  // run_chaos numbers arrivals from 0, so n clients play variants 0..n-1.
  ChaosClientOptions options;
  options.base_url = server_->base_url;
  options.model = "stories260K";
  const std::vector<ChaosKind> kinds(6, ChaosKind::kAbsurdParams);
  OutgoingRequest request;
  request.payload = {{"model", "stories260K"}, {"prompt", "x"}};
  const auto results = run_chaos(options, kinds, std::vector<OutgoingRequest>(6, request),
                                 std::vector<double>(6, 0.0));
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].seen.status, 400) << "variant " << i;
    EXPECT_TRUE(results[i].seen.error_body) << "variant " << i;
  }
}

TEST_F(ChaosAgainstServe, MidStreamDisconnectAbortsTheRequestAndFreesItsBlocks) {
  const double before = finished_with(metrics(), "abort");
  // 400 tokens (stories260K's context is 512), so the stream cannot end before the server sees
  // the client gone: with 48 a loaded machine sometimes finished it first ("length").
  const ChaosResult r = play(ChaosKind::kDisconnectMidStream, 400);
  EXPECT_EQ(r.seen.status, 200);
  EXPECT_TRUE(r.seen.planned_cut);
  EXPECT_GE(r.seen.events_read, 1);  // arrival 0 cuts after its first event
  EXPECT_FALSE(r.seen.completed);
  EXPECT_GT(aborted_after(before), before) << "the server never counted the request as aborted";
  EXPECT_TRUE(settled());
}

TEST_F(ChaosAgainstServe, MidBodyDisconnectLeavesNothingBehind) {
  const ChaosResult r = play(ChaosKind::kDisconnectMidBody);
  EXPECT_TRUE(r.seen.planned_cut) << r.seen.transport_error;
  EXPECT_TRUE(settled());
  EXPECT_EQ(play(ChaosKind::kStreamed).verdict.outcome, "completed") << "the server still serves";
}

TEST_F(ChaosAgainstServe, SlowReaderStillGetsTheWholeStream) {
  const ChaosResult r = play(ChaosKind::kSlowReader);
  EXPECT_EQ(r.seen.status, 200) << r.seen.transport_error;
  EXPECT_TRUE(r.seen.completed);
  EXPECT_EQ(r.seen.output_tokens, 48);  // misbehaving_max_tokens, forced
  EXPECT_TRUE(settled());
}

TEST_F(ChaosAgainstServe, WebSocketCancelGetsADoneFrameForEveryChoice) {
  const double before = finished_with(metrics(), "abort");
  const ChaosResult r = play(ChaosKind::kWsCancel);  // arrival 0: one choice
  EXPECT_EQ(r.seen.status, 101) << r.seen.transport_error;
  EXPECT_TRUE(r.seen.completed);
  ASSERT_EQ(r.seen.finish_reasons.size(), 1u);
  EXPECT_GE(r.seen.events_read, 1);
  if (r.seen.finish_reasons[0] == "abort") {
    EXPECT_GT(aborted_after(before), before);
  } else {
    EXPECT_EQ(r.seen.finish_reasons[0], "length") << "the 48 tokens beat the cancel";
  }
  EXPECT_TRUE(settled());
}

TEST_F(ChaosAgainstServe, IdleConnectionIsClosedByTheServer) {
  const ChaosResult r = play(ChaosKind::kIdleConnection);
  EXPECT_TRUE(r.seen.closed_by_server) << r.seen.transport_error;
  EXPECT_FALSE(r.verdict.violation);
}

TEST_F(ChaosAgainstServe, ParallelSamplingReturnsTwoChoices) {
  const ChaosResult r = play(ChaosKind::kParallelSampling);
  EXPECT_EQ(r.seen.status, 200);
  EXPECT_EQ(r.seen.choices, 2);
  EXPECT_FALSE(r.verdict.violation) << r.verdict.outcome;
  EXPECT_TRUE(settled());
}

TEST(BenchSoak, ShortSoakOnStories260KPassesEveryCheck) {
  const std::filesystem::path model = pagedserve::testing::stories260k_dir();
  const std::filesystem::path trace =
      pagedserve::testing::shared_dir() / "traces/azure-2023/AzureLLMInferenceTrace_conv.csv";
  if (!std::filesystem::exists(PAGEDSERVE_BINARY) || !std::filesystem::exists(trace)) {
    GTEST_SKIP() << "pagedserve or the Azure trace is missing";
  }
  // Under AddressSanitizer freed memory sits in its quarantine (256 MiB by default) before
  // reuse, so resident memory grows by that much whatever the server does; leaks are
  // LeakSanitizer's to find there (the server's exit status, checked by the drain).
#if defined(__SANITIZE_ADDRESS__)
  const std::string rss_limit = " --rss-growth-limit-mib 1024";
#else
  const std::string rss_limit;
#endif
  const std::string base =
      std::filesystem::temp_directory_path() / ("bench_soak_" + std::to_string(getpid()));
  const std::string command =
      std::string(PAGEDSERVE_BINARY) + " bench soak --quiet --model " + model.string() +
      " --trace " + trace.string() + " --seconds 8 --rate 20 --idle-timeout 1" + rss_limit +
      " --result-json " + base + ".json --server-log " + base + ".log > " + base + ".out";
  const int status = std::system(command.c_str());
  std::ifstream in(base + ".json");
  const nlohmann::json report = nlohmann::json::parse(in, nullptr, false);
  EXPECT_EQ(WEXITSTATUS(status), 0) << command;
  ASSERT_TRUE(report.is_object());
  for (const auto& check : report["checks"]) {
    EXPECT_TRUE(check["passed"].get<bool>()) << check.dump();
  }
  EXPECT_EQ(report["checks"].size(), 5u);
  EXPECT_GT(report["tally"]["requests"].get<int64_t>(), 100);
  EXPECT_EQ(report["tally"]["violations"], 0);
  for (const char* suffix : {".json", ".log", ".out"}) std::filesystem::remove(base + suffix);
}

}  // namespace
}  // namespace pagedserve::loadgen
