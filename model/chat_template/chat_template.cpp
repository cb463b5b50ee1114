// ChatTemplate's glue: parse once into a shared immutable Program, convert each request's
// JSON context into Values and run a fresh Renderer; plus the model-directory loader.
#include "model/chat_template/chat_template.h"

#include <fstream>
#include <sstream>

#include "model/chat_template/evaluator.h"
#include "model/chat_template/parser.h"
#include "model/loader/gguf.h"
#include "model/loader/llama_weights.h"

namespace pagedserve::model {

namespace {

template <typename Json>
std::string render_with(const chat::Program& program, const Json& context,
                        const RenderOptions& options = {}) {
  if (!context.is_object()) {
    throw ChatTemplateError(ChatTemplateError::Kind::kRender,
                            "chat template context must be a JSON object");
  }
  try {
    chat::Renderer renderer(chat::from_json(context), options.now);
    return renderer.render(program);
  } catch (const chat::ValueError& e) {
    // Only reached for errors outside any expression, e.g. a context nesting too deeply.
    throw ChatTemplateError(ChatTemplateError::Kind::kRender,
                            std::string("chat template error: ") + e.what());
  }
}

std::optional<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string_view source) {
  ChatTemplate t;
  t.program_ = std::make_shared<const chat::Program>(chat::parse_program(source));
  t.source_ = std::make_shared<const std::string>(source);
  return t;
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render_with(*program_, context);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render_with(*program_, context);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 const RenderOptions& options) const {
  return render_with(*program_, context, options);
}

std::optional<std::tm> parse_local_time(std::string_view iso) {
  // Fixed layout: 0000-00-00T00:00:00, every field digits.
  constexpr std::string_view kLayout = "0000-00-00T00:00:00";
  if (iso.size() != kLayout.size()) return std::nullopt;
  for (size_t i = 0; i < iso.size(); ++i) {
    const bool digit = iso[i] >= '0' && iso[i] <= '9';
    if (kLayout[i] == '0' ? !digit : (iso[i] != kLayout[i] && !(i == 10 && iso[i] == ' '))) {
      return std::nullopt;
    }
  }
  const auto field = [&](size_t pos, size_t len) {
    int v = 0;
    for (size_t i = pos; i < pos + len; ++i) v = v * 10 + (iso[i] - '0');
    return v;
  };
  std::tm t{};
  t.tm_year = field(0, 4) - 1900;
  t.tm_mon = field(5, 2) - 1;
  t.tm_mday = field(8, 2);
  t.tm_hour = field(11, 2);
  t.tm_min = field(14, 2);
  t.tm_sec = field(17, 2);
  if (t.tm_mon > 11 || t.tm_mday < 1 || t.tm_hour > 23 || t.tm_min > 59 || t.tm_sec > 60) {
    return std::nullopt;
  }
  // timegm normalizes as if UTC, which fills tm_wday and tm_yday without a time zone's say;
  // a day past the month's end (Feb 30) comes back as another date and is refused.
  std::tm normalized = t;
  timegm(&normalized);
  if (normalized.tm_mday != t.tm_mday || normalized.tm_mon != t.tm_mon) return std::nullopt;
  t.tm_wday = normalized.tm_wday;
  t.tm_yday = normalized.tm_yday;
  t.tm_isdst = -1;
  return t;
}

std::optional<std::string> load_chat_template(const std::filesystem::path& model_dir) {
  // A GGUF model carries its template in its metadata.
  if (const auto gguf = find_gguf_file(model_dir)) {
    return GgufFile::open(*gguf)->get_string("tokenizer.chat_template");
  }
  if (auto text = read_file(model_dir / "chat_template.jinja")) return text;
  auto config_text = read_file(model_dir / "tokenizer_config.json");
  if (!config_text) return std::nullopt;
  nlohmann::json config = nlohmann::json::parse(*config_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) {
    throw ChatTemplateError(ChatTemplateError::Kind::kParse,
                            (model_dir / "tokenizer_config.json").string() + " is not valid JSON");
  }
  if (!config.is_object()) return std::nullopt;
  auto it = config.find("chat_template");
  if (it == config.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.contains("name") && entry["name"] == "default" &&
          entry.contains("template") && entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
  }
  return std::nullopt;
}

}  // namespace pagedserve::model
