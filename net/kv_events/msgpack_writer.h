// MsgpackWriter: the few MessagePack forms the KV-cache event wire format needs (nil, arrays,
// strings, integers, float64), appended to a byte string. Hand-written because Debian's
// msgpack-c++ package pulls in Boost 1.74, which conflicts with the Boost 1.81 we build with.
// Follows the spec (github.com/msgpack/msgpack/blob/master/spec.md): every multi-byte number is
// big-endian, and integers take their shortest form except where fixed_uint64 asks for 0xcf.
// Pure; no state beyond the bytes written.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagedserve::net {

class MsgpackWriter {
 public:
  void nil() { bytes_.push_back(static_cast<char>(0xc0)); }
  void array_header(uint32_t size);
  void str(std::string_view text);
  void uint(uint64_t value);
  void integer(int64_t value);
  // 0xcf and 8 bytes whatever the value, so that decoders which type integers by their encoded
  // width (Go's vmihailenco/msgpack decodes a small value into int8) always see a uint64.
  void fixed_uint64(uint64_t value);
  void float64(double value);

  const std::string& bytes() const { return bytes_; }
  std::string take() { return std::move(bytes_); }

 private:
  void big_endian(uint64_t value, int num_bytes);
  std::string bytes_;
};

}  // namespace pagedserve::net
