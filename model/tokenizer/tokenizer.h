// Tokenizer: Hugging Face tokenizer.json (+ tokenizer_config.json) BPE tokenizers, both
// SentencePiece style (Llama 2, TinyLlama, stories260K: the "▁" normalizer, byte fallback)
// and byte-level (GPT-2 style pre-tokenizer: Llama 3, Qwen2, SmolLM), with special and added
// tokens. Pure logic: no I/O after construction, safe to share across threads (const).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagedserve::model {

class GgufFile;  // model/loader/gguf.h

class Tokenizer {
 public:
  // Reads tokenizer.json and, when present beside it, tokenizer_config.json from `dir`.
  // Throws ModelError (model/loader/model_error.h) naming the file for missing files, invalid
  // JSON or an unsupported tokenizer model/normalizer/pre-tokenizer.
  static Tokenizer from_dir(const std::filesystem::path& dir);
  static Tokenizer from_files(const std::filesystem::path& tokenizer_json,
                              const std::optional<std::filesystem::path>& tokenizer_config_json);
  // From a GGUF file's tokenizer.ggml.* metadata: `llama` (SentencePiece BPE with scores and
  // byte fallback) or `gpt2` (byte-level BPE with merges and the tokenizer.ggml.pre
  // pre-tokenizer), token types, special ids and add_bos/add_eos. Works on vocabulary-only
  // files. Throws ModelError naming the file for a missing or unsupported tokenizer.
  static Tokenizer from_gguf(const GgufFile& file);
  // The tokenizer of whatever --model names: a folder with tokenizer.json through from_dir,
  // a GGUF file (or a folder holding one .gguf and no config.json) through from_gguf.
  static Tokenizer from_model(const std::filesystem::path& model_path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_special_tokens: run the post-processor (e.g. prepend BOS), as HF's encode() does.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // cleanup: apply clean_up_tokenization_spaces; nullopt = what tokenizer_config.json says.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false,
                     std::optional<bool> cleanup = std::nullopt) const;

  int vocab_size() const;  // number of ids (model vocab + added tokens)
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // raw vocab string, "" when out of range
  // The bytes token `id` decodes to on its own (decode({id}) without cleanup), with a partial
  // UTF-8 character kept as raw bytes instead of U+FFFD; "" when out of range. What OpenAI's
  // logprobs `bytes` field carries.
  std::string token_bytes(int32_t id) const;
  // The bytes token `id` adds when it follows other text: token_bytes without the decoder's
  // start-of-text rules (SentencePiece's "▁s" is " s" here, "s" in token_bytes). What a
  // grammar matcher must see, since generated tokens continue a prompt.
  std::string token_bytes_after_text(int32_t id) const;
  bool is_special(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of generated ids into text pieces, never emitting half a UTF-8 character
// and applying the decoder's context rules (e.g. the leading-space strip of SentencePiece) as
// a full decode of the same ids would. Owned by one request; not thread-safe.
class IncrementalDecoder {
 public:
  // prompt_ids give context (so the first generated token decodes as it would mid-text);
  // they are not emitted.
  IncrementalDecoder(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids,
                     bool skip_special_tokens = true);
  // Returns the new text that `id` completes (possibly empty while a character is partial).
  std::string push(int32_t id);
  // Whatever is still held back at the end of the stream (an incomplete UTF-8 sequence is
  // emitted as U+FFFD, as HF does).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids_ before this are context already accounted for
  size_t read_offset_ = 0;    // ids_ before this have been emitted
};

}  // namespace pagedserve::model
