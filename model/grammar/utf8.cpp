// UTF-8 encoding, decoding and range splitting for the grammar builder (see utf8.h).
#include "model/grammar/utf8.h"

#include <algorithm>

namespace pagedserve::model::grammar::detail {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int decode_utf8(std::string_view text, size_t pos, uint32_t& cp) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  int len = 0;
  uint32_t min = 0;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (pos + len > text.size()) return 0;
  for (int i = 1; i < len; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  if (cp < min || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

size_t find_invalid_utf8(std::string_view text) {
  uint32_t cp = 0;
  for (size_t pos = 0; pos < text.size();) {
    const int len = decode_utf8(text, pos, cp);
    if (len == 0) return pos;
    pos += len;
  }
  return std::string_view::npos;
}

std::vector<CodePointRange> normalize(std::vector<CodePointRange> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<CodePointRange> out;
  for (const CodePointRange& r : ranges) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodePointRange> complement(const std::vector<CodePointRange>& ranges) {
  std::vector<CodePointRange> out;
  uint32_t next = 0;
  for (const CodePointRange& r : ranges) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

namespace {

// Splits r (one piece of Utf8Sequences' inner loop). True: r was narrowed and the rest pushed.
bool split_once(CodePointRange& r, std::vector<CodePointRange>& todo) {
  static constexpr uint32_t kMaxOfLength[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t max : kMaxOfLength) {
    if (r.lo <= max && max < r.hi) {
      todo.push_back({max + 1, r.hi});
      r.hi = max;
      return true;
    }
  }
  if (r.hi <= 0x7F) return false;
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((r.lo & ~m) != (r.hi & ~m)) {
      if ((r.lo & m) != 0) {
        todo.push_back({(r.lo | m) + 1, r.hi});
        r.hi = r.lo | m;
        return true;
      }
      if ((r.hi & m) != m) {
        todo.push_back({r.hi & ~m, r.hi});
        r.hi = (r.hi & ~m) - 1;
        return true;
      }
    }
  }
  return false;
}

}  // namespace

std::vector<Utf8Sequence> utf8_sequences(const std::vector<CodePointRange>& ranges) {
  std::vector<Utf8Sequence> out;
  std::vector<CodePointRange> todo(ranges.rbegin(), ranges.rend());
  while (!todo.empty()) {
    CodePointRange r = todo.back();
    todo.pop_back();
    if (r.lo < 0xE000 && r.hi > 0xD7FF) {  // no surrogates
      todo.push_back({0xE000, r.hi});
      r.hi = 0xD7FF;
    }
    if (r.lo > r.hi) continue;
    while (split_once(r, todo)) {
    }
    std::string lo, hi;
    append_utf8(lo, r.lo);
    append_utf8(hi, r.hi);
    Utf8Sequence seq(lo.size());
    for (size_t i = 0; i < lo.size(); ++i)
      seq[i] = {static_cast<uint8_t>(lo[i]), static_cast<uint8_t>(hi[i])};
    out.push_back(std::move(seq));
  }
  return out;
}

}  // namespace pagedserve::model::grammar::detail
