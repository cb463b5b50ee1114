// The open-loop runner: fires each request at its scheduled time on one io_context thread,
// holds arrivals beyond --max-concurrency in a FIFO, and draws the progress line.
#include <sys/resource.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <deque>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tools/loadgen/client_internal.h"

namespace pagedserve::loadgen {

namespace asio = boost::asio;

BaseUrl parse_base_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) {
    throw std::invalid_argument("--base-url must start with http:// (got '" + url + "')");
  }
  std::string rest = url.substr(scheme.size());
  BaseUrl out;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    out.path_prefix = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!out.path_prefix.empty() && out.path_prefix.back() == '/') out.path_prefix.pop_back();
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos && rest.back() != ']') {
    out.port = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  if (rest.size() > 2 && rest.front() == '[' && rest.back() == ']')
    rest = rest.substr(1, rest.size() - 2);
  if (rest.empty() || out.port.empty()) throw std::invalid_argument("bad --base-url '" + url + "'");
  out.host = rest;
  return out;
}

namespace detail {

std::string http_error_reason(int status, const std::string& body) {
  std::string reason = "http " + std::to_string(status);
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("error")) {
    const nlohmann::json& e = parsed["error"];
    reason += ": " + (e.is_object() && e.contains("message") && e["message"].is_string()
                          ? e["message"].get<std::string>()
                          : e.dump());
  } else if (!body.empty()) {
    reason += ": " + body.substr(0, 200);
  }
  return reason;
}

namespace {

// Many concurrent streams need many descriptors: raise the soft limit to the hard one.
void raise_fd_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// The state of one run; lives on the io_context thread.
class Runner {
 public:
  Runner(RunContext& ctx, const std::vector<OutgoingRequest>& requests,
         const std::vector<double>& arrivals)
      : ctx_(ctx), requests_(requests), arrivals_(arrivals), records_(requests.size()) {}

  asio::awaitable<void> dispatch() {
    asio::steady_timer timer(ctx_.io);
    for (size_t i = 0; i < requests_.size(); ++i) {
      timer.expires_at(ctx_.start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(arrivals_[i])));
      co_await timer.async_wait(asio::use_awaitable);
      const int64_t cap = ctx_.options.max_concurrency;
      if (cap > 0 && in_flight_ >= cap) {
        waiting_.push_back(i);
      } else {
        send(i);
      }
    }
  }

  asio::awaitable<void> progress() {
    asio::steady_timer timer(ctx_.io);
    int64_t last_tokens = 0;
    double last_s = 0;
    while (finished_ < requests_.size()) {
      timer.expires_after(std::chrono::milliseconds(500));
      co_await timer.async_wait(asio::use_awaitable);
      const double now = ctx_.now_s();
      const double rate = (ctx_.tokens_received - last_tokens) / std::max(1e-9, now - last_s);
      last_tokens = ctx_.tokens_received;
      last_s = now;
      std::fprintf(stderr, "\r[%6.1fs] sent %zu/%zu  done %zu  failed %zu  %8.1f tok/s   ", now,
                   sent_, requests_.size(), finished_ - failed_, failed_, rate);
    }
    std::fprintf(stderr, "\n");
  }

  std::vector<RequestRecord> take_records() { return std::move(records_); }
  double end_s() const { return end_s_; }
  void set_ws_pool(std::shared_ptr<WsPool> pool) { ws_ = std::move(pool); }

 private:
  void send(size_t i) {
    ++in_flight_;
    ++sent_;
    RequestRecord record;
    record.index = static_cast<int64_t>(i);
    record.scheduled_s = arrivals_[i];
    record.sent_s = ctx_.now_s();
    record.prompt_tokens = requests_[i].prompt_tokens;
    record.expected_output_tokens = requests_[i].max_tokens;
    auto done = [this](RequestRecord r) { on_done(std::move(r)); };
    if (ws_) {
      ws_->start(requests_[i], std::move(record), done);
    } else {
      start_http_request(ctx_, requests_[i], std::move(record), done);
    }
  }

  void on_done(RequestRecord record) {
    --in_flight_;
    ++finished_;
    if (!record.ok) ++failed_;
    end_s_ = std::max(end_s_, record.end_s);
    records_[static_cast<size_t>(record.index)] = std::move(record);
    if (!waiting_.empty()) {
      const size_t next = waiting_.front();
      waiting_.pop_front();
      send(next);
    }
    if (finished_ == requests_.size() && ws_) ws_->close();
  }

  RunContext& ctx_;
  const std::vector<OutgoingRequest>& requests_;
  const std::vector<double>& arrivals_;
  std::vector<RequestRecord> records_;
  std::deque<size_t> waiting_;  // arrived, held back by --max-concurrency
  std::shared_ptr<WsPool> ws_;
  int64_t in_flight_ = 0;
  size_t sent_ = 0, finished_ = 0, failed_ = 0;
  double end_s_ = 0.0;
};

}  // namespace
}  // namespace detail

RunResult run_load(const RunOptions& options, const std::vector<OutgoingRequest>& requests,
                   const std::vector<double>& arrivals_s) {
  if (arrivals_s.size() != requests.size()) {
    throw std::invalid_argument("run_load: one arrival time per request");
  }
  detail::raise_fd_limit();
  asio::io_context io(1);
  detail::RunContext ctx{io, options, parse_base_url(options.base_url), {}, {}, 0};
  asio::ip::tcp::resolver resolver(io);
  ctx.endpoints = resolver.resolve(ctx.url.host, ctx.url.port);
  detail::Runner runner(ctx, requests, arrivals_s);
  if (options.protocol == Protocol::kWs) runner.set_ws_pool(detail::make_ws_pool(ctx));
  ctx.start = std::chrono::steady_clock::now();
  const auto rethrow = [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  };
  asio::co_spawn(io, runner.dispatch(), rethrow);
  if (options.progress && !requests.empty()) asio::co_spawn(io, runner.progress(), rethrow);
  io.run();
  RunResult result;
  result.duration_s = runner.end_s();
  result.records = runner.take_records();
  return result;
}

}  // namespace pagedserve::loadgen
