// The engine flags every subcommand that runs a model shares (generate now; serve and bench
// later), and their translation into an EngineConfig.
#pragma once

#include <set>
#include <string>

#include "actors/llm_engine.h"
#include "tools/cli_flags.h"

namespace pagedserve::tools {

extern const std::set<std::string> kEngineValueFlags;
extern const std::set<std::string> kEngineBoolFlags;
extern const char* const kEngineFlagsHelp;

actors::EngineConfig engine_config_from_flags(const CliFlags& flags);
// --quantization as a weight format (none when absent); a UsageError naming a bad value.
model::WeightFormat weight_format_from_flags(const CliFlags& flags);

// The benchmarks' sampling flags (--temperature, --top-p, --top-k, --min-p; default greedy),
// checked as a request's would be (a UsageError naming the field).
extern const std::set<std::string> kBenchSamplingFlags;
extern const char* const kBenchSamplingHelp;
model::SamplingParams bench_sampling_from_flags(const CliFlags& flags);

}  // namespace pagedserve::tools
