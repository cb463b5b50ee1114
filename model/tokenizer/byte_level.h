// GPT-2's reversible byte <-> printable-character map used by ByteLevel pre-tokenizers and
// decoders: every byte becomes one visible code point so that BPE vocabularies hold no raw
// control bytes or spaces ("Ġ" is the space byte 0x20).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagedserve::model::tokenizer {

class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();
  // Each byte of `bytes` as its mapped code point, UTF-8 encoded.
  std::string encode(std::string_view bytes) const;
  // The inverse: appends the original bytes of `token` to `out`. Returns false (appending
  // nothing) when some character is not in the alphabet, e.g. an added token's text.
  bool decode(std::string_view token, std::string& out) const;

 private:
  std::array<char32_t, 256> byte_to_char_{};
  std::array<int16_t, 512> char_to_byte_{};  // -1 for code points outside the alphabet
};

// One shared immutable instance (built on first use; thread-safe static initialisation).
const ByteLevelAlphabet& byte_level_alphabet();

}  // namespace pagedserve::model::tokenizer
