// RequestLimits: the per-request caps an operator sets on `pagedserve serve` (--max-n,
// --max-best-of, --max-prompt-tokens) that the pure parsing code enforces with a 400 naming
// the field and the limit. Plain values, no I/O; one copy lives in ServedModel.
#pragma once

namespace pagedserve::net {

// The most sequences one prompt may ask for (n, best_of, beam width), whatever the flags say:
// SamplingParams::validate's own bound.
inline constexpr int kMaxSequencesPerPrompt = 128;

struct RequestLimits {
  int max_n = kMaxSequencesPerPrompt;        // `n` above this: 400 (param "n")
  int max_best_of = kMaxSequencesPerPrompt;  // `best_of` above this: 400 (param "best_of")
  // Tokens in one prompt (a chat's rendered conversation); 0: only the model's context bounds
  // it (prompt + max_tokens <= max_model_len, checked anyway).
  int max_prompt_tokens = 0;
};

}  // namespace pagedserve::net
