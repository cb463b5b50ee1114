// The GPT-2 byte-level alphabet: printable Latin-1 bytes map to themselves, the other 68 bytes
// to U+0100 onwards in byte order.
#include "model/tokenizer/byte_level.h"

#include "model/tokenizer/unicode_tables.h"

namespace pagedserve::model::tokenizer {

ByteLevelAlphabet::ByteLevelAlphabet() {
  char_to_byte_.fill(-1);
  char32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
    byte_to_char_[b] = cp;
    char_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

std::string ByteLevelAlphabet::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) unicode::append_utf8(out, byte_to_char_[static_cast<uint8_t>(c)]);
  return out;
}

bool ByteLevelAlphabet::decode(std::string_view token, std::string& out) const {
  const size_t old_size = out.size();
  for (size_t pos = 0; pos < token.size();) {
    const unicode::DecodedChar c = unicode::decode_utf8(token, pos);
    if (c.cp >= char_to_byte_.size() || char_to_byte_[c.cp] < 0 ||
        (c.cp == 0xFFFD && c.num_bytes == 1)) {
      out.resize(old_size);
      return false;
    }
    out.push_back(static_cast<char>(char_to_byte_[c.cp]));
    pos += c.num_bytes;
  }
  return true;
}

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

}  // namespace pagedserve::model::tokenizer
