// Formats a tensor shape as "[512, 64]" for error messages. Private to model/loader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagedserve::model::detail {

inline std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace pagedserve::model::detail
