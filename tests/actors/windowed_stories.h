// stories260K's weights declared as MistralForCausalLM with a sliding window on every layer:
// a real trained model whose window changes its logits within a short generation, for the
// tests of releasing the blocks a window has passed (CPU and CUDA executors).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/test_paths.h"

namespace pagedserve::testing {

// A folder (made once per process and window) with stories260K's files and its config turned
// into Mistral's with `window` on every layer.
inline std::filesystem::path windowed_stories_dir(int window) {
  namespace fs = std::filesystem;
  const fs::path src = stories260k_dir();
  const fs::path out = fs::temp_directory_path() /
                       ("swa_stories_" + std::to_string(getpid()) + "_" + std::to_string(window));
  if (fs::exists(out / "config.json")) return out;
  fs::create_directories(out);
  for (const char* name :
       {"model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    fs::copy_file(src / name, out / name, fs::copy_options::overwrite_existing);
  }
  nlohmann::json config = nlohmann::json::parse(std::ifstream(src / "config.json"));
  config["architectures"] = {"MistralForCausalLM"};
  config["model_type"] = "mistral";
  config["sliding_window"] = window;
  std::ofstream(out / "config.json") << config.dump(2);
  return out;
}

}  // namespace pagedserve::testing
