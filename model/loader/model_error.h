// The one exception type for bad model input. Its message always names the file and the
// problem ("model.safetensors: header length 9999999 exceeds file size 120"), because a user
// pointing pagedserve at a broken directory must learn which file to fix.
#pragma once

#include <stdexcept>
#include <string>

namespace pagedserve::model {

class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pagedserve::model
