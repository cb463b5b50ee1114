// Tokenizer speed: loading the real tokenizers, and encoding short vs long text. The per-byte
// rate of the 120 KB single-word input against the 31-byte phrase (bytes_per_second of the two
// Encode benchmarks) shows that BPE merging stays linear where a naive merge loop is quadratic.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>

#include "model/tokenizer/tokenizer.h"

namespace {

using pagedserve::model::Tokenizer;

std::filesystem::path tokenizers_dir() {
  if (const char* env = std::getenv("PAGEDSERVE_SHARED"))
    return std::filesystem::path(env) / "tokenizers";
  return std::filesystem::path(PAGEDSERVE_SHARED_DIR) / "tokenizers";
}

void BM_LoadTokenizer(benchmark::State& state, const char* name) {
  for (auto _ : state) {
    Tokenizer t = Tokenizer::from_dir(tokenizers_dir() / name);
    benchmark::DoNotOptimize(t.vocab_size());
  }
}
BENCHMARK_CAPTURE(BM_LoadTokenizer, llama2, "llama2")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadTokenizer, smollm2, "smollm2-135m-instruct")
    ->Unit(benchmark::kMillisecond);

void BM_Encode(benchmark::State& state, const char* name) {
  static const Tokenizer llama2 = Tokenizer::from_dir(tokenizers_dir() / "llama2");
  static const Tokenizer smollm2 = Tokenizer::from_dir(tokenizers_dir() / "smollm2-135m-instruct");
  const Tokenizer& t = std::string(name) == "llama2" ? llama2 : smollm2;
  std::string text;
  for (int64_t i = 0; i < state.range(0); ++i) text += "the quick brown fox, 42 jumps! ";
  for (auto _ : state) benchmark::DoNotOptimize(t.encode(text, false));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK_CAPTURE(BM_Encode, llama2, "llama2")->Arg(1)->Arg(4000);
BENCHMARK_CAPTURE(BM_Encode, smollm2, "smollm2")->Arg(1)->Arg(4000);

}  // namespace

BENCHMARK_MAIN();
