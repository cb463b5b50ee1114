// Loading: reads tokenizer.json (+ tokenizer_config.json), builds Tokenizer::Impl, and turns
// every parse or support problem into a ModelError that names the file.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/loader/model_error.h"
#include "model/tokenizer/tokenizer_impl.h"

namespace pagedserve::model {
namespace {

using nlohmann::json;
using tokenizer::AddedToken;

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(path.string() + ": cannot open file (missing or unreadable)");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  try {
    return json::parse(buffer.str());
  } catch (const json::parse_error& e) {
    throw ModelError(path.string() + ": invalid JSON: " + e.what());
  }
}

std::vector<AddedToken> parse_added_tokens(const json& root) {
  std::vector<AddedToken> tokens;
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return tokens;
  for (const json& t : *it) {
    AddedToken token;
    token.content = t.at("content").get<std::string>();
    token.id = tokenizer::checked_token_id(t.at("id"), "added token \"" + token.content + "\"");
    token.special = t.value("special", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.normalized = t.value("normalized", !token.special);
    token.single_word = t.value("single_word", false);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

// One post-processor's contribution to the single-sequence template, recursively for Sequence.
void add_post_processor(const json& config, const Tokenizer::Impl& impl,
                        std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  const std::string type = config.at("type").get<std::string>();
  if (type == "Sequence") {
    for (const json& child : config.at("processors"))
      add_post_processor(child, impl, prefix, suffix);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    bool seen_sequence = false;
    const json& specials = config.at("special_tokens");
    for (const json& piece : config.at("single")) {
      if (piece.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
      if (!specials.contains(name)) {
        throw ModelError("TemplateProcessing uses special token \"" + name +
                         "\" missing from its special_tokens");
      }
      for (const json& id : specials.at(name).at("ids")) {
        (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
      }
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    prefix.push_back(config.at("cls").at(1).get<int32_t>());
    suffix.push_back(config.at("sep").at(1).get<int32_t>());
  } else {
    throw ModelError("unsupported post_processor type \"" + type + "\"");
  }
}

// tokenizer_config.json writes special tokens as a string or as {"content": ...}.
std::optional<std::string> config_token(const json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  return std::nullopt;
}

std::optional<int32_t> lookup(const Tokenizer::Impl& impl, const std::optional<std::string>& s) {
  if (!s) return std::nullopt;
  if (const auto it = impl.added_token_ids.find(*s); it != impl.added_token_ids.end()) {
    return it->second;
  }
  return impl.model.token_to_id(*s);
}

void build_from_tokenizer_json(const json& root, Tokenizer::Impl& impl) {
  impl.model = tokenizer::BpeModel::from_json(root.at("model"));
  impl.normalizer = tokenizer::Normalizer::from_json(root.value("normalizer", json()));
  impl.pre_tokenizer = tokenizer::PreTokenizer::from_json(root.value("pre_tokenizer", json()));
  impl.decoder = tokenizer::Decoder::from_json(root.value("decoder", json()));
  impl.added = tokenizer::AddedVocabulary(parse_added_tokens(root), impl.normalizer);

  impl.id_to_token = impl.model.id_to_token();
  for (const AddedToken& token : impl.added.tokens()) {
    if (static_cast<size_t>(token.id) >= impl.id_to_token.size()) {
      impl.id_to_token.resize(static_cast<size_t>(token.id) + 1);
    }
    impl.id_to_token[token.id] = token.content;
    impl.added_token_ids.emplace(token.content, token.id);
  }
  impl.is_special.assign(impl.id_to_token.size(), false);
  for (const AddedToken& token : impl.added.tokens()) {
    if (token.special) impl.is_special[token.id] = true;
  }

  const json post = root.value("post_processor", json());
  if (!post.is_null()) {
    add_post_processor(post, impl, impl.special_prefix_ids, impl.special_suffix_ids);
  }
}

void apply_tokenizer_config(const json& config, bool has_post_processor, Tokenizer::Impl& impl) {
  impl.bos_token_id = lookup(impl, config_token(config, "bos_token"));
  impl.eos_token_id = lookup(impl, config_token(config, "eos_token"));
  impl.clean_up_tokenization_spaces = config.value("clean_up_tokenization_spaces", false);
  if (has_post_processor) return;  // the post-processor already says what to add
  if (config.value("add_bos_token", false) && impl.bos_token_id) {
    impl.special_prefix_ids.assign(1, *impl.bos_token_id);
  }
  if (config.value("add_eos_token", false) && impl.eos_token_id) {
    impl.special_suffix_ids.assign(1, *impl.eos_token_id);
  }
}

}  // namespace

Tokenizer Tokenizer::from_dir(const std::filesystem::path& dir) {
  const std::filesystem::path config = dir / "tokenizer_config.json";
  return from_files(dir / "tokenizer.json",
                    std::filesystem::exists(config) ? std::optional(config) : std::nullopt);
}

Tokenizer Tokenizer::from_files(const std::filesystem::path& tokenizer_json,
                                const std::optional<std::filesystem::path>& tokenizer_config_json) {
  auto impl = std::make_unique<Impl>();
  const auto with_file = [](const std::filesystem::path& path, auto&& body) {
    try {
      body();
    } catch (const json::exception& e) {
      throw ModelError(path.string() + ": unexpected structure: " + e.what());
    } catch (const ModelError& e) {
      const std::string what = e.what();
      if (what.starts_with(path.string())) throw;
      throw ModelError(path.string() + ": " + what);
    }
  };
  bool has_post_processor = false;
  with_file(tokenizer_json, [&] {
    const json root = read_json(tokenizer_json);
    if (!root.is_object()) throw ModelError("top level is not a JSON object");
    build_from_tokenizer_json(root, *impl);
    has_post_processor = !root.value("post_processor", json()).is_null();
  });
  if (tokenizer_config_json) {
    with_file(*tokenizer_config_json, [&] {
      const json config = read_json(*tokenizer_config_json);
      if (!config.is_object()) throw ModelError("top level is not a JSON object");
      apply_tokenizer_config(config, has_post_processor, *impl);
    });
  }
  // Without a config, the template's leading special token is the best guess for BOS.
  if (!impl->bos_token_id && !impl->special_prefix_ids.empty()) {
    impl->bos_token_id = impl->special_prefix_ids.front();
  }
  return Tokenizer(std::move(impl));
}

}  // namespace pagedserve::model
