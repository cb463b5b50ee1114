// Fuzzes encode and decode of the real tokenizers in ../shared (SmolLM2: byte-level BPE;
// Llama 2 and stories260K: SentencePiece BPE with byte fallback) on arbitrary bytes. The first
// byte picks the tokenizer and the mode, the rest is text (encode) or little-endian 16-bit ids
// (decode, incremental decode).
//
// Checks, each against a property of the format rather than the code's own output:
// - encode never throws, and every id is inside vocab_size();
// - round trip: decode(encode(text)) == text for valid UTF-8 (the
//   SentencePiece ones when the text has no U+2581, which their normalizer writes for spaces,
//   and no special-token spelling; SmolLM2 when every byte has its byte-level token);
// - decode of any ids (out-of-range ones are dropped) is valid UTF-8;
// - IncrementalDecoder: every piece is valid UTF-8, and when the full decode is clean text
//   (no U+FFFD) the pieces concatenate to it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "model/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

using namespace pagedserve;

namespace {

struct NamedTokenizer {
  const char* name;
  model::Tokenizer tokenizer;
  bool byte_level;
  // Byte-level only: the bytes whose GPT-2 byte character is not in the vocabulary (SmolLM2
  // lacks 21, e.g. 0x04); like Hugging Face, encode drops them, so texts with them do not
  // round-trip.
  std::array<bool, 256> unencodable{};
};

// GPT-2's bytes_to_unicode (the published table byte-level BPE uses): printable Latin-1 bytes
// stand for themselves, the others for U+0100 onwards in byte order.
std::string byte_level_char(uint8_t byte) {
  const auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  uint32_t cp = byte;
  if (!printable(byte)) {
    cp = 0x100;
    for (int b = 0; b < byte; ++b) cp += printable(b) ? 0 : 1;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

void find_unencodable(NamedTokenizer& t) {
  for (int b = 0; b < 256; ++b) {
    t.unencodable[b] = !t.tokenizer.token_to_id(byte_level_char(static_cast<uint8_t>(b)));
  }
}

std::vector<NamedTokenizer>& tokenizers() {
  static std::vector<NamedTokenizer> all = [] {
    const std::filesystem::path dir = fuzz::shared_dir();
    std::vector<NamedTokenizer> out;
    out.push_back(
        {"smollm2", model::Tokenizer::from_dir(dir / "tokenizers/smollm2-135m-instruct"), true});
    out.push_back({"llama2", model::Tokenizer::from_dir(dir / "tokenizers/llama2"), false});
    out.push_back({"stories260K", model::Tokenizer::from_dir(dir / "models/stories260K"), false});
    find_unencodable(out[0]);
    return out;
  }();
  return all;
}

// RFC 3629 UTF-8: no overlongs, no surrogates, nothing above U+10FFFF.
bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMinOf[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinOf[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

std::string hex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    static constexpr char kDigits[] = "0123456789abcdef";
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

void check_encode(const NamedTokenizer& t, std::string_view text, bool add_special) {
  const std::vector<int32_t> ids = t.tokenizer.encode(text, add_special);
  for (int32_t id : ids) {
    FUZZ_CHECK(id >= 0 && id < t.tokenizer.vocab_size(), t.name + (" id " + std::to_string(id)));
  }
  if (add_special || !is_valid_utf8(text)) return;
  for (char c : text) {
    if (t.unencodable[static_cast<uint8_t>(c)]) return;
  }
  if (!t.byte_level) {
    for (std::string_view special : {"\xe2\x96\x81", "<s>", "</s>", "<unk>"}) {
      if (text.find(special) != std::string_view::npos) return;
    }
  }
  const std::string decoded = t.tokenizer.decode(ids, false, false);
  FUZZ_CHECK(decoded == text,
             std::string(t.name) + " round trip: " + hex(text) + " -> " + hex(decoded));
}

std::vector<int32_t> ids_of(std::string_view bytes) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    const auto lo = static_cast<unsigned char>(bytes[i]);
    const auto hi = static_cast<unsigned char>(bytes[i + 1]);
    // Mostly ids inside every vocabulary; 0xFFxx are out of range for all three.
    ids.push_back(hi == 0xFF ? 0x7FFFFF00 | lo : (hi << 8 | lo));
  }
  return ids;
}

void check_decode(const NamedTokenizer& t, std::string_view bytes, bool skip_special) {
  std::vector<int32_t> ids = ids_of(bytes);
  const int vocab = t.tokenizer.vocab_size();
  const std::string full = t.tokenizer.decode(ids, skip_special, false);
  FUZZ_CHECK(is_valid_utf8(full), std::string(t.name) + " decode is not UTF-8: " + hex(full));

  std::erase_if(ids, [vocab](int32_t id) { return id >= vocab; });
  model::IncrementalDecoder incremental(t.tokenizer, {}, skip_special);
  std::string joined;
  for (int32_t id : ids) {
    const std::string piece = incremental.push(id);
    FUZZ_CHECK(is_valid_utf8(piece), std::string(t.name) + " piece is not UTF-8: " + hex(piece));
    joined += piece;
  }
  const std::string rest = incremental.flush();
  FUZZ_CHECK(is_valid_utf8(rest), std::string(t.name) + " flush is not UTF-8: " + hex(rest));
  joined += rest;
  const std::string expected = t.tokenizer.decode(ids, skip_special, false);
  if (expected.find("\xef\xbf\xbd") == std::string::npos) {
    FUZZ_CHECK(joined == expected,
               std::string(t.name) + " incremental " + hex(joined) + " != full " + hex(expected));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const NamedTokenizer& t = tokenizers()[(selector & 3) % 3];
  if (selector & 4) {
    check_decode(t, rest, (selector & 8) != 0);
  } else {
    check_encode(t, rest, (selector & 8) != 0);
  }
  return 0;
}
