// Trace readers (Azure CSV, JSONL), slicing and length limits for the load generator.
#include "tools/loadgen/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace pagedserve::loadgen {
namespace {

// Days from 1970-01-01 to y-m-d (proleptic Gregorian), Howard Hinnant's algorithm.
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool parse_int(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  size_t pos = 0;
  try {
    out = std::stoll(text, &pos);
  } catch (const std::exception&) {
    return false;
  }
  return pos == text.size();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// Records a bad line, or throws under kFail.
void bad_line(TraceReadResult& result, BadLinePolicy policy, int64_t line, std::string reason) {
  if (policy == BadLinePolicy::kFail) {
    throw TraceError("line " + std::to_string(line) + ": " + reason);
  }
  result.bad_lines.push_back({line, std::move(reason)});
}

// Reads a JSONL "prompt"/"prompt_token_ids" list of ids; false when it is not one.
bool read_ids(const nlohmann::json& value, std::vector<int32_t>& ids) {
  if (!value.is_array() || value.empty()) return false;
  for (const nlohmann::json& id : value) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      return false;
    }
    ids.push_back(id.get<int32_t>());
  }
  return true;
}

// Fills `request` from one JSONL object; returns the reason it is bad, or "".
std::string parse_jsonl_object(const nlohmann::json& obj, TraceRequest& request) {
  if (!obj.is_object()) return "not a JSON object";
  for (const auto& [key, value] : obj.items()) {
    if (key == "timestamp") {
      if (!value.is_number() || !std::isfinite(value.get<double>())) {
        return "timestamp must be a number of seconds";
      }
      request.timestamp_s = value.get<double>();
    } else if (key == "prompt") {
      if (value.is_string()) {
        if (value.get<std::string>().empty()) return "prompt is empty";
        request.prompt_text = value.get<std::string>();
      } else if (!read_ids(value, request.prompt_token_ids)) {
        return "prompt must be a string or a non-empty list of token ids";
      }
    } else if (key == "prompt_token_ids") {
      if (!read_ids(value, request.prompt_token_ids)) {
        return "prompt_token_ids must be a non-empty list of token ids";
      }
    } else if (key == "messages") {
      if (!value.is_array() || value.empty()) return "messages must be a non-empty list";
      request.messages = value;
    } else if (key == "max_tokens") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1) {
        return "max_tokens must be an integer >= 1";
      }
      request.max_tokens = value.get<int64_t>();
    } else if (key != "stream" && key != "model") {
      request.extra[key] = value;
    }
  }
  const int forms = int(request.prompt_text.has_value()) + int(!request.prompt_token_ids.empty()) +
                    int(request.messages.has_value());
  if (forms != 1) return "exactly one of prompt, prompt_token_ids or messages is required";
  request.prompt_tokens = static_cast<int64_t>(request.prompt_token_ids.size());
  return "";
}

int64_t scaled(int64_t length, double factor) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(length) * factor));
}

}  // namespace

std::optional<double> parse_azure_timestamp(const std::string& text) {
  int y, mo, d, h, mi, s, consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2d %2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s, &consumed) !=
          6 ||
      consumed != 19) {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return std::nullopt;
  double fraction = 0.0;
  if (text.size() > 19) {
    if (text[19] != '.' || text.size() == 20) return std::nullopt;
    double scale = 0.1;
    for (size_t i = 20; i < text.size(); ++i, scale /= 10) {
      if (text[i] < '0' || text[i] > '9') return std::nullopt;
      fraction += (text[i] - '0') * scale;
    }
  }
  const int64_t seconds = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
  return static_cast<double>(seconds) + fraction;
}

TraceReadResult read_azure_csv(std::istream& in, BadLinePolicy policy) {
  TraceReadResult result;
  std::string line;
  int64_t line_number = 0;
  std::optional<double> first;
  while (std::getline(in, line)) {
    ++line_number;
    line = trim(line);
    if (line.empty()) continue;
    if (line_number == 1 && line.rfind("TIMESTAMP", 0) == 0) continue;  // the header
    std::vector<std::string> fields;
    std::stringstream row(line);
    for (std::string field; std::getline(row, field, ',');) fields.push_back(trim(field));
    if (fields.size() != 3) {
      bad_line(result, policy, line_number,
               "expected 3 fields (TIMESTAMP,ContextTokens,GeneratedTokens), got " +
                   std::to_string(fields.size()));
      continue;
    }
    const std::optional<double> when = parse_azure_timestamp(fields[0]);
    int64_t context = 0, generated = 0;
    if (!when) {
      bad_line(result, policy, line_number, "bad TIMESTAMP '" + fields[0] + "'");
    } else if (!parse_int(fields[1], context) || context < 1) {
      bad_line(result, policy, line_number, "bad ContextTokens '" + fields[1] + "'");
    } else if (!parse_int(fields[2], generated) || generated < 1) {
      bad_line(result, policy, line_number, "bad GeneratedTokens '" + fields[2] + "'");
    } else {
      if (!first) first = *when;
      TraceRequest request;
      request.line_number = line_number;
      request.timestamp_s = *when - *first;
      request.prompt_tokens = context;
      request.max_tokens = generated;
      result.requests.push_back(std::move(request));
    }
  }
  return result;
}

TraceReadResult read_jsonl(std::istream& in, BadLinePolicy policy) {
  TraceReadResult result;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (trim(line).empty()) continue;
    TraceRequest request;
    request.line_number = line_number;
    std::string reason;
    try {
      reason = parse_jsonl_object(nlohmann::json::parse(line), request);
    } catch (const nlohmann::json::exception& e) {
      reason = std::string("invalid JSON: ") + e.what();
    }
    if (reason.empty()) {
      result.requests.push_back(std::move(request));
    } else {
      bad_line(result, policy, line_number, reason);
    }
  }
  return result;
}

TraceReadResult read_lengths_csv(std::istream& in, BadLinePolicy policy) {
  TraceReadResult result;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    line = trim(line);
    if (line.empty()) continue;
    if (line_number == 1 && line.rfind("input_len", 0) == 0) continue;  // the header
    const size_t comma = line.find(',');
    int64_t input = 0, output = 0;
    if (comma == std::string::npos || line.find(',', comma + 1) != std::string::npos) {
      bad_line(result, policy, line_number, "expected 2 fields (input_len,output_len)");
    } else if (!parse_int(trim(line.substr(0, comma)), input) || input < 1) {
      bad_line(result, policy, line_number, "bad input_len '" + line.substr(0, comma) + "'");
    } else if (!parse_int(trim(line.substr(comma + 1)), output) || output < 0) {
      bad_line(result, policy, line_number, "bad output_len '" + line.substr(comma + 1) + "'");
    } else {
      TraceRequest request;
      request.line_number = line_number;
      request.prompt_tokens = input;
      // Alpaca has empty answers (0 tokens); a served request produces at least one token.
      request.max_tokens = std::max<int64_t>(output, 1);
      result.requests.push_back(std::move(request));
    }
  }
  return result;
}

TraceReadResult read_trace_file(const std::string& path, BadLinePolicy policy) {
  std::ifstream in(path);
  if (!in) throw TraceError("cannot open trace '" + path + "'");
  const bool csv = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  if (!csv) return read_jsonl(in, policy);
  // The header says which CSV it is: the lengths files start "input_len,output_len".
  std::string first_line;
  std::getline(in, first_line);
  in.clear();
  in.seekg(0);
  if (trim(first_line).rfind("input_len", 0) == 0) return read_lengths_csv(in, policy);
  return read_azure_csv(in, policy);
}

std::vector<TraceRequest> slice(const std::vector<TraceRequest>& requests, int64_t start,
                                int64_t num) {
  const size_t begin = std::min(requests.size(), static_cast<size_t>(std::max<int64_t>(0, start)));
  size_t end = requests.size();
  if (num >= 0) end = std::min(end, begin + static_cast<size_t>(num));
  return {requests.begin() + static_cast<std::ptrdiff_t>(begin),
          requests.begin() + static_cast<std::ptrdiff_t>(end)};
}

int64_t apply_length_limits(std::vector<TraceRequest>& requests, const LengthLimits& limits) {
  int64_t longest_prompt = 0, longest_output = 0;
  for (const TraceRequest& r : requests) {
    longest_prompt = std::max(longest_prompt, r.prompt_tokens);
    longest_output = std::max(longest_output, r.max_tokens.value_or(0));
  }
  const auto limit = [&](int64_t length, int64_t max, int64_t longest) {
    if (max <= 0 || length <= 0) return length;
    if (limits.mode == LengthMode::kClip) return std::min(length, max);
    return longest > max ? scaled(length, static_cast<double>(max) / longest) : length;
  };
  int64_t changed = 0;
  for (TraceRequest& r : requests) {
    const int64_t prompt = limit(r.prompt_tokens, limits.max_prompt_tokens, longest_prompt);
    const int64_t output =
        limit(r.max_tokens.value_or(0), limits.max_output_tokens, longest_output);
    if (prompt == r.prompt_tokens && output == r.max_tokens.value_or(0)) continue;
    ++changed;
    r.prompt_tokens = prompt;
    if (!r.prompt_token_ids.empty()) r.prompt_token_ids.resize(static_cast<size_t>(prompt));
    if (r.max_tokens) r.max_tokens = output;
  }
  return changed;
}

int64_t fit_to_context(std::vector<TraceRequest>& requests, int64_t shared_prefix_tokens,
                       int64_t max_model_len) {
  const int64_t room = max_model_len - shared_prefix_tokens;
  if (max_model_len <= 0 || room < 2) return 0;
  int64_t changed = 0;
  for (TraceRequest& r : requests) {
    const int64_t output = r.max_tokens.value_or(0);
    // Not prompt + output <= room: a trace's lengths may be anything up to INT64_MAX.
    if (output <= room && r.prompt_tokens <= room - output) continue;
    ++changed;
    if (output >= room) r.max_tokens = std::max<int64_t>(1, room / 2);
    r.prompt_tokens = std::min(r.prompt_tokens, room - r.max_tokens.value_or(0));
    if (!r.prompt_token_ids.empty())
      r.prompt_token_ids.resize(static_cast<size_t>(r.prompt_tokens));
  }
  return changed;
}

}  // namespace pagedserve::loadgen
