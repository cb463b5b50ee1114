// The server's TLS context (--ssl-certfile, --ssl-keyfile): OpenSSL through Asio, TLS 1.2 and
// later, loaded once at start-up so that a missing file, a file that is not PEM or a key that
// does not match the certificate stops the server before it serves. Internal to net/server
// (includes Asio's SSL, hence OpenSSL); only http_server.cpp builds it.
#pragma once

#include <memory>
#include <string>

#include <boost/asio/ssl/context.hpp>

namespace pagedserve::net {

// nullptr when both paths are empty (plain HTTP). Throws std::runtime_error naming the flag
// and the file when only one is given, a file cannot be read or parsed, or the key does not
// belong to the certificate.
std::unique_ptr<boost::asio::ssl::context> make_tls_context(const std::string& cert_file,
                                                            const std::string& key_file);

}  // namespace pagedserve::net
