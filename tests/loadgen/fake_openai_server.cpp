// The fake OpenAI server of the load generator's tests (see fake_openai_server.h).
#include "tests/loadgen/fake_openai_server.h"

#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

namespace pagedserve::loadgen::testing {

namespace asio = boost::asio;
using asio::ip::tcp;

struct FakeOpenAiServer::Impl {
  FakeServerOptions options;
  asio::io_context io;
  tcp::acceptor acceptor{io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  std::thread thread;
  mutable std::mutex mutex;
  std::vector<std::chrono::steady_clock::time_point> arrivals;
  int count = 0, in_flight = 0;
  std::atomic<int>* max_in_flight = nullptr;
};

namespace {

std::string chunk(const std::string& data) {
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

std::string sse(const nlohmann::json& obj) { return chunk("data: " + obj.dump() + "\n\n"); }

asio::awaitable<void> session(FakeOpenAiServer::Impl* impl, tcp::socket socket) {
  std::string in;
  const size_t header_end = co_await asio::async_read_until(socket, asio::dynamic_buffer(in),
                                                            "\r\n\r\n", asio::use_awaitable);
  size_t length = 0;
  if (auto at = in.find("Content-Length: "); at != std::string::npos && at < header_end) {
    length = std::stoul(in.substr(at + 16));
  }
  while (in.size() < header_end + length) {
    char buf[4096];
    const size_t n = co_await socket.async_read_some(asio::buffer(buf), asio::use_awaitable);
    in.append(buf, n);
  }
  int number;
  {
    std::lock_guard lock(impl->mutex);
    impl->arrivals.push_back(std::chrono::steady_clock::now());
    number = ++impl->count;
    *impl->max_in_flight = std::max(impl->max_in_flight->load(), ++impl->in_flight);
  }
  const nlohmann::json body = nlohmann::json::parse(in.substr(header_end, length), nullptr, false);
  const int max_tokens = body.is_object() ? body.value("max_tokens", 16) : 16;
  std::string out;
  asio::steady_timer timer(socket.get_executor());
  if (impl->options.fail_every > 0 && number % impl->options.fail_every == 0) {
    const std::string error = R"({"error":{"message":"overloaded","type":"server_error"}})";
    out = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
          std::to_string(error.size()) + "\r\n\r\n" + error;
    co_await asio::async_write(socket, asio::buffer(out), asio::use_awaitable);
  } else {
    out =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    co_await asio::async_write(socket, asio::buffer(out), asio::use_awaitable);
    auto next = std::chrono::steady_clock::now() + impl->options.ttft;
    for (int i = 0; i < max_tokens; ++i) {
      timer.expires_at(next);
      co_await timer.async_wait(asio::use_awaitable);
      out = sse({{"choices", {{{"index", 0}, {"text", " tok"}}}}});
      co_await asio::async_write(socket, asio::buffer(out), asio::use_awaitable);
      next += impl->options.itl;
    }
    out = sse({{"choices", nlohmann::json::array()},
               {"usage", {{"prompt_tokens", 7}, {"completion_tokens", max_tokens}}}}) +
          chunk("data: [DONE]\n\n") + "0\r\n\r\n";
    co_await asio::async_write(socket, asio::buffer(out), asio::use_awaitable);
  }
  std::lock_guard lock(impl->mutex);
  --impl->in_flight;
}

asio::awaitable<void> accept_loop(FakeOpenAiServer::Impl* impl) {
  while (true) {
    tcp::socket socket = co_await impl->acceptor.async_accept(asio::use_awaitable);
    asio::co_spawn(impl->io, session(impl, std::move(socket)), asio::detached);
  }
}

}  // namespace

FakeOpenAiServer::FakeOpenAiServer(FakeServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->max_in_flight = &max_in_flight_;
  asio::co_spawn(impl_->io, accept_loop(impl_.get()), asio::detached);
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

FakeOpenAiServer::~FakeOpenAiServer() {
  impl_->io.stop();
  impl_->thread.join();
}

std::string FakeOpenAiServer::base_url() const {
  return "http://127.0.0.1:" + std::to_string(impl_->acceptor.local_endpoint().port());
}

std::vector<std::chrono::steady_clock::time_point> FakeOpenAiServer::arrivals() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->arrivals;
}

}  // namespace pagedserve::loadgen::testing
