// IncrementalDecoder: vLLM's prefix/read-offset detokenization. Each push decodes the short
// window ids[prefix_offset:] and emits what it adds beyond ids[prefix_offset:read_offset], so
// decoder context rules (leading-space strip, byte fallback, byte-level UTF-8) act as they do
// in a full decode, while the work per token stays constant.
#include "model/tokenizer/tokenizer.h"

namespace pagedserve::model {
namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD
// Prompt tokens kept as context, as vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET.
constexpr size_t kContextTokens = 5;
// How far the context may reach back further to avoid starting inside a UTF-8 character.
constexpr size_t kMaxExtraContextTokens = 16;

}  // namespace

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer,
                                       std::span<const int32_t> prompt_ids,
                                       bool skip_special_tokens)
    : tokenizer_(&tokenizer),
      skip_special_tokens_(skip_special_tokens),
      ids_(prompt_ids.begin(), prompt_ids.end()) {
  read_offset_ = ids_.size();
  prefix_offset_ = read_offset_ > kContextTokens ? read_offset_ - kContextTokens : 0;
  // A window that begins inside a multi-byte character decodes to U+FFFD there, and byte
  // fallback would then turn the whole byte run into U+FFFDs even after generation completes
  // the character; reach back to the character's start instead.
  const std::span<const int32_t> all(ids_);
  for (size_t extra = 0; prefix_offset_ > 0 && extra < kMaxExtraContextTokens; ++extra) {
    const std::string context = tokenizer.decode(
        all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens, false);
    if (!context.starts_with(kReplacementChar)) break;
    --prefix_offset_;
  }
}

std::string IncrementalDecoder::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text = tokenizer_->decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_, false);
  const std::string new_text =
      tokenizer_->decode(all.subspan(prefix_offset_), skip_special_tokens_, false);
  // Hold back while the newest character is incomplete (decoded as U+FFFD) or nothing was added.
  if (new_text.size() <= prefix_text.size() || new_text.ends_with(kReplacementChar) ||
      !new_text.starts_with(prefix_text)) {
    return "";
  }
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return new_text.substr(prefix_text.size());
}

std::string IncrementalDecoder::flush() {
  if (read_offset_ == ids_.size()) return "";
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text = tokenizer_->decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_, false);
  const std::string new_text =
      tokenizer_->decode(all.subspan(prefix_offset_), skip_special_tokens_, false);
  prefix_offset_ = read_offset_ = ids_.size();
  // Normally new_text extends prefix_text; otherwise emit what follows the common prefix,
  // backed up to a character boundary so the piece stays valid UTF-8.
  size_t common = 0;
  while (common < prefix_text.size() && common < new_text.size() &&
         prefix_text[common] == new_text[common]) {
    ++common;
  }
  while (common > 0 && common < new_text.size() &&
         (static_cast<unsigned char>(new_text[common]) & 0xC0) == 0x80) {
    --common;
  }
  return new_text.substr(common);
}

}  // namespace pagedserve::model
