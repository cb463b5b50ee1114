// pagedserve: one executable, one subcommand per job. Errors are reported on stderr as
// "pagedserve: error: ..." with a non-zero exit: 2 for bad usage, 1 for everything else.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "model/loader/model_error.h"
#include "tools/cli_flags.h"
#include "tools/subcommands.h"

namespace {

const char* const kUsage =
    "usage: pagedserve <command> [flags]\n"
    "commands:\n"
    "  generate   generate text for one or more prompts (offline, no server)\n"
    "  serve      the OpenAI-compatible HTTP/SSE/WebSocket server\n"
    "  bench      benchmarks: `bench throughput` (offline engine speed)\n"
    "  make-model write a random-weight Llama of a given shape (Hugging Face layout)\n"
    "  tokenize   text to token ids, or ids to text, with a model's tokenizer (HF or GGUF)\n"
    "  quantize   rewrite a GGUF model's matrices in a quantized type (Q8_0, Q4_K_M, ...)\n"
    "  chat-template  `chat-template render`: a chat template with a JSON context, as text\n"
    "run `pagedserve <command> --help` for its flags\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (command == "generate") return pagedserve::tools::run_generate(args);
    if (command == "serve") return pagedserve::tools::run_serve(args);
    if (command == "bench") return pagedserve::tools::run_bench(args);
    if (command == "make-model") return pagedserve::tools::run_make_model(args);
    if (command == "tokenize") return pagedserve::tools::run_tokenize(args);
    if (command == "quantize") return pagedserve::tools::run_quantize(args);
    if (command == "chat-template") return pagedserve::tools::run_chat_template(args);
    std::cerr << "pagedserve: error: unknown command '" << command << "'\n" << kUsage;
    return 2;
  } catch (const pagedserve::tools::UsageError& e) {
    std::cerr << "pagedserve " << command << ": error: " << e.what() << "\n";
    return 2;
  } catch (const pagedserve::model::ModelError& e) {
    std::cerr << "pagedserve " << command << ": error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "pagedserve " << command << ": error: " << e.what() << "\n";
    return 1;
  }
}
