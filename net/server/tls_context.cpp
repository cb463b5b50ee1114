// make_tls_context (see tls_context.h). Controlling thread, once, before listening.
#include "net/server/tls_context.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace pagedserve::net {
namespace {

namespace ssl = boost::asio::ssl;

// A readable regular file, or the reason it is not (so the error says "No such file"
// rather than OpenSSL's "system lib").
void require_readable(const std::string& flag, const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    throw std::runtime_error("cannot read " + flag + " '" + path + "': " + std::strerror(errno));
  }
}

// Why OpenSSL refused: Asio's error (it took the first queued reason, e.g. "no start line"),
// else the first reason still queued. The queue is cleared.
std::string openssl_reason(const boost::system::error_code& ec) {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (ec) return ec.message();
  if (code == 0) return "unknown OpenSSL error";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

}  // namespace

std::unique_ptr<ssl::context> make_tls_context(const std::string& cert_file,
                                               const std::string& key_file) {
  if (cert_file.empty() && key_file.empty()) return nullptr;
  if (cert_file.empty() || key_file.empty()) {
    throw std::runtime_error("TLS needs both --ssl-certfile and --ssl-keyfile (got only " +
                             std::string(cert_file.empty() ? "--ssl-keyfile" : "--ssl-certfile") +
                             ")");
  }
  require_readable("--ssl-certfile", cert_file);
  require_readable("--ssl-keyfile", key_file);
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use);
  ERR_clear_error();
  boost::system::error_code ec;
  context->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    throw std::runtime_error("--ssl-certfile '" + cert_file +
                             "' is not a PEM certificate chain: " + openssl_reason(ec));
  }
  context->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec) {
    throw std::runtime_error(
        "--ssl-keyfile '" + key_file +
        "' is not a PEM private key matching --ssl-certfile: " + openssl_reason(ec));
  }
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    throw std::runtime_error("--ssl-keyfile '" + key_file + "' does not match --ssl-certfile '" +
                             cert_file + "': " + openssl_reason({}));
  }
  return context;
}

}  // namespace pagedserve::net
