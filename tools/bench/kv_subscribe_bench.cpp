// The "kv" topic's cost to the engine: tokens/s of the same generation workload with no
// subscriber, then with many WebSocket subscribers to the KV block map (all reading, plus one
// slow client that never reads, with a tiny receive buffer), back to back and alternating in
// one process; and the process's memory (VmRSS) after each trial, which must not grow with
// the slow client. The requests go straight to the Engine (no HTTP in the measured path), so
// the ratio is the subscription's cost alone. Prints one line per trial and a summary.
//
//   kv_subscribe_bench [--subscribers N] [--requests N] [--max-tokens N] [--trials N]
//                      [--kv-blocks N] [--model DIR]
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "actors/engine.h"
#include "net/server/http_server.h"

namespace {

using namespace pagedserve;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

std::filesystem::path default_model() {
  if (const char* env = std::getenv("PAGEDSERVE_SHARED")) {
    return std::filesystem::path(env) / "models" / "stories260K";
  }
  return std::filesystem::path(PAGEDSERVE_SHARED_DIR) / "models" / "stories260K";
}

int64_t rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

// One subscriber: reads every frame (counting kv frames), or, slow, subscribes and never reads
// again. All of them share one io_context run by one thread (Subscribers), as a browser tab's
// socket costs its own machine, not the server's: 32 reading threads would instead take the
// server's CPU on a 2-core machine and be measured as the subscription's cost.
class Subscriber {
 public:
  Subscriber(asio::io_context& io, uint16_t port, bool slow) : ws_(io) {
    tcp::socket& socket = ws_.next_layer();
    socket.open(tcp::v4());
    if (slow) socket.set_option(asio::socket_base::receive_buffer_size(4096));
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    ws_.handshake("127.0.0.1", "/v1/stream");
    ws_.write(asio::buffer(std::string(R"({"type": "subscribe", "topic": "kv"})")));
  }
  // Starts the read loop (on the io_context's thread).
  void start_reading() { read_next(); }
  // On the io_context's thread: ends the read loop.
  void close() {
    beast::error_code ignored;
    ws_.next_layer().shutdown(tcp::socket::shutdown_both, ignored);
    ws_.next_layer().close(ignored);
  }
  int64_t kv_frames() const { return kv_frames_.load(); }
  int64_t bytes() const { return bytes_.load(); }

 private:
  void read_next() {
    buffer_.clear();
    ws_.async_read(buffer_, [this](beast::error_code ec, size_t) {
      if (ec) return;
      bytes_ += static_cast<int64_t>(buffer_.size());
      if (beast::buffers_to_string(buffer_.data()).find(R"("type":"kv")") != std::string::npos) {
        ++kv_frames_;
      }
      read_next();
    });
  }

  websocket::stream<tcp::socket> ws_;
  beast::flat_buffer buffer_;
  std::atomic<int64_t> kv_frames_{0};
  std::atomic<int64_t> bytes_{0};
};

// num_readers reading subscribers and one slow one, on one thread.
class Subscribers {
 public:
  Subscribers(uint16_t port, int num_readers) : guard_(io_.get_executor()) {
    all_.push_back(std::make_unique<Subscriber>(io_, port, /*slow=*/true));
    for (int i = 0; i < num_readers; ++i) {
      all_.push_back(std::make_unique<Subscriber>(io_, port, /*slow=*/false));
      asio::post(io_, [s = all_.back().get()] { s->start_reading(); });
    }
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Subscribers() {
    asio::post(io_, [this] {
      for (auto& s : all_) s->close();
      guard_.reset();
    });
    thread_.join();
  }
  int64_t kv_frames() const {
    int64_t n = 0;
    for (const auto& s : all_) n += s->kv_frames();
    return n;
  }
  int64_t bytes() const {
    int64_t n = 0;
    for (const auto& s : all_) n += s->bytes();
    return n;
  }

 private:
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::vector<std::unique_ptr<Subscriber>> all_;
  std::thread thread_;
};

double run_workload(actors::Engine& engine, int num_requests, int max_tokens) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<actors::RequestStream>> streams;
  for (int i = 0; i < num_requests; ++i) {
    actors::GenerateRequest request;
    request.prompt = "Once upon a time there was a little girl named Lily who loved to play " +
                     std::to_string(i % 4);  // four distinct prompts: some prefix hits
    request.sampling.max_tokens = max_tokens;
    request.sampling.ignore_eos = true;
    request.sampling.temperature = 1.0f;
    request.sampling.seed = static_cast<uint64_t>(i);
    streams.push_back(engine.submit(request));
  }
  int64_t tokens = 0;
  for (auto& stream : streams) {
    while (auto event = stream->next()) tokens += static_cast<int64_t>(event->token_ids.size());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(tokens) / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  int num_subscribers = 32, num_requests = 48, max_tokens = 256, trials = 3, kv_blocks = 4096;
  std::filesystem::path model = default_model();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--subscribers")
      num_subscribers = value;
    else if (flag == "--requests")
      num_requests = value;
    else if (flag == "--max-tokens")
      max_tokens = value;
    else if (flag == "--trials")
      trials = value;
    else if (flag == "--kv-blocks")
      kv_blocks = value;
    else if (flag == "--model")
      model = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  actors::EngineConfig config;
  config.model_dir = model;
  config.num_kv_blocks = kv_blocks;
  config.max_num_seqs = 64;
  config.num_threads = 1;
  net::HttpServerConfig server_config;
  server_config.host = "127.0.0.1";
  server_config.port = 0;
  server_config.stats_log_interval = std::chrono::milliseconds(0);
  server_config.log = [](std::string_view) {};
  auto engine = actors::Engine::start(config, net::engine_options_for(server_config, config));
  net::HttpServer server(*engine, server_config);
  const uint16_t port = server.start();
  std::printf(
      "kv_subscribe_bench: %d requests x %d tokens, %d KV blocks, %d subscribers + 1 "
      "that never reads\n",
      num_requests, max_tokens, kv_blocks, num_subscribers);
  run_workload(*engine, num_requests / 4, max_tokens / 4);  // warm-up
  std::vector<double> ratios;
  for (int trial = 0; trial < trials; ++trial) {
    const double alone = run_workload(*engine, num_requests, max_tokens);
    const int64_t rss_alone = rss_kib();
    double watched = 0;
    int64_t rss_watched = 0, frames = 0, bytes = 0;
    {
      Subscribers subscribers(port, num_subscribers);
      watched = run_workload(*engine, num_requests, max_tokens);
      rss_watched = rss_kib();
      frames = subscribers.kv_frames();
      bytes = subscribers.bytes();
    }
    ratios.push_back(watched / alone);
    std::printf(
        "trial %d: %.0f tok/s alone, %.0f tok/s watched (ratio %.3f); %lld kv frames, "
        "%.1f MiB to the readers; VmRSS %lld -> %lld KiB\n",
        trial + 1, alone, watched, watched / alone, static_cast<long long>(frames),
        static_cast<double>(bytes) / (1 << 20), static_cast<long long>(rss_alone),
        static_cast<long long>(rss_watched));
    std::fflush(stdout);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("median ratio watched / alone: %.3f (over %d trials); final VmRSS %lld KiB\n",
              ratios[ratios.size() / 2], trials, static_cast<long long>(rss_kib()));
  server.stop();
  engine->shutdown();
  return 0;
}
