// The tokenizer.json "decoder" stage: token strings back to text (Replace, ByteFallback, Fuse,
// Strip, ByteLevel, Metaspace, and Sequences of them), applied to the whole token list at once
// as HF's decode_chain does, so context rules such as Strip's leading-space cut see the list.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace pagedserve::model::tokenizer {

class Decoder {
 public:
  // `config` is the "decoder" value (null = tokens joined by spaces, as HF). Throws ModelError
  // for unsupported types.
  static Decoder from_json(const nlohmann::json& config);

  // lossy: bytes that are not valid UTF-8 become U+FFFD (HF's decode); false: they are kept
  // as they are (the raw bytes of a partial character, e.g. one byte-fallback token).
  std::string decode(std::vector<std::string> tokens, bool lossy = true) const;

 private:
  enum class Kind { kReplace, kByteFallback, kFuse, kStrip, kByteLevel, kMetaspace };
  struct Step {
    Kind kind;
    std::string pattern;  // kReplace: literal to find; kMetaspace: the replacement character
    std::string content;  // kReplace: replacement; kStrip: the character to strip
    size_t strip_start = 0;
    size_t strip_stop = 0;
    bool strip_first_space = true;  // kMetaspace: drop the prepended space of the first token
  };
  void add_steps(const nlohmann::json& config);
  static void apply(const Step& step, std::vector<std::string>& tokens, bool lossy);

  std::vector<Step> steps_;
  bool join_with_spaces_ = false;  // no decoder at all
};

}  // namespace pagedserve::model::tokenizer
