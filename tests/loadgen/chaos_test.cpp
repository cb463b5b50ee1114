// The chaos soak's pure pieces (tools/loadgen/chaos.h): the judge against the rules the issue
// states, the seeded assignment of kinds, the bodies each kind sends, and the readings of
// /metrics and /proc/PID/status.
#include "tools/loadgen/chaos.h"

#include <gtest/gtest.h>

#include <set>

namespace pagedserve::loadgen {
namespace {

ChaosObservation answered(int status, bool error_body) {
  ChaosObservation seen;
  seen.status = status;
  seen.error_body = error_body;
  return seen;
}

ChaosObservation completed_with(int64_t output_tokens, int64_t expected_tokens) {
  ChaosObservation seen = answered(200, false);
  seen.completed = true;
  seen.output_tokens = output_tokens;
  seen.expected_tokens = expected_tokens;
  return seen;
}

TEST(ChaosJudge, WellBehavedCompletesWithItsForcedLengthOrGetsA4xxWithAnErrorBody) {
  for (ChaosKind kind : {ChaosKind::kStreamed, ChaosKind::kNonStreamed}) {
    EXPECT_FALSE(judge(kind, completed_with(16, 16)).violation);
    EXPECT_EQ(judge(kind, completed_with(16, 16)).outcome, "completed");
    EXPECT_TRUE(judge(kind, completed_with(15, 16)).violation) << "short output";
    EXPECT_FALSE(judge(kind, answered(429, true)).violation);
    EXPECT_EQ(judge(kind, answered(429, true)).outcome, "http 429");
    EXPECT_FALSE(judge(kind, answered(400, true)).violation);
    EXPECT_TRUE(judge(kind, answered(429, false)).violation) << "no error body";
    EXPECT_TRUE(judge(kind, answered(503, true)).violation) << "5xx is not allowed";
    EXPECT_TRUE(judge(kind, answered(200, false)).violation) << "200 without the whole answer";
    ChaosObservation hung;
    hung.transport_error = "deadline: read";
    EXPECT_TRUE(judge(kind, hung).violation);
    EXPECT_EQ(judge(kind, hung).outcome, "deadline: read");
  }
  ChaosObservation cut_off = answered(200, false);
  cut_off.stream_error_code = "slow_reader";
  EXPECT_TRUE(judge(ChaosKind::kStreamed, cut_off).violation) << "a prompt reader is no slow one";
}

TEST(ChaosJudge, RefusedBodiesNeedTheirExactStatusAndAnErrorBody) {
  EXPECT_FALSE(judge(ChaosKind::kMalformedJson, answered(400, true)).violation);
  EXPECT_TRUE(judge(ChaosKind::kMalformedJson, answered(400, false)).violation);
  EXPECT_TRUE(judge(ChaosKind::kMalformedJson, completed_with(1, 0)).violation);
  EXPECT_TRUE(judge(ChaosKind::kMalformedJson, answered(500, true)).violation);
  EXPECT_FALSE(judge(ChaosKind::kAbsurdParams, answered(400, true)).violation);
  EXPECT_TRUE(judge(ChaosKind::kAbsurdParams, answered(429, true)).violation);
  EXPECT_FALSE(judge(ChaosKind::kOversizedBody, answered(413, true)).violation);
  EXPECT_TRUE(judge(ChaosKind::kOversizedBody, answered(400, true)).violation);
  ChaosObservation reset;
  reset.transport_error = "read: Connection reset by peer";
  EXPECT_TRUE(judge(ChaosKind::kOversizedBody, reset).violation);
}

TEST(ChaosJudge, DisconnectsPassWhenTheClientCutAtItsPlannedPoint) {
  ChaosObservation cut;
  cut.planned_cut = true;
  EXPECT_FALSE(judge(ChaosKind::kDisconnectMidBody, cut).violation);
  cut.status = 200;
  cut.events_read = 3;
  EXPECT_EQ(judge(ChaosKind::kDisconnectMidStream, cut).outcome, "cut mid-stream");
  EXPECT_FALSE(judge(ChaosKind::kDisconnectMidStream, answered(429, true)).violation);
  ChaosObservation refused;
  refused.transport_error = "connect: Connection refused";
  EXPECT_TRUE(judge(ChaosKind::kDisconnectMidBody, refused).violation);
  EXPECT_TRUE(judge(ChaosKind::kDisconnectMidStream, refused).violation);
}

TEST(ChaosJudge, SlowReaderCompletesOrIsCancelledAsSlowReader) {
  EXPECT_FALSE(judge(ChaosKind::kSlowReader, completed_with(48, 0)).violation);
  ChaosObservation cancelled = answered(200, false);
  cancelled.stream_error_code = "slow_reader";
  EXPECT_EQ(judge(ChaosKind::kSlowReader, cancelled).outcome, "cancelled as slow_reader");
  EXPECT_FALSE(judge(ChaosKind::kSlowReader, cancelled).violation);
  ChaosObservation other = answered(200, false);
  other.stream_error_code = "request_aborted";
  EXPECT_TRUE(judge(ChaosKind::kSlowReader, other).violation);
}

TEST(ChaosJudge, WebSocketCancelNeedsEveryDoneFrameOrAnOverloadedErrorFrame) {
  ChaosObservation seen = answered(101, false);
  seen.completed = true;
  seen.finish_reasons = {"abort", "abort"};
  EXPECT_EQ(judge(ChaosKind::kWsCancel, seen).outcome, "cancelled");
  seen.finish_reasons = {"length"};
  EXPECT_EQ(judge(ChaosKind::kWsCancel, seen).outcome, "finished before the cancel");
  EXPECT_FALSE(judge(ChaosKind::kWsCancel, seen).violation);
  seen.completed = false;  // a done frame missing
  EXPECT_TRUE(judge(ChaosKind::kWsCancel, seen).violation);
  ChaosObservation overloaded = answered(101, true);
  overloaded.stream_error_code = "overloaded";
  EXPECT_FALSE(judge(ChaosKind::kWsCancel, overloaded).violation);
  overloaded.stream_error_code = "request_aborted";
  EXPECT_TRUE(judge(ChaosKind::kWsCancel, overloaded).violation);
}

TEST(ChaosJudge, IdleConnectionMustBeClosedByTheServer) {
  ChaosObservation seen;
  seen.closed_by_server = true;
  EXPECT_FALSE(judge(ChaosKind::kIdleConnection, seen).violation);
  seen.closed_by_server = false;
  EXPECT_TRUE(judge(ChaosKind::kIdleConnection, seen).violation);
  EXPECT_EQ(judge(ChaosKind::kIdleConnection, seen).outcome, "not closed by the server");
}

TEST(ChaosJudge, ParallelSamplingNeedsExactlyTheChoicesAskedFor) {
  ChaosObservation two = completed_with(20, 0);
  two.choices = 2;
  EXPECT_FALSE(judge(ChaosKind::kParallelSampling, two).violation);
  ChaosObservation three = two;
  three.choices = 3;  // best_of's extra candidate must not be returned
  EXPECT_TRUE(judge(ChaosKind::kParallelSampling, three).violation);
  EXPECT_FALSE(judge(ChaosKind::kParallelSampling, answered(429, true)).violation);
}

TEST(ChaosKinds, AssignmentIsSeededAndFollowsTheMix) {
  const ChaosMix mix = default_chaos_mix();
  EXPECT_NEAR(well_behaved_share(mix), 0.70, 1e-9);
  const auto kinds = assign_kinds(20000, mix, 7);
  EXPECT_EQ(kinds, assign_kinds(20000, mix, 7));
  EXPECT_NE(kinds, assign_kinds(20000, mix, 8));
  std::array<int, kNumChaosKinds> count{};
  for (ChaosKind kind : kinds) ++count[static_cast<size_t>(kind)];
  double total = 0;
  for (double weight : mix) total += weight;
  for (size_t k = 0; k < kNumChaosKinds; ++k) {
    // Binomial: 20000 draws put each share within 5 standard deviations (< 0.018).
    EXPECT_NEAR(count[k] / 20000.0, mix[k] / total, 0.018) << chaos_kind_name(ChaosKind(k));
    EXPECT_GT(count[k], 0) << "every kind is played";
  }
}

OutgoingRequest trace_request() {
  OutgoingRequest r;
  r.payload = {{"model", "m"}, {"prompt", {5, 6, 7}}, {"max_tokens", 9}, {"ignore_eos", true}};
  r.prompt_tokens = 3;
  r.max_tokens = 9;
  return r;
}

TEST(ChaosRequests, EachKindSendsWhatItsNameSays) {
  const ChaosRequestOptions options{"m", 1000, 48, 8};
  const OutgoingRequest trace = trace_request();
  for (int64_t i = 0; i < 4; ++i) {
    const auto body = nlohmann::json::parse(
        chaos_request(ChaosKind::kMalformedJson, i, trace, options).body, nullptr, false);
    EXPECT_FALSE(body.is_object()) << "malformed variant " << i << " must not be a JSON object";
  }
  const ChaosRequest big = chaos_request(ChaosKind::kOversizedBody, 0, trace, options);
  EXPECT_GT(big.body.size(), 1000u);
  EXPECT_TRUE(nlohmann::json::parse(big.body).is_object()) << "too big, not malformed";
  const auto absurd = [&](int64_t i) {
    return nlohmann::json::parse(chaos_request(ChaosKind::kAbsurdParams, i, trace, options).body);
  };
  EXPECT_EQ(absurd(0)["max_tokens"], -1);
  EXPECT_EQ(absurd(1)["n"], 10000);
  EXPECT_EQ(absurd(2)["stream"], true);
  EXPECT_GT(absurd(2)["best_of"], absurd(2)["n"]);
  const auto streamed =
      nlohmann::json::parse(chaos_request(ChaosKind::kStreamed, 0, trace, options).body);
  EXPECT_EQ(streamed["stream"], true);
  EXPECT_EQ(streamed["prompt"], trace.payload["prompt"]);
  EXPECT_EQ(chaos_request(ChaosKind::kStreamed, 0, trace, options).expected_tokens, 9);
  const auto cut =
      nlohmann::json::parse(chaos_request(ChaosKind::kDisconnectMidStream, 0, trace, options).body);
  EXPECT_EQ(cut["max_tokens"], 48);
  EXPECT_EQ(cut["stream"], true);
  std::set<int64_t> cut_points;
  std::set<double> fractions;
  for (int64_t i = 0; i < 90; ++i) {
    const ChaosRequest r = chaos_request(ChaosKind::kDisconnectMidStream, i, trace, options);
    EXPECT_GE(r.cut_after_events, 1);
    EXPECT_LE(r.cut_after_events, 8);
    cut_points.insert(r.cut_after_events);
    const double f = chaos_request(ChaosKind::kDisconnectMidBody, i, trace, options).cut_fraction;
    EXPECT_GT(f, 0.0);
    EXPECT_LT(f, 1.0);
    fractions.insert(f);
  }
  EXPECT_EQ(cut_points.size(), 8u) << "every cut point is used";
  EXPECT_EQ(fractions.size(), 9u);
  const ChaosRequest ws = chaos_request(ChaosKind::kWsCancel, 1, trace, options);
  const auto frame = nlohmann::json::parse(ws.body);
  EXPECT_EQ(frame["type"], "completion");
  EXPECT_EQ(frame["n"], ws.choices);
  EXPECT_EQ(ws.choices, 2);
  const auto parallel =
      nlohmann::json::parse(chaos_request(ChaosKind::kParallelSampling, 0, trace, options).body);
  EXPECT_EQ(parallel["n"], 2);
  EXPECT_EQ(parallel["best_of"], 3);
  EXPECT_FALSE(parallel.contains("stream"));
}

TEST(ChaosReadings, PrometheusValueReadsTheUnlabelledSampleOfThatExactName) {
  const std::string text =
      "# HELP pagedserve_kv_blocks_free Allocatable KV cache blocks.\n"
      "# TYPE pagedserve_kv_blocks_free gauge\n"
      "pagedserve_kv_blocks_free_extra 1\n"
      "pagedserve_kv_blocks_free 8190\n"
      "pagedserve_request_success_total{finish_reason=\"abort\"} 3\n";
  EXPECT_EQ(prometheus_value(text, "pagedserve_kv_blocks_free"), 8190);
  EXPECT_EQ(prometheus_value(text, "pagedserve_kv_blocks_total"), std::nullopt);
  EXPECT_EQ(prometheus_value(text, "pagedserve_request_success_total"), std::nullopt);
}

TEST(ChaosReadings, TcpExtCounterIsReadByName) {
  const std::string netstat =
      "TcpExt: SyncookiesSent SyncookiesRecv ListenOverflows ListenDrops\n"
      "TcpExt: 1755 0 1003226 1003227\n"
      "IpExt: InNoRoutes\n"
      "IpExt: 0\n";
  EXPECT_EQ(parse_tcp_ext(netstat, "ListenOverflows"), 1003226);
  EXPECT_EQ(parse_tcp_ext(netstat, "ListenDrops"), 1003227);
  EXPECT_EQ(parse_tcp_ext(netstat, "InNoRoutes"), std::nullopt);
}

TEST(ChaosReadings, VmRssIsReadInBytes) {
  EXPECT_EQ(parse_vm_rss("Name:\tpagedserve\nVmPeak:\t  9 kB\nVmRSS:\t  123456 kB\n"),
            int64_t{123456} * 1024);
  EXPECT_EQ(parse_vm_rss("Name:\tx\n"), std::nullopt);
}

TEST(ChaosReadings, RssGrowthComparesTheMediansOfTheFirstAndLastFifth) {
  // 0..100 s: 100 MiB during warm-up (one 120 MiB spike at 10 s), flat 110 MiB at the end
  // (with a 150 MiB burst at 90 s): growth 10 MiB, the spikes seen only in the peak.
  std::vector<RssSample> samples;
  for (int t = 0; t <= 100; ++t) {
    int64_t mib = t <= 20 ? 100 : (t >= 80 ? 110 : 105);
    if (t == 10) mib = 120;
    if (t == 90) mib = 150;
    samples.push_back({double(t), mib << 20});
  }
  const RssSummary rss = summarize_rss(samples, 0.2);
  EXPECT_EQ(rss.peak_bytes, int64_t{150} << 20);
  EXPECT_EQ(rss.warm_bytes, int64_t{100} << 20);
  EXPECT_EQ(rss.late_bytes, int64_t{110} << 20);
  EXPECT_EQ(rss.growth_bytes, int64_t{10} << 20);
  EXPECT_EQ(rss.samples, 101);
  EXPECT_EQ(summarize_rss({}, 0.2).samples, 0);
}

TEST(ChaosTally, CountsOutcomesPerKindAndListsViolations) {
  std::vector<ChaosResult> results(3);
  results[0].kind = ChaosKind::kStreamed;
  results[0].verdict = {"completed", false};
  results[1].kind = ChaosKind::kStreamed;
  results[1].verdict = {"http 429", false};
  results[2].kind = ChaosKind::kIdleConnection;
  results[2].verdict = {"not closed by the server", true};
  results[2].record.index = 2;
  results[2].record.sent_s = 7.5;
  const ChaosTally t = tally(results);
  EXPECT_EQ(t.requests, 3);
  EXPECT_EQ(t.violations, 1);
  EXPECT_EQ(t.outcomes.at("streamed").at("completed"), 1);
  EXPECT_EQ(t.outcomes.at("streamed").at("http 429"), 1);
  ASSERT_EQ(t.violation_examples.size(), 1u);
  EXPECT_EQ(t.violation_examples[0], "idle_connection #2: not closed by the server");
  EXPECT_EQ(t.first_violation_s, 7.5);
  EXPECT_EQ(t.last_violation_s, 7.5);
}

}  // namespace
}  // namespace pagedserve::loadgen
