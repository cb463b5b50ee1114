// SimExecutor: the cost model, the virtual clock, fixed samples, and the calibration fit.
#include "actors/sim_executor.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <random>
#include <stdexcept>

namespace pagedserve::actors {
namespace {

double get_number(const nlohmann::json& json, const char* key, double fallback, bool required) {
  if (!json.contains(key)) {
    if (required) throw std::invalid_argument(std::string("sim profile: missing \"") + key + "\"");
    return fallback;
  }
  if (!json.at(key).is_number()) {
    throw std::invalid_argument(std::string("sim profile: \"") + key + "\" must be a number");
  }
  const double value = json.at(key).get<double>();
  if (!(value >= 0.0) || !std::isfinite(value)) {
    throw std::invalid_argument(std::string("sim profile: \"") + key +
                                "\" must be a finite number >= 0");
  }
  return value;
}

}  // namespace

SimProfile sim_profile_from_json(const nlohmann::json& json) {
  if (!json.is_object()) throw std::invalid_argument("sim profile: not a JSON object");
  SimProfile p;
  p.name = json.value("name", std::string("unnamed profile"));
  p.step_overhead_s = get_number(json, "step_overhead_s", 0, true);
  p.per_batched_token_s = get_number(json, "per_batched_token_s", 0, true);
  p.per_kv_token_read_s = get_number(json, "per_kv_token_read_s", 0, true);
  p.weights_read_s = get_number(json, "weights_read_s", 0, false);
  p.swap_bytes_per_s = get_number(json, "swap_bytes_per_s", 0, false);
  p.swap_per_block_s = get_number(json, "swap_per_block_s", 0, false);
  p.copy_bytes_per_s = get_number(json, "copy_bytes_per_s", 0, false);
  p.kv_bytes_per_token = static_cast<int64_t>(get_number(json, "kv_bytes_per_token", 0, true));
  p.kv_cache_bytes = static_cast<int64_t>(get_number(json, "kv_cache_bytes", 0, true));
  p.max_model_len = static_cast<int>(get_number(json, "max_model_len", 2048, false));
  p.vocab_size = static_cast<int>(get_number(json, "vocab_size", 32000, false));
  if (p.kv_bytes_per_token <= 0) {
    throw std::invalid_argument("sim profile: \"kv_bytes_per_token\" must be > 0");
  }
  if (p.max_model_len < 2 || p.vocab_size < 16) {
    throw std::invalid_argument("sim profile: max_model_len >= 2 and vocab_size >= 16 needed");
  }
  return p;
}

SimProfile load_sim_profile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("sim profile: cannot open " + path.string());
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::invalid_argument("sim profile " + path.string() + ": " + e.what());
  }
  try {
    return sim_profile_from_json(json);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path.string() + ": " + e.what());
  }
}

nlohmann::ordered_json sim_profile_to_json(const SimProfile& p) {
  return {{"name", p.name},
          {"step_overhead_s", p.step_overhead_s},
          {"per_batched_token_s", p.per_batched_token_s},
          {"per_kv_token_read_s", p.per_kv_token_read_s},
          {"weights_read_s", p.weights_read_s},
          {"swap_bytes_per_s", p.swap_bytes_per_s},
          {"swap_per_block_s", p.swap_per_block_s},
          {"copy_bytes_per_s", p.copy_bytes_per_s},
          {"kv_bytes_per_token", p.kv_bytes_per_token},
          {"kv_cache_bytes", p.kv_cache_bytes},
          {"max_model_len", p.max_model_len},
          {"vocab_size", p.vocab_size}};
}

StepShape step_shape(const StepInput& input) {
  StepShape shape;
  for (const ScheduledSequence& seq : input.seqs) {
    const int64_t fresh = static_cast<int64_t>(seq.new_token_ids.size());
    shape.batched_tokens += fresh;
    shape.kv_tokens_read += seq.num_computed_tokens + fresh;
  }
  shape.swapped_blocks = static_cast<int64_t>(input.swap_out.size() + input.swap_in.size());
  shape.copied_blocks = static_cast<int64_t>(input.block_copies.size());
  return shape;
}

double step_seconds(const SimProfile& p, const StepShape& shape, int block_size) {
  const double block_bytes = static_cast<double>(p.kv_bytes_per_token) * block_size;
  double seconds = 0.0;
  if (shape.batched_tokens > 0) {
    const double compute = p.per_batched_token_s * static_cast<double>(shape.batched_tokens);
    const double kv_reads = p.per_kv_token_read_s * static_cast<double>(shape.kv_tokens_read);
    seconds =
        p.step_overhead_s + (p.weights_read_s > 0 ? std::max(p.weights_read_s + kv_reads, compute)
                                                  : compute + kv_reads);
  }
  const double swapped = static_cast<double>(shape.swapped_blocks);
  seconds += swapped * p.swap_per_block_s;
  if (p.swap_bytes_per_s > 0) seconds += swapped * block_bytes / p.swap_bytes_per_s;
  if (p.copy_bytes_per_s > 0) {
    seconds += static_cast<double>(shape.copied_blocks) * block_bytes / p.copy_bytes_per_s;
  }
  return seconds;
}

SimExecutor::SimExecutor(SimProfile profile, int block_size, int num_device_blocks,
                         int num_cpu_blocks)
    : profile_(std::move(profile)),
      block_size_(block_size),
      num_device_blocks_(num_device_blocks),
      num_cpu_blocks_(num_cpu_blocks) {
  config_.architecture = "SimulatedForCausalLM";
  config_.model_type = "sim";
  config_.vocab_size = profile_.vocab_size;
  config_.max_position_embeddings = profile_.max_model_len;
  config_.num_hidden_layers = 1;
  config_.num_attention_heads = 1;
  config_.num_key_value_heads = 1;
  config_.head_dim = 1;
  config_.hidden_size = 1;
}

void SimExecutor::advance_to(double t_s) {
  if (t_s > now_s_) now_s_ = t_s;
}

StepOutput SimExecutor::execute(const StepInput& input) {
  last_step_s_ = step_seconds(profile_, step_shape(input), block_size_);
  now_s_ += last_step_s_;
  StepOutput output;
  output.step_id = input.step_id;
  output.seqs.resize(input.seqs.size());
  for (size_t i = 0; i < input.seqs.size(); ++i) {
    const ScheduledSequence& seq = input.seqs[i];
    if (!seq.sample) continue;
    for (size_t s = 0; s < seq.sample_seeds.size(); ++s) {
      output.seqs[i].samples.push_back({kSampledToken, -1.0f});
    }
    // Beam search candidates: distinct tokens with falling logprobs.
    if (beam_seed_ && seq.num_top_logprobs > 0) {
      // Gaps between consecutive candidates ~ Exp(1): a per-(sequence, position) ranking.
      std::mt19937_64 rng(*beam_seed_ ^ (seq.seq_id * 0x9E3779B97F4A7C15ull) ^
                          (static_cast<uint64_t>(seq.num_computed_tokens) << 20));
      std::exponential_distribution<float> gap(1.0f);
      float logprob = -gap(rng);
      for (int k = 0; k < seq.num_top_logprobs; ++k, logprob -= gap(rng)) {
        output.seqs[i].top_logprobs.push_back({kSampledToken + 1 + k, logprob});
      }
      continue;
    }
    for (int k = 0; k < seq.num_top_logprobs; ++k) {
      output.seqs[i].top_logprobs.push_back(
          {kSampledToken + 1 + k, -0.5f - 0.25f * static_cast<float>(k)});
    }
  }
  return output;
}

// The 3x3 normal equations, solved by Gaussian elimination with partial pivoting.
CostFit fit_cost_model(const std::vector<StepSample>& samples) {
  if (samples.size() < 3) {
    throw std::invalid_argument("fit_cost_model: at least 3 samples are needed");
  }
  std::array<std::array<double, 4>, 3> m{};  // [A^T A | A^T t]
  for (const StepSample& s : samples) {
    const std::array<double, 3> row = {1.0, static_cast<double>(s.shape.batched_tokens),
                                       static_cast<double>(s.shape.kv_tokens_read)};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m[i][j] += row[i] * row[j];
      m[i][3] += row[i] * s.seconds;
    }
  }
  for (int col = 0; col < 3; ++col) {
    int pivot = col;
    for (int r = col + 1; r < 3; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) pivot = r;
    }
    std::swap(m[col], m[pivot]);
    const double scale = std::abs(m[0][0]) + std::abs(m[1][1]) + std::abs(m[2][2]) + 1.0;
    if (std::abs(m[col][col]) < 1e-12 * scale) {
      throw std::invalid_argument(
          "fit_cost_model: the samples do not determine a, b and c (vary batch and context)");
    }
    for (int r = 0; r < 3; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (int k = col; k < 4; ++k) m[r][k] -= f * m[col][k];
    }
  }
  CostFit fit;
  fit.a = m[0][3] / m[0][0];
  fit.b = m[1][3] / m[1][1];
  fit.c = m[2][3] / m[2][2];
  double sq = 0.0;
  for (const StepSample& s : samples) {
    const double e = fit.a + fit.b * static_cast<double>(s.shape.batched_tokens) +
                     fit.c * static_cast<double>(s.shape.kv_tokens_read) - s.seconds;
    sq += e * e;
  }
  fit.rms_error_s = std::sqrt(sq / static_cast<double>(samples.size()));
  return fit;
}

}  // namespace pagedserve::actors
