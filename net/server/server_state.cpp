// ServerState: admission, submission, the connection registry and the log (see
// server_state.h). Called from io threads, the tokenizer thread and the controlling thread.
#include "net/server/server_state.h"

#include <algorithm>
#include <iostream>

#include "actors/engine_setup.h"

namespace pagedserve::net {
namespace {

std::string default_model_name(const std::filesystem::path& model_dir) {
  std::filesystem::path dir = model_dir.lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "models/stories260K/"
  const std::string name = dir.filename().string();
  return name.empty() ? "model" : name;
}

ServedModel served_model_for(const actors::Engine& engine, const HttpServerConfig& config) {
  const actors::EngineConfig& resolved = engine.config();
  std::string name = served_model_name_for(config, resolved.model_dir);
  ServedModel served = make_served_model(std::move(name), resolved.model_dir, engine.tokenizer(),
                                         resolved.max_model_len, engine.eos_token_ids());
  served.limits = config.request_limits;
  if (!config.tool_call_parser.empty()) {
    const std::optional<ToolCallFormat> format = parse_tool_call_format(config.tool_call_parser);
    if (!format) {
      throw std::invalid_argument(
          "--tool-call-parser must be hermes, llama3_json or mistral, got '" +
          config.tool_call_parser + "'");
    }
    served.tool_call_format = *format;
  }
  return served;
}

MetricsExposition exposition_for(const actors::Engine& engine, const HttpServerConfig& config,
                                 const ServedModel& served) {
  const actors::EngineConfig& resolved = engine.config();
  MetricsExposition exposition;
  exposition.vllm_compat = config.metrics_vllm_compat;
  exposition.model_name = served.name;
  exposition.block_size_tokens = resolved.block_size;
  exposition.cache_dtype = resolved.kv_cache_dtype;
  exposition.enable_prefix_caching = resolved.enable_prefix_caching;
  return exposition;
}

}  // namespace

std::string served_model_name_for(const HttpServerConfig& config,
                                  const std::filesystem::path& model_dir) {
  return config.served_model_name.empty() ? default_model_name(model_dir)
                                          : config.served_model_name;
}

ApiError overloaded_error(int num_waiting, int max_queued) {
  ApiError error;
  error.status = 429;
  error.message = "The server is overloaded: " + std::to_string(num_waiting) +
                  " requests are waiting (--max-queued-requests " + std::to_string(max_queued) +
                  "). Retry later.";
  error.code = "overloaded";
  return error;
}

ServerState::ServerState(actors::Engine& engine, HttpServerConfig config)
    : engine_(engine),
      config_(std::move(config)),
      served_(served_model_for(engine, config_)),
      access_{config_.api_keys, config_.allowed_origins, config_.serve_ui},
      exposition_(exposition_for(engine, config_, served_)) {}

// Waiting = requests in flight beyond the max_num_seqs the engine can run at once. (The
// scheduler's own num_waiting_seqs lags and counts requests just added that are about to run,
// so it would refuse too early.) In flight thus never exceeds max_num_seqs +
// max_queued_requests, which also keeps Engine::submit from blocking an io thread.
std::optional<ApiError> ServerState::admit(size_t num_requests) {
  const int max_queued = std::max(config_.max_queued_requests, 0);
  const int max_running = engine_.config().max_num_seqs;
  const int wanted = static_cast<int>(std::min<size_t>(num_requests, 1 << 24));
  int current = in_flight_->load();
  while (true) {
    const int waiting = std::max(current + wanted - max_running, 0);
    if (waiting > max_queued) {
      return overloaded_error(std::max(current - max_running, 0), max_queued);
    }
    if (in_flight_->compare_exchange_weak(current, current + wanted)) return std::nullopt;
  }
}

std::optional<ApiError> ServerState::check(const GenerationRequest& request) const {
  for (const actors::GenerateRequest& prompt : request.prompts) {
    const std::string problem = actors::check_request(prompt.prompt_token_ids, prompt.sampling,
                                                      engine_.config(), served_.vocab_size);
    if (!problem.empty()) return invalid_request(problem);
  }
  return std::nullopt;
}

std::vector<std::shared_ptr<actors::RequestStream>> ServerState::submit(
    GenerationRequest& request,
    const std::function<actors::TokenCallback(size_t prompt_index)>& make_callback) {
  std::vector<std::shared_ptr<actors::RequestStream>> streams;
  streams.reserve(request.prompts.size());
  for (size_t i = 0; i < request.prompts.size(); ++i) {
    actors::TokenCallback inner = make_callback(i);
    // The final event is seen here even when the connection is gone (a client that left
    // gets its request aborted, and that counts as finish_reason "abort", as vLLM's label).
    auto wrapped = [in_flight = in_flight_, metrics = metrics_, inner](actors::TokenEvent event) {
      const bool final_event = event.finished;
      if (final_event) metrics->count_finished_request(event.finish_reason);
      inner(std::move(event));
      if (final_event) in_flight->fetch_sub(1);
    };
    streams.push_back(engine_.submit(std::move(request.prompts[i]), std::move(wrapped)));
  }
  return streams;
}

uint64_t ServerState::add_connection(asio::any_io_executor strand,
                                     std::function<void(bool hard)> on_stop) {
  std::lock_guard lock(connections_mu_);
  const uint64_t id = next_connection_id_++;
  connections_.emplace(id, Connection{std::move(strand), std::move(on_stop)});
  return id;
}

void ServerState::remove_connection(uint64_t id) {
  std::lock_guard lock(connections_mu_);
  connections_.erase(id);
}

void ServerState::stop_connections(bool hard) {
  stopping_ = true;
  std::lock_guard lock(connections_mu_);
  for (auto& [id, connection] : connections_) {
    asio::post(connection.strand, [on_stop = connection.on_stop, hard] { on_stop(hard); });
  }
}

void ServerState::clear_connections() {
  std::lock_guard lock(connections_mu_);
  connections_.clear();
}

size_t ServerState::num_connections() const {
  std::lock_guard lock(connections_mu_);
  return connections_.size();
}

void ServerState::log(std::string_view line) const {
  if (config_.log) {
    config_.log(line);
    return;
  }
  static std::mutex stderr_mu;
  std::lock_guard lock(stderr_mu);
  std::cerr << line << '\n';
}

}  // namespace pagedserve::net
