// Test helpers for model/loader: a self-removing temp directory, a tiny safetensors writer
// (well-formed files and deliberately broken ones), and an independent safetensors reader that
// shares no code with the loader, so tests compare the loader against a second implementation.
#pragma once

#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagedserve::model::testing {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device seed;
    path_ = std::filesystem::temp_directory_path() /
            ("pagedserve_loader_test_" + std::to_string(::getpid()) + "_" +
             std::to_string(counter++) + "_" + std::to_string(seed()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_json(const std::filesystem::path& path, const nlohmann::json& value) {
  write_file(path, value.dump(2));
}

// One tensor to write: raw little-endian bytes plus the header fields.
struct RawTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", or anything else for error tests
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::string f32_bytes(const std::vector<float>& values) {
  std::string out;
  for (float v : values) {
    const auto bits = std::bit_cast<uint32_t>(v);
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((bits >> (8 * b)) & 0xff));
  }
  return out;
}

inline std::string u16_bytes(const std::vector<uint16_t>& values) {
  std::string out;
  for (uint16_t v : values) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>(v >> 8));
  }
  return out;
}

inline std::string le_u64(uint64_t value) {
  std::string out;
  for (int b = 0; b < 8; ++b) out.push_back(static_cast<char>((value >> (8 * b)) & 0xff));
  return out;
}

// Any header text and data, with the header length prefix computed from the text.
inline void write_raw_safetensors(const std::filesystem::path& path, const std::string& header,
                                  const std::string& data) {
  write_file(path, le_u64(header.size()) + header + data);
}

// Header JSON for tensors packed back to back in the given order.
inline nlohmann::json safetensors_header(const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  return header;
}

inline void write_safetensors(const std::filesystem::path& path,
                              const std::vector<RawTensor>& tensors) {
  std::string data;
  for (const RawTensor& t : tensors) data += t.bytes;
  write_raw_safetensors(path, safetensors_header(tensors).dump(), data);
}

// Independent reader for F32 tensors: nlohmann for the header, std::ifstream for the bytes.
inline std::vector<float> read_f32_tensor(const std::filesystem::path& path,
                                          const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  unsigned char length_bytes[8] = {};
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  uint64_t header_len = 0;
  for (int b = 7; b >= 0; --b) header_len = (header_len << 8) | length_bytes[b];
  std::string header_text(header_len, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_len));
  const nlohmann::json header = nlohmann::json::parse(header_text);
  const nlohmann::json& entry = header.at(name);
  if (entry.at("dtype") != "F32") throw std::runtime_error(name + " is not F32");
  const auto begin = entry.at("data_offsets")[0].get<uint64_t>();
  const auto end = entry.at("data_offsets")[1].get<uint64_t>();
  std::vector<float> values((end - begin) / 4);
  in.seekg(static_cast<std::streamoff>(8 + header_len + begin));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(end - begin));
  if (!in) throw std::runtime_error("short read of " + name);
  return values;  // assumes a little-endian host, as the loader's tests run on
}

// A small random Llama: the dimensions, config.json, and its tensors in Hugging Face names.
struct TinyLlama {
  int hidden = 8;
  int ffn = 12;
  int layers = 2;
  int heads = 2;
  int kv_heads = 1;
  int head_dim = 4;
  int vocab = 16;
  bool tied = false;

  nlohmann::json config() const {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", hidden},
            {"intermediate_size", ffn},
            {"num_hidden_layers", layers},
            {"num_attention_heads", heads},
            {"num_key_value_heads", kv_heads},
            {"head_dim", head_dim},
            {"vocab_size", vocab},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 10000.0},
            {"tie_word_embeddings", tied},
            {"bos_token_id", 1},
            {"eos_token_id", 2},
            {"torch_dtype", "float32"}};
  }

  // F32 tensors with seeded random values; lm_head is included when untied or when asked.
  std::vector<RawTensor> tensors(uint32_t seed, bool with_lm_head) const {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto make = [&](const std::string& name, std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> values(static_cast<size_t>(n));
      for (float& v : values) v = dist(rng);
      return RawTensor{name, "F32", std::move(shape), f32_bytes(values)};
    };
    const int64_t q = int64_t{heads} * head_dim;
    const int64_t kv = int64_t{kv_heads} * head_dim;
    std::vector<RawTensor> out;
    out.push_back(make("model.embed_tokens.weight", {vocab, hidden}));
    for (int i = 0; i < layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      out.push_back(make(p + "input_layernorm.weight", {hidden}));
      out.push_back(make(p + "self_attn.q_proj.weight", {q, hidden}));
      out.push_back(make(p + "self_attn.k_proj.weight", {kv, hidden}));
      out.push_back(make(p + "self_attn.v_proj.weight", {kv, hidden}));
      out.push_back(make(p + "self_attn.o_proj.weight", {hidden, q}));
      out.push_back(make(p + "post_attention_layernorm.weight", {hidden}));
      out.push_back(make(p + "mlp.gate_proj.weight", {ffn, hidden}));
      out.push_back(make(p + "mlp.up_proj.weight", {ffn, hidden}));
      out.push_back(make(p + "mlp.down_proj.weight", {hidden, ffn}));
    }
    out.push_back(make("model.norm.weight", {hidden}));
    if (!tied || with_lm_head) out.push_back(make("lm_head.weight", {vocab, hidden}));
    return out;
  }

  // Writes config.json and model.safetensors into dir; returns the tensors written.
  std::vector<RawTensor> write(const std::filesystem::path& dir, uint32_t seed,
                               bool with_lm_head = false) const {
    write_json(dir / "config.json", config());
    std::vector<RawTensor> t = tensors(seed, with_lm_head);
    write_safetensors(dir / "model.safetensors", t);
    return t;
  }
};

// The float values a RawTensor of dtype F32 holds.
inline std::vector<float> f32_values(const RawTensor& tensor) {
  std::vector<float> values(tensor.bytes.size() / 4);
  std::memcpy(values.data(), tensor.bytes.data(), tensor.bytes.size());
  return values;
}

}  // namespace pagedserve::model::testing
