// ServedModel construction and the default chat template (see served_model.h).
#include "net/protocol/served_model.h"

#include <ctime>

namespace pagedserve::net {

ServedModel make_served_model(std::string name, const std::filesystem::path& model_dir,
                              const model::Tokenizer& tokenizer, int max_model_len,
                              std::vector<int32_t> eos_token_ids) {
  ServedModel served;
  served.name = std::move(name);
  served.max_model_len = max_model_len;
  served.vocab_size = tokenizer.vocab_size();
  served.tokenizer = &tokenizer;
  if (std::optional<std::string> source = model::load_chat_template(model_dir)) {
    served.chat_template = model::ChatTemplate::parse(*source);
    served.tool_call_format =
        tool_call_format_from_template(*source).value_or(ToolCallFormat::kHermes);
  }
  if (auto bos = tokenizer.bos_token_id()) served.bos_token = tokenizer.id_to_token(*bos);
  if (auto eos = tokenizer.eos_token_id()) {
    served.eos_token = tokenizer.id_to_token(*eos);
    if (eos_token_ids.empty()) eos_token_ids = {*eos};
  }
  served.created = static_cast<int64_t>(std::time(nullptr));
  served.grammars = std::make_shared<GrammarCache>(tokenizer, std::move(eos_token_ids));
  return served;
}

const model::ChatTemplate& chat_template_of(const ServedModel& served) {
  if (served.chat_template) return *served.chat_template;
  // Parsed once, on first use (thread-safe static initialization); it is known to parse.
  static const model::ChatTemplate kDefault =
      model::ChatTemplate::parse(model::kDefaultChatTemplate);
  return kDefault;
}

}  // namespace pagedserve::net
