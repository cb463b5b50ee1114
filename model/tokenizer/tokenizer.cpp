// Tokenizer's public API: encode (added-token split -> normalize -> pre-tokenize -> BPE ->
// post-process) and decode (id -> token string -> decoder -> optional clean-up).
#include "model/tokenizer/tokenizer.h"

#include "model/tokenizer/tokenizer_impl.h"

namespace pagedserve::model {

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& impl = *impl_;
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = impl.special_prefix_ids;
  std::vector<std::string> words;
  bool at_text_start = true;
  for (const tokenizer::TextSection& raw : impl.added.split_raw(text)) {
    if (raw.token_id) {
      ids.push_back(*raw.token_id);
      at_text_start = false;
      continue;
    }
    // Normalized added tokens are matched in the normalized text (so Llama 2's "<s>" only
    // matches as "▁<s>").
    const std::string normalized = impl.normalizer.normalize(raw.text);
    for (const tokenizer::TextSection& section : impl.added.split_normalized(normalized)) {
      if (section.token_id) {
        ids.push_back(*section.token_id);
      } else {
        words.clear();
        impl.pre_tokenizer.pre_tokenize(section.text, at_text_start, words);
        for (const std::string& word : words) impl.model.encode_word(word, ids);
      }
      at_text_start = false;
    }
  }
  if (add_special_tokens) {
    ids.insert(ids.end(), impl.special_suffix_ids.begin(), impl.special_suffix_ids.end());
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens,
                              std::optional<bool> cleanup) const {
  const Impl& impl = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    // Unknown ids are dropped rather than failing a whole response.
    if (id < 0 || static_cast<size_t>(id) >= impl.id_to_token.size()) continue;
    if (skip_special_tokens && impl.is_special[id]) continue;
    tokens.push_back(impl.id_to_token[id]);
  }
  std::string text = impl.decoder.decode(std::move(tokens));
  if (cleanup.value_or(impl.clean_up_tokenization_spaces)) {
    text = tokenizer::clean_up_tokenization(std::move(text));
  }
  return text;
}

int Tokenizer::vocab_size() const { return static_cast<int>(impl_->id_to_token.size()); }
std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_token_id; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos_token_id; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_token_ids.find(token); it != impl_->added_token_ids.end()) {
    return it->second;
  }
  return impl_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size()) return "";
  return impl_->id_to_token[id];
}

std::string Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size()) return "";
  return impl_->decoder.decode({impl_->id_to_token[id]}, /*lossy=*/false);
}

std::string Tokenizer::token_bytes_after_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size()) return "";
  // Decoded after a plain reference piece, minus that piece: decoders strip or rewrite only
  // the start of a text (a leading space, a prepended "▁").
  static const std::string kReference = "x";
  const std::string reference = impl_->decoder.decode({kReference}, /*lossy=*/false);
  const std::string both =
      impl_->decoder.decode({kReference, impl_->id_to_token[id]}, /*lossy=*/false);
  if (!both.starts_with(reference)) return token_bytes(id);
  return both.substr(reference.size());
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->is_special.size() && impl_->is_special[id];
}

std::string tokenizer::clean_up_tokenization(std::string text) {
  // The same replacements, in the same order, as transformers' clean_up_tokenization.
  static constexpr std::pair<std::string_view, std::string_view> kReplacements[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  for (const auto& [from, to] : kReplacements) {
    if (text.find(from) == std::string::npos) continue;
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
      out.append(text, pos, hit - pos);
      out.append(to);
    }
    out.append(text, pos);
    text = std::move(out);
  }
  return text;
}

}  // namespace pagedserve::model
