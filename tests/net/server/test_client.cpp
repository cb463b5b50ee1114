// The blocking Beast clients and TestServer of test_client.h. Runs on the calling test
// thread; the only Beast translation unit of net_server_test.
#include "tests/net/server/test_client.h"

#include <poll.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <cctype>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/test_paths.h"

namespace pagedserve::net::testing {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

tcp::endpoint loopback(uint16_t port) {
  return tcp::endpoint(asio::ip::make_address("127.0.0.1"), port);
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

template <class Fields>
Headers headers_of(const Fields& fields) {
  Headers out;
  for (const auto& field : fields) out[lower(std::string(field.name_string()))] = field.value();
  return out;
}

http::request<http::string_body> make_request(const std::string& method, const std::string& target,
                                              const std::string& body, const Headers& headers) {
  http::request<http::string_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  req.set(http::field::host, "127.0.0.1");
  for (const auto& [name, value] : headers) req.set(name, value);
  req.body() = body;
  if (!body.empty() || method == "POST") req.prepare_payload();
  return req;
}

HttpResult read_result(tcp::socket& socket, beast::flat_buffer& buffer) {
  http::response_parser<http::string_body> parser;
  parser.body_limit(size_t{256} << 20);
  http::read(socket, buffer, parser);
  HttpResult result;
  result.status = static_cast<int>(parser.get().result_int());
  result.headers = headers_of(parser.get());
  result.body = parser.get().body();
  return result;
}

}  // namespace

// ---- one-shot requests ----

HttpResult http_request(uint16_t port, const std::string& method, const std::string& target,
                        const std::string& body, const Headers& headers) {
  asio::io_context ioc;
  tcp::socket socket(ioc);
  socket.connect(loopback(port));
  http::write(socket, make_request(method, target, body, headers));
  beast::flat_buffer buffer;
  return read_result(socket, buffer);
}

std::string raw_exchange(uint16_t port, const std::string& bytes) {
  asio::io_context ioc;
  tcp::socket socket(ioc);
  socket.connect(loopback(port));
  asio::write(socket, asio::buffer(bytes));
  std::string out;
  beast::error_code ec;
  asio::read(socket, asio::dynamic_buffer(out), ec);  // until EOF or a reset
  return out;
}

// ---- keep-alive connection ----

struct HttpConnection::Impl {
  asio::io_context ioc;
  tcp::socket socket{ioc};
  beast::flat_buffer buffer;
};

HttpConnection::HttpConnection(uint16_t port) : impl_(std::make_unique<Impl>()) {
  impl_->socket.connect(loopback(port));
}
HttpConnection::~HttpConnection() = default;

HttpResult HttpConnection::request(const std::string& method, const std::string& target,
                                   const std::string& body, const Headers& headers) {
  http::write(impl_->socket, make_request(method, target, body, headers));
  return read_result(impl_->socket, impl_->buffer);
}

void HttpConnection::send(const std::string& method, const std::string& target,
                          const std::string& body) {
  http::write(impl_->socket, make_request(method, target, body, {}));
}

bool HttpConnection::closed_by_server(std::chrono::milliseconds timeout) {
  pollfd fd{impl_->socket.native_handle(), POLLIN, 0};
  if (::poll(&fd, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char byte = 0;
  beast::error_code ec;
  impl_->socket.read_some(asio::buffer(&byte, 1), ec);
  return static_cast<bool>(ec);
}

// ---- server-sent events ----

struct SseClient::Impl {
  asio::io_context ioc;
  tcp::socket socket{ioc};
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  std::string pending;  // body bytes not yet returned as events
  bool ended = false;

  // Appends more body bytes to `pending`; false once the body or connection ended.
  bool read_more() {
    if (ended || parser.is_done()) return false;
    char chunk[4096];
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    beast::error_code ec;
    http::read_some(socket, buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    pending.append(chunk, sizeof chunk - parser.get().body().size);
    if (ec) ended = true;
    return !ended;
  }
};

SseClient::SseClient(uint16_t port, const std::string& target, const std::string& body,
                     const Headers& headers, int receive_buffer_bytes)
    : impl_(std::make_unique<Impl>()) {
  if (receive_buffer_bytes > 0) {
    impl_->socket.open(tcp::v4());
    impl_->socket.set_option(asio::socket_base::receive_buffer_size(receive_buffer_bytes));
  }
  impl_->socket.connect(loopback(port));
  http::write(impl_->socket, make_request("POST", target, body, headers));
  impl_->parser.body_limit(size_t{256} << 20);
  http::read_header(impl_->socket, impl_->buffer, impl_->parser);
}
SseClient::~SseClient() = default;

int SseClient::status() const { return static_cast<int>(impl_->parser.get().result_int()); }

const Headers& SseClient::headers() const {
  static thread_local Headers headers;
  headers = headers_of(impl_->parser.get());
  return headers;
}

std::optional<std::string> SseClient::next_event() {
  while (true) {
    const size_t end = impl_->pending.find("\n\n");
    if (end != std::string::npos) {
      std::string event = impl_->pending.substr(0, end);
      impl_->pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) return event.substr(6);
      return event;
    }
    const bool more = impl_->read_more();
    if (!more && impl_->pending.find("\n\n") == std::string::npos) return std::nullopt;
  }
}

std::string SseClient::rest_of_body() {
  while (impl_->read_more()) {
  }
  return std::exchange(impl_->pending, {});
}

void SseClient::disconnect() {
  beast::error_code ignored;
  impl_->socket.close(ignored);
  impl_->ended = true;
}

// ---- WebSocket ----

struct WsClient::Impl {
  asio::io_context ioc;
  websocket::stream<tcp::socket> ws{ioc};
  Ending ending;
};

WsClient::WsClient(uint16_t port, const std::string& target, const Headers& headers,
                   int receive_buffer_bytes)
    : impl_(std::make_unique<Impl>()) {
  if (receive_buffer_bytes > 0) {
    impl_->ws.next_layer().open(tcp::v4());
    impl_->ws.next_layer().set_option(asio::socket_base::receive_buffer_size(receive_buffer_bytes));
  }
  impl_->ws.next_layer().connect(loopback(port));
  impl_->ws.set_option(websocket::stream_base::decorator([headers](websocket::request_type& req) {
    for (const auto& [name, value] : headers) req.set(name, value);
  }));
  impl_->ws.handshake("127.0.0.1", target);
}
WsClient::~WsClient() = default;

void WsClient::send(const std::string& text) {
  impl_->ws.text(true);
  impl_->ws.write(asio::buffer(text));
}

void WsClient::send_binary(const std::string& data) {
  impl_->ws.binary(true);
  impl_->ws.write(asio::buffer(data));
}

std::optional<std::string> WsClient::read() {
  beast::flat_buffer buffer;
  beast::error_code ec;
  impl_->ws.read(buffer, ec);
  if (ec) {
    impl_->ending.error = ec.message();
    if (ec == websocket::error::closed) {
      impl_->ending.close_code = impl_->ws.reason().code;
      impl_->ending.close_reason = std::string(impl_->ws.reason().reason.c_str());
    }
    return std::nullopt;
  }
  return beast::buffers_to_string(buffer.data());
}

const WsClient::Ending& WsClient::ending() const { return impl_->ending; }

void WsClient::disconnect() {
  beast::error_code ignored;
  impl_->ws.next_layer().close(ignored);
}

int ws_handshake_status(uint16_t port, const std::string& target, const Headers& headers) {
  return ws_handshake(port, target, headers).status;
}

HttpResult ws_handshake(uint16_t port, const std::string& target, const Headers& headers) {
  Headers upgrade = headers;
  upgrade["Connection"] = "Upgrade";
  upgrade["Upgrade"] = "websocket";
  upgrade["Sec-WebSocket-Version"] = "13";
  upgrade["Sec-WebSocket-Key"] = "dGhlIHNhbXBsZSBub25jZQ==";
  asio::io_context ioc;
  tcp::socket socket(ioc);
  socket.connect(loopback(port));
  http::write(socket, make_request("GET", target, "", upgrade));
  beast::flat_buffer buffer;
  http::response_parser<http::empty_body> parser;
  http::read_header(socket, buffer, parser);
  HttpResult result;
  result.status = static_cast<int>(parser.get().result_int());
  for (const auto& field : parser.get()) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    result.headers[name] = std::string(field.value());
  }
  return result;
}

// ---- the server under test ----

TestServer::TestServer(HttpServerConfig config, int max_num_seqs, int num_kv_blocks,
                       std::shared_ptr<const actors::FaultHooks> fault_hooks) {
  actors::EngineConfig engine_config;
  engine_config.model_dir = pagedserve::testing::stories260k_dir();
  engine_config.num_kv_blocks = num_kv_blocks;
  engine_config.max_num_seqs = max_num_seqs;
  engine_config.num_threads = 1;
  actors::EngineOptions options = engine_options_for(config, engine_config);
  options.fault_hooks = std::move(fault_hooks);
  engine_ = actors::Engine::start(engine_config, options);
  config.host = "127.0.0.1";
  config.port = 0;
  config.log = [this](std::string_view line) {
    std::function<void()> hook;
    {
      std::lock_guard lock(log_mu_);
      log_.emplace_back(line);
      hook = log_hook_;
    }
    if (hook) hook();
  };
  server_ = std::make_unique<HttpServer>(*engine_, std::move(config));
  port_ = server_->start();
}

TestServer::~TestServer() {
  server_.reset();
  engine_->shutdown();
}

void TestServer::set_log_hook(std::function<void()> hook) {
  std::lock_guard lock(log_mu_);
  log_hook_ = std::move(hook);
}

std::vector<std::string> TestServer::log_lines() const {
  std::lock_guard lock(log_mu_);
  return log_;
}

bool TestServer::wait_until_idle(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const actors::EngineStats stats = engine_->stats();
    if (stats.num_unfinished_requests == 0 && stats.num_kv_blocks_free == stats.num_kv_blocks_total)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

std::optional<double> metric_value(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return std::nullopt;
}

}  // namespace pagedserve::net::testing
