// HttpServer (see http_server.h): the io_context and its threads, the listener (accept loop on
// its own thread; each accepted socket gets a new strand of the io_context and an HTTP session
// coroutine), the periodic engine log line, signal handling and the staged shutdown. start(),
// stop() and run_until_signal() run on the controlling thread; everything else on the io threads.
#include "net/server/http_server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <condition_variable>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <csignal>
#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "net/server/http_session.h"
#include "net/server/server_state.h"
#include "net/server/tls_context.h"

namespace pagedserve::net {
namespace {

using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// Logs an exception that escaped a coroutine (a bug: sessions report I/O errors as values).
auto log_failure(std::shared_ptr<ServerState> state, const char* what) {
  return [state = std::move(state), what](std::exception_ptr failure) {
    if (!failure) return;
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      state->log(std::string("error: ") + what + ": " + e.what());
    } catch (...) {
      state->log(std::string("error: ") + what + ": unknown exception");
    }
  };
}

constexpr int kMaxAcceptsPerTurn = 256;

void start_session(const std::shared_ptr<ServerState>& state, tcp::socket socket,
                   asio::ssl::context* tls) {
  auto strand = socket.get_executor();
  asio::co_spawn(strand, run_http_session(state, std::move(socket), tls),
                 log_failure(state, "http session"));
}

// Runs on the listener's own thread, so that accepting never waits behind the io threads'
// work: with the accept loop on the io thread (behind every SSE write and 429 queued there), a
// loaded machine let the kernel's listen queue overflow and clients saw resets, lost SYNs and
// connections closed before any answer instead of a 429. Accepted sockets queue on the io
// context, where the server answers them, if late, as HTTP.
asio::awaitable<void> accept_loop(std::shared_ptr<ServerState> state, tcp::acceptor& acceptor,
                                  asio::io_context& sessions, asio::ssl::context* tls) {
  auto executor = co_await asio::this_coro::executor;
  acceptor.non_blocking(true);
  asio::steady_timer backoff(executor);
  while (acceptor.is_open()) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::make_strand(sessions), kTuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) break;
    if (ec) {  // e.g. out of file descriptors: back off instead of spinning
      state->log("accept failed: " + ec.message());
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(kTuple);
      continue;
    }
    start_session(state, std::move(socket), tls);
    // Take the connections already queued too (bounded, so a stop request is seen soon).
    for (int i = 0; i < kMaxAcceptsPerTurn; ++i) {
      tcp::socket pending(asio::make_strand(sessions));
      boost::system::error_code pending_ec;
      acceptor.accept(pending, pending_ec);  // non-blocking: would_block once the queue is empty
      if (pending_ec) break;
      start_session(state, std::move(pending), tls);
    }
  }
}

// The interval's split of a step: the executor's stages as shares of its busy time, the host
// stages (other threads, overlapped with the executor) in milliseconds per step.
std::string stage_split(const actors::EngineStats& now, const actors::EngineStats& before) {
  const actors::StageSeconds& a = now.stage_s;
  const actors::StageSeconds& b = before.stage_s;
  const double busy = now.executor_busy_s - before.executor_busy_s;
  const int64_t steps = now.num_steps - before.num_steps;
  if (busy <= 0 || steps <= 0) return "";
  auto share = [busy](double x) { return 100.0 * x / busy; };
  auto per_step = [steps](double x) { return 1e3 * x / static_cast<double>(steps); };
  char line[320];
  std::snprintf(line, sizeof line,
                "; %lld steps, %.2f ms each: forward %.1f%%, sampling %.1f%%, copies %.1f%%; "
                "host per step: schedule %.2f ms, outputs %.2f ms, detokenize %.2f ms",
                static_cast<long long>(steps), per_step(busy), share(a.forward - b.forward),
                share(a.sampling - b.sampling), share(a.copies - b.copies),
                per_step(a.schedule - b.schedule), per_step(a.process_outputs - b.process_outputs),
                per_step(a.detokenize - b.detokenize));
  return line;
}

std::string engine_line(const actors::EngineStats& stats, double tokens_per_s) {
  const EngineGauges gauges = gauges_from_stats(stats);
  const double hit_rate = gauges.prefix_cache_queries_total == 0
                              ? 0.0
                              : 100.0 * static_cast<double>(gauges.prefix_cache_hits_total) /
                                    static_cast<double>(gauges.prefix_cache_queries_total);
  char line[256];
  std::snprintf(line, sizeof line,
                "engine: running %d, waiting %d, swapped %d, kv usage %.1f%% (%d/%d blocks), "
                "prefix hit rate %.1f%%, %.1f tokens/s",
                gauges.num_requests_running, gauges.num_requests_waiting,
                gauges.num_requests_swapped, 100.0 * gauges.kv_cache_usage_perc,
                stats.num_kv_blocks_used, stats.num_kv_blocks_total, hit_rate, tokens_per_s);
  return line;
}

// Every stats_log_interval: the engine line, while there is work or tokens came out.
asio::awaitable<void> log_engine_stats(std::shared_ptr<ServerState> state) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  actors::EngineStats last = state->engine().stats();
  Clock::time_point last_time = Clock::now();
  while (!state->stopping()) {
    timer.expires_after(state->config().stats_log_interval);
    auto [ec] = co_await timer.async_wait(kTuple);
    if (ec) break;
    const actors::EngineStats stats = state->engine().stats();
    const Clock::time_point now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - last_time).count();
    const int64_t tokens = stats.num_generated_tokens - last.num_generated_tokens;
    if (tokens > 0 || stats.num_unfinished_requests > 0) {
      state->log(engine_line(stats, seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0) +
                 stage_split(stats, last));
    }
    last = stats;
    last_time = now;
  }
}

// Every few seconds, glibc's free heap pages go back to the system. A burst of connections (a
// chaos soak's clients arriving thousands at once) leaves the session frames and buffers it
// freed scattered over every thread's arena, and without this the resident size keeps each
// burst's high-water mark; with it, RSS follows the memory in use (and a leak stands out).
asio::awaitable<void> release_free_memory(std::shared_ptr<ServerState> state) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!state->stopping()) {
    timer.expires_after(std::chrono::seconds(5));
    auto [ec] = co_await timer.async_wait(kTuple);
    if (ec) break;
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
  }
}

tcp::endpoint resolve_endpoint(asio::io_context& ioc, const std::string& host, uint16_t port) {
  boost::system::error_code ec;
  const asio::ip::address address = asio::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(address, port);
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty()) {
    throw std::runtime_error("cannot resolve --host '" + host + "': " + ec.message());
  }
  return results.begin()->endpoint();
}

// Polls `done` until it holds or the deadline passes (the controlling thread only).
template <class Done>
bool wait_until(Done done, Clock::time_point deadline) {
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace

actors::EngineOptions engine_options_for(const HttpServerConfig& config,
                                         const actors::EngineConfig& engine_config) {
  actors::EngineOptions options;
  // Above the admission limit, with room for aborted requests whose final events are on the
  // way (the server counts them out slightly before the engine does).
  options.max_unfinished_requests =
      engine_config.max_num_seqs + std::max(config.max_queued_requests, 0) + 64;
  return options;
}

struct HttpServer::Impl {
  Impl(actors::Engine& engine, HttpServerConfig config)
      : state(std::make_shared<ServerState>(engine, std::move(config))) {}

  void stop();

  std::shared_ptr<ServerState> state;
  std::unique_ptr<asio::ssl::context> tls;  // null: plain HTTP; outlives every session
  // Declared after `state` and `tls`: destroyed first, with every coroutine frame it holds.
  std::optional<asio::io_context> ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  // The listener: its own io_context and thread (see accept_loop).
  std::optional<asio::io_context> accept_ioc;
  std::optional<tcp::acceptor> acceptor;
  std::thread accept_thread;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable stop_requested_cv;
  bool stop_requested = false;
  bool stopped = false;
};

HttpServer::HttpServer(actors::Engine& engine, HttpServerConfig config)
    : impl_(std::make_unique<Impl>(engine, std::move(config))) {}

HttpServer::~HttpServer() { stop(); }

uint16_t HttpServer::start() {
  Impl& s = *impl_;
  const HttpServerConfig& config = s.state->config();
  const int num_threads = std::max(config.num_io_threads, 1);
  s.tls = make_tls_context(config.tls_cert_file, config.tls_key_file);  // throws before serving
  s.ioc.emplace(num_threads);
  s.work.emplace(s.ioc->get_executor());
  const tcp::endpoint endpoint = resolve_endpoint(*s.ioc, config.host, config.port);
  s.accept_ioc.emplace(1);
  s.acceptor.emplace(*s.accept_ioc);
  boost::system::error_code ec;
  s.acceptor->open(endpoint.protocol(), ec);
  if (!ec) s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(endpoint, ec);
  if (!ec) {
    s.acceptor->listen(config.listen_backlog > 0 ? config.listen_backlog
                                                 : asio::socket_base::max_listen_connections,
                       ec);
  }
  if (ec) {
    throw std::runtime_error("cannot listen on " + config.host + ":" + std::to_string(config.port) +
                             ": " + ec.message());
  }
  asio::co_spawn(*s.accept_ioc, accept_loop(s.state, *s.acceptor, *s.ioc, s.tls.get()),
                 log_failure(s.state, "listener"));
  if (config.stats_log_interval.count() > 0) {
    asio::co_spawn(asio::make_strand(*s.ioc), log_engine_stats(s.state),
                   log_failure(s.state, "stats logger"));
  }
  asio::co_spawn(asio::make_strand(*s.ioc), release_free_memory(s.state),
                 log_failure(s.state, "memory release"));
  for (int i = 0; i < num_threads; ++i) s.threads.emplace_back([&ioc = *s.ioc] { ioc.run(); });
  const uint16_t port = s.acceptor->local_endpoint().port();
  s.accept_thread = std::thread([&ioc = *s.accept_ioc] { ioc.run(); });
  return port;
}

void HttpServer::run_until_signal(const std::function<void()>& on_ready) {
  Impl& s = *impl_;
  if (!s.ioc) return;
  std::optional<asio::signal_set> signals(std::in_place, *s.ioc, SIGINT, SIGTERM);
  signals->async_wait([&s](const boost::system::error_code& ec, int) {
    if (ec) return;
    std::lock_guard lock(s.mu);
    s.stop_requested = true;
    s.stop_requested_cv.notify_all();
  });
  if (on_ready) on_ready();
  {
    std::unique_lock lock(s.mu);
    s.stop_requested_cv.wait(lock, [&s] { return s.stop_requested; });
  }
  s.state->log("stopping: draining requests in flight");
  signals.reset();  // an I/O object: it must go before stop() destroys the io_context
  stop();
}

void HttpServer::stop() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop_requested = true;
    impl_->stop_requested_cv.notify_all();
  }
  impl_->stop();
}

void HttpServer::Impl::stop() {
  if (stopped || !ioc) return;
  stopped = true;
  // 1. No new connections; idle ones close, busy ones close after their response. The
  // listener's thread ends with its accept loop.
  if (acceptor) {
    asio::post(*accept_ioc, [this] {
      boost::system::error_code ignored;
      acceptor->close(ignored);
    });
  }
  if (accept_thread.joinable()) accept_thread.join();
  state->stop_connections(false);
  const auto drained = [this] { return state->num_connections() == 0; };
  if (!wait_until(drained, Clock::now() + state->config().drain_timeout)) {
    // 2. Past the deadline: abort what is left and close the sockets.
    state->stop_connections(true);
    wait_until(drained, Clock::now() + std::chrono::seconds(2));
  }
  // 3. Let the engine deliver the final events of aborted requests.
  wait_until([this] { return state->num_in_flight() == 0; },
             Clock::now() + std::chrono::seconds(5));
  state->clear_connections();
  state->gate()->close();
  work.reset();
  ioc->stop();
  for (std::thread& thread : threads) thread.join();
  threads.clear();
  acceptor.reset();
  accept_ioc.reset();
  ioc.reset();  // destroys the coroutine frames still suspended, on this thread
}

}  // namespace pagedserve::net
