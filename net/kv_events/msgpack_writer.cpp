// MsgpackWriter: MessagePack encodings (see msgpack_writer.h).
#include "net/kv_events/msgpack_writer.h"

#include <bit>

namespace pagedserve::net {

void MsgpackWriter::big_endian(uint64_t value, int num_bytes) {
  for (int shift = 8 * (num_bytes - 1); shift >= 0; shift -= 8) {
    bytes_.push_back(static_cast<char>((value >> shift) & 0xff));
  }
}

void MsgpackWriter::array_header(uint32_t size) {
  if (size < 16) {
    bytes_.push_back(static_cast<char>(0x90 | size));
  } else if (size <= 0xffff) {
    bytes_.push_back(static_cast<char>(0xdc));
    big_endian(size, 2);
  } else {
    bytes_.push_back(static_cast<char>(0xdd));
    big_endian(size, 4);
  }
}

void MsgpackWriter::str(std::string_view text) {
  const uint64_t size = text.size();
  if (size < 32) {
    bytes_.push_back(static_cast<char>(0xa0 | size));
  } else if (size <= 0xff) {
    bytes_.push_back(static_cast<char>(0xd9));
    big_endian(size, 1);
  } else if (size <= 0xffff) {
    bytes_.push_back(static_cast<char>(0xda));
    big_endian(size, 2);
  } else {
    bytes_.push_back(static_cast<char>(0xdb));
    big_endian(size, 4);
  }
  bytes_.append(text);
}

void MsgpackWriter::uint(uint64_t value) {
  if (value < 0x80) {
    bytes_.push_back(static_cast<char>(value));
  } else if (value <= 0xff) {
    bytes_.push_back(static_cast<char>(0xcc));
    big_endian(value, 1);
  } else if (value <= 0xffff) {
    bytes_.push_back(static_cast<char>(0xcd));
    big_endian(value, 2);
  } else if (value <= 0xffffffffULL) {
    bytes_.push_back(static_cast<char>(0xce));
    big_endian(value, 4);
  } else {
    fixed_uint64(value);
  }
}

void MsgpackWriter::integer(int64_t value) {
  if (value >= 0) {
    uint(static_cast<uint64_t>(value));
    return;
  }
  const uint64_t bits = static_cast<uint64_t>(value);  // two's complement
  if (value >= -32) {
    bytes_.push_back(static_cast<char>(bits & 0xff));  // negative fixint 0xe0..0xff
  } else if (value >= INT8_MIN) {
    bytes_.push_back(static_cast<char>(0xd0));
    big_endian(bits, 1);
  } else if (value >= INT16_MIN) {
    bytes_.push_back(static_cast<char>(0xd1));
    big_endian(bits, 2);
  } else if (value >= INT32_MIN) {
    bytes_.push_back(static_cast<char>(0xd2));
    big_endian(bits, 4);
  } else {
    bytes_.push_back(static_cast<char>(0xd3));
    big_endian(bits, 8);
  }
}

void MsgpackWriter::fixed_uint64(uint64_t value) {
  bytes_.push_back(static_cast<char>(0xcf));
  big_endian(value, 8);
}

void MsgpackWriter::float64(double value) {
  bytes_.push_back(static_cast<char>(0xcb));
  big_endian(std::bit_cast<uint64_t>(value), 8);
}

}  // namespace pagedserve::net
