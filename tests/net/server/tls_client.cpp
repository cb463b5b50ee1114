// The certificate maker and TLS clients of tls_client.h. Runs on the calling test thread.
#include "tests/net/server/tls_client.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace pagedserve::net::testing {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

template <class T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using X509ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION, X509_EXTENSION_free>>;

void require(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("OpenSSL: ") + what + " failed");
}

void write_pem(const std::string& path, const std::function<int(FILE*)>& write) {
  FILE* file = std::fopen(path.c_str(), "w");
  require(file != nullptr, "fopen");
  const int ok = write(file);
  std::fclose(file);
  require(ok == 1, "PEM write");
}

// The client's TLS context: this certificate is the only trusted CA; host names are checked.
ssl::context client_context(const std::string& ca_file) {
  ssl::context context(ssl::context::tls_client);
  context.load_verify_file(ca_file);
  context.set_verify_mode(ssl::verify_peer);
  return context;
}

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

void connect_tls(TlsStream& stream, uint16_t port) {
  // SNI and the host-name check, as a browser or curl does for https://localhost:port.
  require(SSL_set_tlsext_host_name(stream.native_handle(), "localhost") == 1, "SNI");
  stream.set_verify_callback(ssl::host_name_verification("localhost"));
  beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(30));
  beast::get_lowest_layer(stream).connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  stream.handshake(ssl::stream_base::client);
  beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(120));
}

http::request<http::string_body> make_request(const std::string& method, const std::string& target,
                                              const std::string& body, const Headers& headers) {
  http::request<http::string_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  req.set(http::field::host, "localhost");
  req.set(http::field::connection, "close");
  for (const auto& [name, value] : headers) req.set(name, value);
  req.body() = body;
  if (!body.empty() || method == "POST") req.prepare_payload();
  return req;
}

http::response<http::string_body> exchange(uint16_t port, const std::string& ca_file,
                                           const http::request<http::string_body>& req) {
  asio::io_context ioc;
  ssl::context context = client_context(ca_file);
  TlsStream stream(ioc, context);
  connect_tls(stream, port);
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(size_t{64} << 20);
  http::read(stream, buffer, parser);
  beast::error_code ignored;
  stream.shutdown(ignored);  // the server's close_notify, or the error it closed with
  return parser.release();
}

}  // namespace

TlsFiles make_self_signed(const std::filesystem::path& dir, const std::string& stem) {
  std::filesystem::create_directories(dir);
  PkeyPtr key(EVP_EC_gen("P-256"));
  require(key != nullptr, "EVP_EC_gen");
  X509Ptr cert(X509_new());
  require(cert != nullptr, "X509_new");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600L * 24);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  // A self-signed leaf that is its own CA; the names a client checks for 127.0.0.1.
  const std::pair<const char*, const char*> kExtensions[] = {
      {"subjectAltName", "DNS:localhost,IP:127.0.0.1"}, {"basicConstraints", "CA:TRUE"}};
  for (const auto& [ext_name, value] : kExtensions) {
    X509ExtPtr extension(X509V3_EXT_nconf(nullptr, &ctx, ext_name, value));
    require(extension != nullptr, "X509V3_EXT_nconf");
    require(X509_add_ext(cert.get(), extension.get(), -1) == 1, "X509_add_ext");
  }
  require(X509_sign(cert.get(), key.get(), EVP_sha256()) > 0, "X509_sign");
  TlsFiles files{(dir / (stem + ".crt")).string(), (dir / (stem + ".key")).string()};
  write_pem(files.cert_file, [&](FILE* f) { return PEM_write_X509(f, cert.get()); });
  write_pem(files.key_file, [&](FILE* f) {
    return PEM_write_PrivateKey(f, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  });
  return files;
}

HttpResult https_request(uint16_t port, const std::string& ca_file, const std::string& method,
                         const std::string& target, const std::string& body,
                         const Headers& headers) {
  const http::response<http::string_body> res =
      exchange(port, ca_file, make_request(method, target, body, headers));
  HttpResult result;
  result.status = static_cast<int>(res.result_int());
  for (const auto& field : res) {
    std::string lowered(field.name_string());
    for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    result.headers[lowered] = field.value();
  }
  result.body = res.body();
  return result;
}

std::vector<std::string> https_sse_events(uint16_t port, const std::string& ca_file,
                                          const std::string& target, const std::string& body) {
  const http::response<http::string_body> res =
      exchange(port, ca_file, make_request("POST", target, body, {}));
  if (res.result_int() != 200) {
    throw std::runtime_error("SSE over TLS: status " + std::to_string(res.result_int()) + ": " +
                             res.body());
  }
  std::vector<std::string> events;
  std::istringstream lines(res.body());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) == 0) events.push_back(line.substr(6));
  }
  return events;
}

std::vector<std::string> wss_exchange(uint16_t port, const std::string& ca_file,
                                      const std::string& frame) {
  asio::io_context ioc;
  ssl::context context = client_context(ca_file);
  websocket::stream<TlsStream> ws(ioc, context);
  connect_tls(ws.next_layer(), port);
  ws.handshake("localhost", "/v1/stream");
  ws.write(asio::buffer(frame));
  std::vector<std::string> frames;
  while (true) {
    beast::flat_buffer buffer;
    beast::error_code ec;
    ws.read(buffer, ec);
    if (ec) break;
    frames.push_back(beast::buffers_to_string(buffer.data()));
    const auto parsed = nlohmann::json::parse(frames.back(), nullptr, false);
    if (parsed.is_object() &&
        (parsed.value("type", "") == "done" || parsed.value("type", "") == "error")) {
      break;
    }
  }
  beast::error_code ignored;
  ws.close(websocket::close_code::normal, ignored);
  return frames;
}

}  // namespace pagedserve::net::testing
