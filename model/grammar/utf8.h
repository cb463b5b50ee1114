// UTF-8 helpers of the grammar code: encoding, strict decoding, and the split of code point
// ranges into UTF-8 byte-range sequences (the algorithm of Rust regex-syntax's Utf8Sequences),
// so that a class over code points becomes alternatives over bytes accepting only valid UTF-8.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagedserve::model::grammar::detail {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CodePointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;  // inclusive
  auto operator<=>(const CodePointRange&) const = default;
};

struct ByteRange {
  uint8_t lo = 0;
  uint8_t hi = 0;  // inclusive
};

// Bytes of one length, position by position: byte i lies in ranges[i].
using Utf8Sequence = std::vector<ByteRange>;

void append_utf8(std::string& out, uint32_t code_point);
// The code point starting at text[pos] (strict UTF-8: no overlongs, surrogates or values over
// U+10FFFF); returns its length in bytes, 0 when the bytes there are not valid UTF-8.
int decode_utf8(std::string_view text, size_t pos, uint32_t& code_point);
// Offset of the first invalid byte, or npos when all of `text` is valid UTF-8.
size_t find_invalid_utf8(std::string_view text);

// Sorted, merged, non-overlapping ranges.
std::vector<CodePointRange> normalize(std::vector<CodePointRange> ranges);
// The code points in [0, U+10FFFF] outside `ranges` (normalized input).
std::vector<CodePointRange> complement(const std::vector<CodePointRange>& ranges);
// The UTF-8 encodings of the (normalized) ranges, surrogates excluded, in increasing order.
std::vector<Utf8Sequence> utf8_sequences(const std::vector<CodePointRange>& ranges);

}  // namespace pagedserve::model::grammar::detail
