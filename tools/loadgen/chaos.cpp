// The chaos soak's pure decisions (chaos.h): kinds, their assignment, the judge, the tally and
// the readings of /metrics and /proc/PID/status.
#include "tools/loadgen/chaos.h"

#include <algorithm>
#include <random>
#include <sstream>

namespace pagedserve::loadgen {

const char* chaos_kind_name(ChaosKind kind) {
  switch (kind) {
    case ChaosKind::kStreamed:
      return "streamed";
    case ChaosKind::kNonStreamed:
      return "non_streamed";
    case ChaosKind::kDisconnectMidBody:
      return "disconnect_mid_body";
    case ChaosKind::kDisconnectMidStream:
      return "disconnect_mid_stream";
    case ChaosKind::kSlowReader:
      return "slow_reader";
    case ChaosKind::kMalformedJson:
      return "malformed_json";
    case ChaosKind::kOversizedBody:
      return "oversized_body";
    case ChaosKind::kAbsurdParams:
      return "absurd_params";
    case ChaosKind::kWsCancel:
      return "ws_cancel";
    case ChaosKind::kIdleConnection:
      return "idle_connection";
    case ChaosKind::kParallelSampling:
      return "parallel_sampling";
  }
  return "unknown";
}

bool is_well_behaved(ChaosKind kind) {
  return kind == ChaosKind::kStreamed || kind == ChaosKind::kNonStreamed;
}

ChaosMix default_chaos_mix() {
  ChaosMix mix{};
  const auto set = [&mix](ChaosKind kind, double weight) {
    mix[static_cast<size_t>(kind)] = weight;
  };
  set(ChaosKind::kStreamed, 0.50);
  set(ChaosKind::kNonStreamed, 0.20);
  set(ChaosKind::kDisconnectMidBody, 0.04);
  set(ChaosKind::kDisconnectMidStream, 0.04);
  set(ChaosKind::kSlowReader, 0.03);
  set(ChaosKind::kMalformedJson, 0.03);
  set(ChaosKind::kOversizedBody, 0.025);
  set(ChaosKind::kAbsurdParams, 0.04);
  set(ChaosKind::kWsCancel, 0.04);
  set(ChaosKind::kIdleConnection, 0.015);
  set(ChaosKind::kParallelSampling, 0.04);
  return mix;
}

double well_behaved_share(const ChaosMix& mix) {
  double total = 0, good = 0;
  for (size_t k = 0; k < kNumChaosKinds; ++k) {
    total += mix[k];
    if (is_well_behaved(static_cast<ChaosKind>(k))) good += mix[k];
  }
  return total > 0 ? good / total : 1.0;
}

std::vector<ChaosKind> assign_kinds(size_t count, const ChaosMix& mix, uint32_t seed) {
  std::mt19937 rng(seed);
  std::discrete_distribution<size_t> pick(mix.begin(), mix.end());
  std::vector<ChaosKind> kinds(count);
  for (ChaosKind& kind : kinds) kind = static_cast<ChaosKind>(pick(rng));
  return kinds;
}

namespace {

// Why a client that should have been answered was not, as a short tally label.
std::string failure_label(const ChaosObservation& seen) {
  if (!seen.transport_error.empty()) return seen.transport_error;
  if (seen.status == 0) return "no answer";
  if (!seen.stream_error_code.empty()) return "stream error: " + seen.stream_error_code;
  if (seen.status == 200 && !seen.completed) return "ended without the whole answer";
  return "http " + std::to_string(seen.status) + (seen.error_body ? "" : " without error body");
}

bool rejected_with_body(const ChaosObservation& seen) {
  return seen.status >= 400 && seen.status < 500 && seen.error_body;
}

ChaosVerdict expect_status(const ChaosObservation& seen, int status) {
  if (seen.status == status && seen.error_body) return {"http " + std::to_string(status), false};
  return {failure_label(seen), true};
}

ChaosVerdict judge_generation(ChaosKind kind, const ChaosObservation& seen) {
  const bool answered = seen.completed && seen.status == 200;
  switch (kind) {
    case ChaosKind::kDisconnectMidStream:
      if (seen.planned_cut) return {"cut mid-stream", false};
      if (answered) return {"completed before the cut", false};
      break;
    case ChaosKind::kSlowReader:
      if (answered) return {"completed", false};
      if (seen.status == 200 && seen.stream_error_code == "slow_reader") {
        return {"cancelled as slow_reader", false};
      }
      break;
    case ChaosKind::kParallelSampling:
      if (answered) {
        if (seen.choices != 2) return {"wrong number of choices", true};
        return {"completed", false};
      }
      break;
    default:  // well-behaved
      if (answered) {
        if (seen.expected_tokens > 0 && seen.output_tokens != seen.expected_tokens) {
          return {"wrong output length", true};
        }
        return {"completed", false};
      }
      break;
  }
  if (rejected_with_body(seen)) return {"http " + std::to_string(seen.status), false};
  return {failure_label(seen), true};
}

}  // namespace

ChaosVerdict judge(ChaosKind kind, const ChaosObservation& seen) {
  switch (kind) {
    case ChaosKind::kDisconnectMidBody:
      if (seen.planned_cut) return {"cut mid-body", false};
      return {failure_label(seen), true};
    case ChaosKind::kMalformedJson:
    case ChaosKind::kAbsurdParams:
      return expect_status(seen, 400);
    case ChaosKind::kOversizedBody:
      return expect_status(seen, 413);
    case ChaosKind::kWsCancel:
      if (seen.status == 101 && seen.completed) {
        const bool aborted = std::count(seen.finish_reasons.begin(), seen.finish_reasons.end(),
                                        std::string("abort")) > 0;
        return {aborted ? "cancelled" : "finished before the cancel", false};
      }
      // The WebSocket's 429: an error frame with code "overloaded" (no HTTP status per frame).
      if (seen.status == 101 && seen.error_body && seen.stream_error_code == "overloaded") {
        return {"refused: overloaded", false};
      }
      return {failure_label(seen), true};
    case ChaosKind::kIdleConnection:
      if (seen.closed_by_server) return {"closed by the server", false};
      return {seen.transport_error.empty() ? "not closed by the server" : seen.transport_error,
              true};
    default:
      return judge_generation(kind, seen);
  }
}

ChaosTally tally(const std::vector<ChaosResult>& results) {
  ChaosTally out;
  for (size_t i = 0; i < results.size(); ++i) {
    const ChaosResult& r = results[i];
    ++out.requests;
    ++out.outcomes[chaos_kind_name(r.kind)][r.verdict.outcome];
    if (!r.verdict.violation) continue;
    ++out.violations;
    if (out.first_violation_s < 0) out.first_violation_s = r.record.sent_s;
    out.first_violation_s = std::min(out.first_violation_s, r.record.sent_s);
    out.last_violation_s = std::max(out.last_violation_s, r.record.sent_s);
    if (out.violation_examples.size() < 20) {
      out.violation_examples.push_back(std::string(chaos_kind_name(r.kind)) + " #" +
                                       std::to_string(r.record.index) + ": " + r.verdict.outcome);
    }
  }
  return out;
}

std::string format_tally(const ChaosTally& tally) {
  std::ostringstream out;
  out << "kind                    outcome                                   count\n";
  for (const auto& [kind, outcomes] : tally.outcomes) {
    for (const auto& [outcome, count] : outcomes) {
      std::string label = outcome.substr(0, 40);
      out << kind << std::string(kind.size() < 24 ? 24 - kind.size() : 1, ' ') << label
          << std::string(label.size() < 42 ? 42 - label.size() : 1, ' ') << count << "\n";
    }
  }
  out << "requests " << tally.requests << ", violations " << tally.violations;
  if (tally.violations > 0) {
    out << " (clients sent from " << static_cast<int64_t>(tally.first_violation_s) << " s to "
        << static_cast<int64_t>(tally.last_violation_s) << " s)";
  }
  out << "\n";
  for (const std::string& example : tally.violation_examples)
    out << "  violation: " << example << "\n";
  return out.str();
}

nlohmann::ordered_json tally_json(const ChaosTally& tally) {
  nlohmann::ordered_json out;
  out["requests"] = tally.requests;
  out["violations"] = tally.violations;
  out["outcomes"] = tally.outcomes;
  out["violation_examples"] = tally.violation_examples;
  out["first_violation_s"] = tally.first_violation_s;
  out["last_violation_s"] = tally.last_violation_s;
  return out;
}

std::optional<double> prometheus_value(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() <= name.size() || line.compare(0, name.size(), name) != 0) continue;
    if (line[name.size()] != ' ') continue;  // another metric with this prefix, or labels
    try {
      return std::stod(line.substr(name.size() + 1));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

RssSummary summarize_rss(const std::vector<RssSample>& samples, double warmup_fraction) {
  RssSummary out;
  out.samples = static_cast<int64_t>(samples.size());
  if (samples.empty()) return out;
  const double first = samples.front().t_s, last = samples.back().t_s;
  const double window = warmup_fraction * (last - first);
  std::vector<int64_t> warm, late;
  for (const RssSample& s : samples) {
    out.peak_bytes = std::max(out.peak_bytes, s.rss_bytes);
    if (s.t_s <= first + window) warm.push_back(s.rss_bytes);
    if (s.t_s >= last - window) late.push_back(s.rss_bytes);
  }
  const auto median = [](std::vector<int64_t>& v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  out.warm_bytes = median(warm);
  out.late_bytes = median(late);
  out.growth_bytes = out.late_bytes - out.warm_bytes;
  return out;
}

std::optional<int64_t> parse_tcp_ext(const std::string& netstat, const std::string& name) {
  // Two "TcpExt:" lines: the names, then the values in the same order.
  std::istringstream lines(netstat);
  std::vector<std::string> names;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("TcpExt:", 0) != 0) continue;
    std::istringstream fields(line.substr(7));
    std::vector<std::string> row;
    for (std::string field; fields >> field;) row.push_back(field);
    if (names.empty()) {
      names = std::move(row);
      continue;
    }
    for (size_t i = 0; i < names.size() && i < row.size(); ++i) {
      if (names[i] == name) return std::stoll(row[i]);
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<int64_t> parse_vm_rss(const std::string& proc_status) {
  std::istringstream lines(proc_status);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int64_t kib = 0;
    std::string unit;
    if (fields >> kib >> unit && unit == "kB") return kib * 1024;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace pagedserve::loadgen
