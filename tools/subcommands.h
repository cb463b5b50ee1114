// The pagedserve subcommands. Each takes the arguments after its name and returns the exit
// code; a UsageError (tools/cli_flags.h) means bad flags.
#pragma once

#include <string>
#include <vector>

namespace pagedserve::tools {

int run_generate(const std::vector<std::string>& args);
int run_serve(const std::vector<std::string>& args);  // tools/serve.cpp
int run_bench(const std::vector<std::string>& args);
// `bench serve` and `bench sweep` (tools/bench_serve.cpp); name is "serve" or "sweep".
int run_bench_online(const std::string& name, const std::vector<std::string>& args);
int run_bench_paper(const std::vector<std::string>& args);      // tools/bench_paper.cpp
int run_bench_calibrate(const std::vector<std::string>& args);  // tools/bench_paper.cpp
int run_bench_admission(const std::vector<std::string>& args);  // tools/bench_paper.cpp
int run_bench_soak(const std::vector<std::string>& args);       // tools/bench_soak.cpp
int run_make_model(const std::vector<std::string>& args);       // tools/make_model.cpp
int run_tokenize(const std::vector<std::string>& args);         // tools/tokenize.cpp
int run_quantize(const std::vector<std::string>& args);         // tools/quantize.cpp
// `chat-template render` (tools/chat_template.cpp).
int run_chat_template(const std::vector<std::string>& args);
// `bench throughput --batch B`: prefill and decode against the machine's roofline
// (tools/bench_phases.cpp).
int run_bench_phases(const std::vector<std::string>& args);

}  // namespace pagedserve::tools
