// Where tests find ../shared (models, tokenizers, traces) and the built pagedserve binary.
// PAGEDSERVE_SHARED in the environment overrides the path baked in at configure time.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace pagedserve::testing {

inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("PAGEDSERVE_SHARED")) return env;
  return PAGEDSERVE_SHARED_DIR;
}

inline std::filesystem::path stories260k_dir() { return shared_dir() / "models" / "stories260K"; }

}  // namespace pagedserve::testing
