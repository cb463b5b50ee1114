// The features the family reference tests check each move the reference's logits by far more
// than the tolerance those tests allow, on the models and lengths they use: an engine that
// ignored any one of them would fail its family test (family_reference_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/model/family_models.h"
#include "tests/model/family_reference.h"

namespace pagedserve::testing {
namespace {

namespace ref = pagedserve::testing;

// Largest |a - b| / max(1, |b|) between the reference logits of two models on one sequence.
double reference_difference(const HfModel& a, const HfModel& b, int length, int context_a,
                            int context_b) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> token(0, a.config.at("vocab_size").get<int>() - 1);
  HfReference ra(a), rb(b);
  double worst = 0;
  for (int i = 0; i < length; ++i) {
    const int32_t t = token(rng);
    const auto la = ra.next(t, context_a), lb = rb.next(t, context_b);
    for (size_t v = 0; v < la.size(); ++v) {
      worst = std::max(worst, std::abs(la[v] - lb[v]) / std::max(1.0, std::abs(lb[v])));
    }
  }
  return worst;
}

// Each family feature moves the reference's logits by far more than the tolerance on the
// sequence lengths used above, so an engine that ignored it would fail its test.
TEST(FamilyReference, EveryFeatureChangesTheReferenceLogits) {
  struct Case {
    std::string what;
    HfModel with, without;
    int length = 20, context_with = 20, context_without = 20;
  };
  std::vector<Case> cases;
  auto add = [&](std::string what, const HfModel& with, auto&& strip) {
    HfModel without = with;
    strip(without);
    cases.push_back({std::move(what), with, std::move(without)});
  };
  auto no_scaling = [](HfModel& m) { m.config["rope_scaling"] = nullptr; };
  ref::FamilyShape s16{.hidden = 64, .heads = 4, .kv_heads = 1, .head_dim = 16};
  HfModel llama3 = ref::llama_model(2,
                                    {{"rope_type", "llama3"},
                                     {"factor", 8.0},
                                     {"low_freq_factor", 1.0},
                                     {"high_freq_factor", 4.0},
                                     {"original_max_position_embeddings", 64}},
                                    s16);
  llama3.config["rope_theta"] = 500.0;
  add("llama3 rope", llama3, no_scaling);
  add("linear rope", ref::llama_model(3, {{"type", "linear"}, {"factor", 4.0}}), no_scaling);
  HfModel dynamic = ref::llama_model(4, {{"type", "dynamic"}, {"factor", 2.0}});
  dynamic.config["max_position_embeddings"] = 12;
  add("dynamic rope", dynamic, no_scaling);
  HfModel yarn = ref::llama_model(
      5, {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}}, s16);
  yarn.config["max_position_embeddings"] = 256;
  add("yarn rope", yarn, no_scaling);
  add("mistral sliding window", ref::mistral_model(8, 5),
      [](HfModel& m) { m.config["sliding_window"] = nullptr; });
  add("qwen2 use_sliding_window", ref::qwen2_model(9),
      [](HfModel& m) { m.config["use_sliding_window"] = true; });
  HfModel qwen2_swa = ref::qwen2_model(21);
  qwen2_swa.config["use_sliding_window"] = true;
  qwen2_swa.config["sliding_window"] = 5;
  qwen2_swa.config["max_window_layers"] = 1;
  add("qwen2 max_window_layers", qwen2_swa, [](HfModel& m) { m.config["max_window_layers"] = 0; });
  HfModel qwen3_yarn = ref::qwen3_model(22);
  qwen3_yarn.config["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}};
  qwen3_yarn.config["rope_theta"] = 10000.0;
  qwen3_yarn.config["max_position_embeddings"] = 40;
  add("qwen3 yarn factor, not max_position_embeddings / original", qwen3_yarn,
      [](HfModel& m) { m.config["rope_scaling"]["factor"] = 2.5; });
  add("qwen2 biases", ref::qwen2_model(9), [](HfModel& m) {
    for (auto it = m.tensors.begin(); it != m.tensors.end();) {
      it = it->first.ends_with(".bias") ? m.tensors.erase(it) : std::next(it);
    }
  });
  add("qwen3 q/k norm", ref::qwen3_model(10), [](HfModel& m) {
    for (int l = 0; l < 3; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      m.tensors.erase(p + "q_norm.weight");
      m.tensors.erase(p + "k_norm.weight");
    }
  });
  add("phi3 sliding window", ref::phi3_model(11, 16, 6, false),
      [](HfModel& m) { m.config["sliding_window"] = nullptr; });
  add("phi4-mini partial rotary", ref::phi3_model(13, 16, 64, true), [](HfModel& m) {
    m.config["partial_rotary_factor"] = 0.5;  // 4 of 8 factors used
  });
  add("gemma2 attention softcap", ref::gemma2_model(15, 5),
      [](HfModel& m) { m.config["attn_logit_softcapping"] = nullptr; });
  add("gemma2 final softcap", ref::gemma2_model(15, 5),
      [](HfModel& m) { m.config["final_logit_softcapping"] = nullptr; });
  add("gemma2 query_pre_attn_scalar", ref::gemma2_model(15, 5),
      [](HfModel& m) { m.config["query_pre_attn_scalar"] = 16; });
  add("gemma2 sliding window", ref::gemma2_model(15, 5),
      [](HfModel& m) { m.config["sliding_window"] = nullptr; });
  // sqrt(40) = 6.3246 is 6.3125 in bfloat16.
  add("gemma2 normalizer rounded to bfloat16", ref::gemma2_model(15, 5, 40).rounded_to("BF16"),
      [](HfModel& m) { m.config["torch_dtype"] = "float32"; });
  add("gemma3 local rope base", ref::gemma3_model(16, 5),
      [](HfModel& m) { m.config["rope_local_base_freq"] = 1000000.0; });
  add("gemma3 global linear scaling", ref::gemma3_model(16, 5), no_scaling);
  add("gemma3 sliding window", ref::gemma3_model(16, 5),
      [](HfModel& m) { m.config["sliding_window"] = nullptr; });
  add("smollm3 no-rope layer", ref::smollm3_model(18), [](HfModel& m) {
    m.config["no_rope_layers"] = {1, 1, 1, 1};
  });
  // Phi-3 short against long factors: the same model read at two context lengths.
  cases.push_back({"phi3 long factors", ref::phi3_model(11, 16, 6, false),
                   ref::phi3_model(11, 16, 6, false), 16, 17, 16});
  for (const Case& c : cases) {
    const double difference =
        reference_difference(c.with, c.without, c.length, c.context_with, c.context_without);
    EXPECT_GT(difference, 100 * ref::kFamilyTolerance) << c.what;
  }
}

}  // namespace
}  // namespace pagedserve::testing
