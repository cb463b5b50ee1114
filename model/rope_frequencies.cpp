// rope_frequencies: the formulas of transformers' modeling_rope_utils.py, in double, rounded to
// float at the end (transformers computes them in float32).
#include "model/rope_frequencies.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace pagedserve::model {
namespace {

using Type = RopeScaling::Type;

std::vector<double> default_inv_freq(double base, int dim) {
  std::vector<double> inv_freq(static_cast<size_t>(dim / 2));
  for (int i = 0; i < dim / 2; ++i) inv_freq[i] = 1.0 / std::pow(base, 2.0 * i / dim);
  return inv_freq;
}

void apply_llama3(const RopeScaling& s, std::vector<double>& inv_freq) {
  const double old_len = s.original_max_position_embeddings;
  const double low_freq_wavelen = old_len / s.low_freq_factor;
  const double high_freq_wavelen = old_len / s.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;  // low frequencies: interpolated
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth =
          (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0 - smooth) * f / s.factor + smooth * f;
    }  // high frequencies: unchanged
  }
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// YaRN: interpolate the low frequencies, keep the high ones, ramp between.
double apply_yarn(const RopeScaling& s, double base, int dim, std::vector<double>& inv_freq) {
  const double original = s.original_max_position_embeddings;
  const auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = correction_dim(s.beta_fast);
  double high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    const double extrapolated = inv_freq[i];
    const double interpolated = inv_freq[i] / s.factor;
    inv_freq[i] = interpolated * (1.0 - extrapolation_weight) + extrapolated * extrapolation_weight;
  }
  if (s.attention_factor > 0.0) return s.attention_factor;
  if (s.mscale > 0.0 && s.mscale_all_dim > 0.0) {
    return yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  }
  return yarn_mscale(s.factor, 1.0);
}

std::vector<float> to_float(const std::vector<double>& values) {
  return std::vector<float>(values.begin(), values.end());
}

}  // namespace

RopeFrequencies rope_frequencies(const ModelConfig& c, bool local) {
  const int dim = c.rope_dims();
  RopeFrequencies out;
  if (local) {
    out.inv_freq = to_float(default_inv_freq(c.rope_local_theta, dim));
    return out;
  }
  const RopeScaling& s = c.rope_scaling;
  double base = c.rope_theta;
  if (s.type == Type::kDynamic && s.factor > 1.0) {
    const double max_len = c.max_position_embeddings * s.factor;
    base *= std::pow(s.factor * max_len / c.max_position_embeddings - (s.factor - 1.0),
                     static_cast<double>(dim) / (dim - 2));
  }
  std::vector<double> inv_freq = default_inv_freq(base, dim);
  double attention_factor = 1.0;
  switch (s.type) {
    case Type::kNone:
    case Type::kDynamic:
      break;
    case Type::kLinear:
      for (double& f : inv_freq) f /= s.factor;
      break;
    case Type::kLlama3:
      apply_llama3(s, inv_freq);
      break;
    case Type::kYarn:
      attention_factor = apply_yarn(s, base, dim, inv_freq);
      break;
    case Type::kLongRope: {
      const std::vector<double> plain = inv_freq;
      std::vector<double> long_freq = plain;
      for (size_t i = 0; i < plain.size(); ++i) {
        inv_freq[i] = plain[i] / s.short_factor[i];
        long_freq[i] = plain[i] / s.long_factor[i];
      }
      out.inv_freq_long = to_float(long_freq);
      out.long_after = s.original_max_position_embeddings;
      attention_factor =
          s.attention_factor > 0.0 ? s.attention_factor
          : s.factor <= 1.0
              ? 1.0
              : std::sqrt(1.0 + std::log(s.factor) / std::log(s.original_max_position_embeddings));
      break;
    }
  }
  for (size_t i = 0; i < s.freq_divisors.size() && i < inv_freq.size(); ++i) {
    inv_freq[i] /= s.freq_divisors[i];
  }
  out.inv_freq = to_float(inv_freq);
  out.attention_factor = static_cast<float>(attention_factor);
  out.plain = s.type == Type::kNone && s.freq_divisors.empty() && dim == c.head_dim;
  return out;
}

}  // namespace pagedserve::model
