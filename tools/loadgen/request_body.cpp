// Request bodies, SSE splitting and chunk reading for the load generator.
#include "tools/loadgen/request_body.h"

#include <random>
#include <stdexcept>

namespace pagedserve::loadgen {
namespace {

// Draws `count` ids: from the pool when there is one, else uniformly from the vocabulary.
class IdSource {
 public:
  IdSource(const PromptOptions& options)
      : pool_(options.token_pool),
        rng_(options.seed),
        any_(kFirstOrdinaryId, std::max(kFirstOrdinaryId, options.vocab_size - 1)) {
    if (pool_.empty() && options.vocab_size <= kFirstOrdinaryId) {
      throw std::invalid_argument(
          "synthesised prompts need the vocabulary size (--vocab-size) or a /tokenize endpoint");
    }
  }
  void append(std::vector<int32_t>& ids, int64_t count) {
    std::uniform_int_distribution<size_t> pick(0, pool_.empty() ? 0 : pool_.size() - 1);
    for (int64_t i = 0; i < count; ++i)
      ids.push_back(pool_.empty() ? any_(rng_) : pool_[pick(rng_)]);
  }

 private:
  std::vector<int32_t> pool_;
  std::mt19937 rng_;
  std::uniform_int_distribution<int32_t> any_;
};

std::optional<int64_t> integer_at(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

void read_usage(const nlohmann::json& obj, ChunkInfo& info) {
  auto usage = obj.find("usage");
  if (usage == obj.end() || !usage->is_object()) return;
  info.usage_prompt_tokens = integer_at(*usage, "prompt_tokens");
  info.usage_completion_tokens = integer_at(*usage, "completion_tokens");
}

std::string error_message(const nlohmann::json& error) {
  if (error.is_object() && error.contains("message") && error["message"].is_string()) {
    return error["message"].get<std::string>();
  }
  return error.dump();
}

}  // namespace

std::vector<OutgoingRequest> build_requests(const std::vector<TraceRequest>& trace,
                                            const PromptOptions& options) {
  bool needs_ids = options.shared_prefix_tokens > 0;
  for (const TraceRequest& t : trace)
    needs_ids |= t.prompt_tokens > 0 && t.prompt_token_ids.empty();
  std::optional<IdSource> ids;
  std::vector<int32_t> prefix;
  if (needs_ids) {
    ids.emplace(options);
    ids->append(prefix, options.shared_prefix_tokens);
  }
  std::vector<OutgoingRequest> out;
  out.reserve(trace.size());
  for (const TraceRequest& t : trace) {
    OutgoingRequest request;
    nlohmann::json& p = request.payload;
    p = t.extra;
    if (!options.model.empty()) p["model"] = options.model;
    if (t.messages) {
      request.chat = true;
      p["messages"] = *t.messages;
    } else if (t.prompt_text) {
      p["prompt"] = *t.prompt_text;
    } else {
      std::vector<int32_t> prompt = prefix;
      if (t.prompt_token_ids.empty()) {
        ids->append(prompt, t.prompt_tokens);
      } else {
        prompt.insert(prompt.end(), t.prompt_token_ids.begin(), t.prompt_token_ids.end());
      }
      request.prompt_tokens = static_cast<int64_t>(prompt.size());
      p["prompt"] = std::move(prompt);
    }
    if (t.max_tokens) {
      request.max_tokens = *t.max_tokens;
      p["max_tokens"] = *t.max_tokens;
      p["ignore_eos"] = true;  // force exactly that many output tokens
    }
    out.push_back(std::move(request));
  }
  return out;
}

std::string http_body(const OutgoingRequest& request) {
  nlohmann::json body = request.payload;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  return body.dump();
}

std::vector<std::string> SseSplitter::feed(const char* data, size_t size) {
  std::vector<std::string> events;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] != '\n') {
      pending_ += data[i];
      continue;
    }
    if (!pending_.empty() && pending_.back() == '\r') pending_.pop_back();
    if (pending_.empty()) {  // a blank line ends the event
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
    } else if (pending_.rfind("data:", 0) == 0) {
      size_t start = 5;
      if (start < pending_.size() && pending_[start] == ' ') ++start;
      if (has_data_) data_ += '\n';
      data_.append(pending_, start);
      has_data_ = true;
    }  // comments (":") and other fields (event:, id:) are ignored
    pending_.clear();
  }
  return events;
}

ChunkInfo read_sse_chunk(const std::string& data) {
  ChunkInfo info;
  if (data == "[DONE]") {
    info.done = true;
    return info;
  }
  const nlohmann::json obj = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!obj.is_object()) {
    info.error = "unreadable stream chunk: " + data.substr(0, 200);
    return info;
  }
  if (obj.contains("error")) info.error = error_message(obj["error"]);
  read_usage(obj, info);
  auto choices = obj.find("choices");
  if (choices == obj.end() || !choices->is_array()) return info;
  for (const nlohmann::json& choice : *choices) {
    if (!choice.is_object()) continue;
    if (auto ids = choice.find("token_ids"); ids != choice.end() && ids->is_array()) {
      info.output_tokens += static_cast<int64_t>(ids->size());
    }
    const nlohmann::json* text = nullptr;
    if (auto t = choice.find("text"); t != choice.end()) text = &*t;
    if (auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) {
      if (auto c = delta->find("content"); c != delta->end()) text = &*c;
    }
    if (text && text->is_string() && !text->get<std::string>().empty()) info.has_output = true;
  }
  if (info.output_tokens > 0) info.has_output = true;
  return info;
}

ChunkInfo read_ws_frame(const std::string& text) {
  ChunkInfo info;
  const nlohmann::json obj = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!obj.is_object() || !obj.contains("type") || !obj["type"].is_string()) {
    info.error = "unreadable frame: " + text.substr(0, 200);
    return info;
  }
  if (obj.contains("id") && obj["id"].is_string()) info.ws_id = obj["id"].get<std::string>();
  const std::string type = obj["type"].get<std::string>();
  if (type == "token") {
    if (auto ids = obj.find("token_ids"); ids != obj.end() && ids->is_array()) {
      info.output_tokens = static_cast<int64_t>(ids->size());
    }
    info.has_output = info.output_tokens > 0 || (obj.contains("text") && obj["text"].is_string() &&
                                                 !obj["text"].get<std::string>().empty());
  } else if (type == "done") {
    info.done = true;
    read_usage(obj, info);
  } else if (type == "error") {
    info.error = obj.contains("error") ? error_message(obj["error"]) : "error frame";
  } else {
    info.error = "unknown frame type '" + type + "'";
  }
  return info;
}

}  // namespace pagedserve::loadgen
