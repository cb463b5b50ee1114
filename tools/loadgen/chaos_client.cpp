// The chaos clients over HTTP (Beast) and the open-loop dispatcher that plays each arrival as
// its kind (chaos_client.h). Every network operation runs under the run's deadline, so no
// client can hang; what each saw is judged by chaos.h's judge().
//
// GCC 12 coroutine caveats, as in http_client.cpp: no co_await inside a local's constructor
// arguments or in a structured binding's initialiser, no large arrays in a frame.
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>

#include "tools/loadgen/chaos_internal.h"
#include "tools/loadgen/connect.h"

namespace pagedserve::loadgen {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace detail {
namespace {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// "read: end of stream", or "deadline: read" when the operation's deadline passed.
std::string transport_error(const char* operation, const beast::error_code& ec) {
  if (ec == beast::error::timeout) return std::string("deadline: ") + operation;
  return std::string(operation) + ": " + ec.message();
}

// The OpenAI error object's code ("slow_reader"), "error" when it has none; "" if no error.
std::string error_code_of(const nlohmann::json& body) {
  if (!body.is_object() || !body.contains("error")) return "";
  const nlohmann::json& error = body["error"];
  if (error.is_object() && error.contains("code") && error["code"].is_string()) {
    return error["code"].get<std::string>();
  }
  return "error";
}

bool is_error_body(const std::string& text) {
  const nlohmann::json body = nlohmann::json::parse(text, nullptr, false);
  return body.is_object() && body.contains("error") && body["error"].is_object() &&
         body["error"].contains("message") && body["error"]["message"].is_string();
}

http::request<http::string_body> post(const ChaosEnv& env, const std::string& path,
                                      std::string body) {
  http::request<http::string_body> req{http::verb::post, env.url.path_prefix + path, 11};
  req.set(http::field::host, env.url.host + ":" + env.url.port);
  req.set(http::field::user_agent, "pagedserve-soak");
  req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

// Sends one request and reads the whole answer (a JSON body, or an error before a stream).
asio::awaitable<ChaosObservation> play_plain(const ChaosEnv& env, std::string path,
                                             std::string body) {
  ChaosObservation seen;
  const auto executor = co_await asio::this_coro::executor;
  beast::tcp_stream stream(executor);
  beast::error_code ec;
  stream.expires_after(env.deadline());
  ec = co_await connect_first(stream, env.endpoints);
  if (ec) {
    seen.transport_error = transport_error("connect", ec);
    co_return seen;
  }
  auto req = post(env, path, std::move(body));
  stream.expires_after(env.deadline());
  std::tie(ec, std::ignore) = co_await http::async_write(stream, req, kTuple);
  // A server that refuses a body early (413) may stop reading it: its answer still counts.
  const beast::error_code write_ec = ec;
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  stream.expires_after(env.deadline());
  std::tie(ec, std::ignore) = co_await http::async_read(stream, buffer, parser, kTuple);
  if (ec) {
    seen.transport_error = transport_error(write_ec ? "write" : "read", write_ec ? write_ec : ec);
    co_return seen;
  }
  seen.status = static_cast<int>(parser.get().result_int());
  const nlohmann::json answer = nlohmann::json::parse(parser.get().body(), nullptr, false);
  seen.error_body = is_error_body(parser.get().body());
  seen.completed = seen.status == 200 && answer.is_object() && answer.contains("choices");
  if (seen.completed) {
    seen.choices = static_cast<int64_t>(answer["choices"].size());
    const nlohmann::json usage = answer.value("usage", nlohmann::json::object());
    seen.output_tokens = usage.value("completion_tokens", int64_t{0});
  }
  beast::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  co_return seen;
}

// How a stream is read: to the end, or cut after k events, or slowly at first.
struct StreamPlan {
  int64_t cut_after_events = 0;  // 0 = read to [DONE]
  bool slow = false;
};

// Slow start: a byte per interval into `buffer` for slow_read_for_s, through a tiny SO_RCVBUF
// (a small TCP window: the rest waits in the server's buffers, or blocks its writes once they are
// full); the HTTP parser then reads on from `buffer`.
asio::awaitable<beast::error_code> read_slowly(const ChaosEnv& env, beast::tcp_stream& stream,
                                               beast::flat_buffer& buffer) {
  beast::error_code ec;
  stream.socket().set_option(
      asio::socket_base::receive_buffer_size(env.options.slow_receive_buffer_bytes), ec);
  const auto executor = co_await asio::this_coro::executor;
  asio::steady_timer timer(executor);
  const double until = env.now_s() + env.options.slow_read_for_s;
  size_t n = 0;
  while (env.now_s() < until) {
    stream.expires_after(env.deadline());
    std::tie(ec, n) = co_await stream.async_read_some(buffer.prepare(1), kTuple);
    if (ec) co_return ec;
    buffer.commit(n);
    timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(env.options.slow_read_interval_s)));
    std::tie(ec) = co_await timer.async_wait(kTuple);
  }
  co_return beast::error_code{};
}

// Folds one SSE event into what the client saw; true when the stream is over.
bool on_sse_event(const ChaosEnv& env, const std::string& event, ChaosObservation& seen,
                  RequestRecord& record) {
  const ChunkInfo info = read_sse_chunk(event);
  if (info.done) {
    seen.completed = seen.stream_error_code.empty();
    return true;
  }
  ++seen.events_read;
  if (info.error) {
    seen.stream_error_code = error_code_of(nlohmann::json::parse(event, nullptr, false));
  }
  if (info.has_output) record.chunk_s.push_back(env.now_s());
  if (info.usage_completion_tokens) seen.output_tokens = *info.usage_completion_tokens;
  if (info.usage_prompt_tokens) record.prompt_tokens = *info.usage_prompt_tokens;
  return false;
}

// Sends a streamed request and reads its events as `plan` says; times go into `record`.
asio::awaitable<ChaosObservation> play_stream(const ChaosEnv& env, std::string body,
                                              StreamPlan plan, RequestRecord& record) {
  ChaosObservation seen;
  const auto executor = co_await asio::this_coro::executor;
  beast::tcp_stream stream(executor);
  beast::error_code ec;
  size_t n = 0;
  stream.expires_after(env.deadline());
  ec = co_await connect_first(stream, env.endpoints);
  if (ec) seen.transport_error = transport_error("connect", ec);
  auto req = post(env, "/v1/completions", std::move(body));
  if (!ec) {
    stream.expires_after(env.deadline());
    std::tie(ec, n) = co_await http::async_write(stream, req, kTuple);
    if (ec) seen.transport_error = transport_error("write", ec);
  }
  beast::flat_buffer buffer;
  if (!ec && plan.slow) {
    ec = co_await read_slowly(env, stream, buffer);
    if (ec) seen.transport_error = transport_error("slow read", ec);
  }
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  if (!ec) {
    stream.expires_after(env.deadline());
    std::tie(ec, n) = co_await http::async_read_header(stream, buffer, parser, kTuple);
    if (ec) seen.transport_error = transport_error("read", ec);
  }
  if (ec) co_return seen;
  seen.status = static_cast<int>(parser.get().result_int());
  SseSplitter splitter;
  std::string error_body;
  std::vector<char> chunk(16384);
  bool over = false;
  while (!parser.is_done() && !over) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    stream.expires_after(env.deadline());
    std::tie(ec, n) = co_await http::async_read_some(stream, buffer, parser, kTuple);
    if (ec && ec != http::error::need_buffer) {
      seen.transport_error = transport_error("read", ec);
      break;
    }
    const size_t got = chunk.size() - parser.get().body().size;
    if (seen.status != 200) {
      error_body.append(chunk.data(), got);
      continue;
    }
    for (const std::string& event : splitter.feed(chunk.data(), got)) {
      over = over || on_sse_event(env, event, seen, record);
    }
    if (plan.cut_after_events > 0 && seen.events_read >= plan.cut_after_events && !over) {
      seen.planned_cut = true;
      break;
    }
  }
  seen.error_body = is_error_body(error_body);
  beast::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  stream.socket().close(ignored);
  co_return seen;
}

// The first cut_fraction of a well-formed request's bytes (headers and body), then a close.
asio::awaitable<ChaosObservation> play_cut_body(const ChaosEnv& env, std::string body,
                                                double cut_fraction) {
  ChaosObservation seen;
  const auto executor = co_await asio::this_coro::executor;
  beast::tcp_stream stream(executor);
  beast::error_code ec;
  stream.expires_after(env.deadline());
  ec = co_await connect_first(stream, env.endpoints);
  if (ec) {
    seen.transport_error = transport_error("connect", ec);
    co_return seen;
  }
  std::string head =
      "POST " + env.url.path_prefix + "/v1/completions HTTP/1.1\r\nHost: " + env.url.host + ":" +
      env.url.port +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  head.resize(
      std::clamp<size_t>(static_cast<size_t>(cut_fraction * head.size()), 1, head.size() - 1));
  stream.expires_after(env.deadline());
  std::tie(ec, std::ignore) = co_await asio::async_write(stream, asio::buffer(head), kTuple);
  if (ec) {
    seen.transport_error = transport_error("write", ec);
    co_return seen;
  }
  seen.planned_cut = true;
  beast::error_code ignored;
  stream.socket().close(ignored);
  co_return seen;
}

// Connects and sends nothing; the server must close the socket before the idle deadline.
asio::awaitable<ChaosObservation> play_idle(const ChaosEnv& env) {
  ChaosObservation seen;
  const auto executor = co_await asio::this_coro::executor;
  beast::tcp_stream stream(executor);
  beast::error_code ec;
  size_t n = 0;
  stream.expires_after(env.deadline());
  ec = co_await connect_first(stream, env.endpoints);
  if (ec) {
    seen.transport_error = transport_error("connect", ec);
    co_return seen;
  }
  stream.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(env.options.idle_deadline_s)));
  std::vector<char> sink(4096);
  while (!ec) std::tie(ec, n) = co_await stream.async_read_some(asio::buffer(sink), kTuple);
  seen.closed_by_server = ec != beast::error::timeout;  // EOF or reset: the server closed it
  co_return seen;
}

asio::awaitable<ChaosObservation> play(const ChaosEnv& env, ChaosKind kind,
                                       const ChaosRequest& request, RequestRecord& record) {
  switch (kind) {
    case ChaosKind::kStreamed:
      co_return co_await play_stream(env, request.body, StreamPlan{}, record);
    case ChaosKind::kDisconnectMidStream:
      co_return co_await play_stream(env, request.body, StreamPlan{request.cut_after_events, false},
                                     record);
    case ChaosKind::kSlowReader:
      co_return co_await play_stream(env, request.body, StreamPlan{0, true}, record);
    case ChaosKind::kDisconnectMidBody:
      co_return co_await play_cut_body(env, request.body, request.cut_fraction);
    case ChaosKind::kWsCancel:
      co_return co_await play_ws_cancel(env, nlohmann::json::parse(request.body), request.choices,
                                        request.cut_after_events);
    case ChaosKind::kIdleConnection:
      co_return co_await play_idle(env);
    default:  // one request, one answer
      co_return co_await play_plain(env, request.path, request.body);
  }
}

// Plays one arrival and judges it.
asio::awaitable<ChaosResult> play_and_judge(const ChaosEnv& env, ChaosKind kind,
                                            ChaosRequest request, RequestRecord record) {
  ChaosResult result;
  result.kind = kind;
  result.seen = co_await play(env, kind, request, record);
  result.seen.expected_tokens = request.expected_tokens;
  result.verdict = judge(kind, result.seen);
  record.end_s = env.now_s();
  record.output_tokens = result.seen.output_tokens;
  record.ok = is_well_behaved(kind) && !result.verdict.violation && result.seen.completed;
  if (!record.ok) record.error = result.verdict.outcome;
  result.record = std::move(record);
  co_return result;
}

// The open-loop clock: arrival i starts at arrivals_s[i], whatever the server does.
class ChaosDispatcher {
 public:
  ChaosDispatcher(ChaosEnv& env, const std::vector<ChaosKind>& kinds,
                  const std::vector<OutgoingRequest>& requests, const std::vector<double>& arrivals)
      : env_(env),
        kinds_(kinds),
        requests_(requests),
        arrivals_(arrivals),
        results_(kinds.size()) {}

  asio::awaitable<void> dispatch() {
    asio::steady_timer timer(env_.io);
    const ChaosRequestOptions body_options{env_.options.model, env_.options.max_body_bytes,
                                           env_.options.misbehaving_max_tokens};
    for (size_t i = 0; i < kinds_.size(); ++i) {
      timer.expires_at(env_.start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(arrivals_[i])));
      co_await timer.async_wait(asio::use_awaitable);
      RequestRecord record;
      record.index = static_cast<int64_t>(i);
      record.scheduled_s = arrivals_[i];
      record.sent_s = env_.now_s();
      record.prompt_tokens = requests_[i].prompt_tokens;
      record.expected_output_tokens = requests_[i].max_tokens;
      ChaosRequest body = chaos_request(kinds_[i], record.index, requests_[i], body_options);
      asio::co_spawn(
          env_.io, play_and_judge(env_, kinds_[i], std::move(body), std::move(record)),
          [this, i](std::exception_ptr e, ChaosResult r) { on_done(i, e, std::move(r)); });
    }
  }

  asio::awaitable<void> progress() {
    asio::steady_timer timer(env_.io);
    while (finished_ < kinds_.size()) {
      timer.expires_after(std::chrono::seconds(1));
      co_await timer.async_wait(asio::use_awaitable);
      std::fprintf(stderr, "\r[%6.1fs] chaos: finished %zu/%zu  violations %zu   ", env_.now_s(),
                   finished_, kinds_.size(), violations_);
    }
    std::fprintf(stderr, "\n");
  }

  std::vector<ChaosResult> take_results() { return std::move(results_); }

 private:
  void on_done(size_t i, std::exception_ptr e, ChaosResult result) {
    if (e) {  // a bug in the client itself: reported as a violation, never swallowed
      result = ChaosResult{};
      result.kind = kinds_[i];
      result.record.index = static_cast<int64_t>(i);
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        result.verdict = {std::string("client exception: ") + ex.what(), true};
      }
    }
    ++finished_;
    if (result.verdict.violation) ++violations_;
    results_[i] = std::move(result);
  }

  ChaosEnv& env_;
  const std::vector<ChaosKind>& kinds_;
  const std::vector<OutgoingRequest>& requests_;
  const std::vector<double>& arrivals_;
  std::vector<ChaosResult> results_;
  size_t finished_ = 0, violations_ = 0;
};

}  // namespace
}  // namespace detail

std::vector<ChaosResult> run_chaos(const ChaosClientOptions& options,
                                   const std::vector<ChaosKind>& kinds,
                                   const std::vector<OutgoingRequest>& requests,
                                   const std::vector<double>& arrivals_s) {
  if (kinds.size() != requests.size() || kinds.size() != arrivals_s.size()) {
    throw std::invalid_argument("run_chaos: one kind, request and arrival per client");
  }
  rlimit limit{};  // many concurrent clients need many descriptors: soft limit up to the hard one
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  asio::io_context io(1);
  detail::ChaosEnv env{io, options, parse_base_url(options.base_url), {}, {}};
  asio::ip::tcp::resolver resolver(io);
  env.endpoints = resolver.resolve(env.url.host, env.url.port);
  detail::ChaosDispatcher dispatcher(env, kinds, requests, arrivals_s);
  env.start = std::chrono::steady_clock::now();
  const auto rethrow = [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  };
  asio::co_spawn(io, dispatcher.dispatch(), rethrow);
  if (options.progress && !kinds.empty()) asio::co_spawn(io, dispatcher.progress(), rethrow);
  io.run();
  return dispatcher.take_results();
}

}  // namespace pagedserve::loadgen
