// TLS for the server's end-to-end tests: a self-signed certificate made at test time with
// OpenSSL's C API (no `openssl` tool needed), and blocking HTTPS, SSE-over-HTTPS and WSS
// clients (Beast over Asio SSL) that verify the server against that certificate as their only
// CA and check the host name, as a real client does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/net/server/test_client.h"

namespace pagedserve::net::testing {

struct TlsFiles {
  std::string cert_file;  // PEM, self-signed, CN and subjectAltName "localhost" and 127.0.0.1
  std::string key_file;   // PEM, an EC P-256 key
};

// Writes a fresh key and certificate under `dir` (created if missing) with these names.
TlsFiles make_self_signed(const std::filesystem::path& dir, const std::string& stem);

// One request over a fresh TLS connection to 127.0.0.1:port (server name "localhost").
HttpResult https_request(uint16_t port, const std::string& ca_file, const std::string& method,
                         const std::string& target, const std::string& body = "",
                         const Headers& headers = {});

// A streaming POST over TLS: the data of every server-sent event, in order ("[DONE]"
// included), read until the response ends.
std::vector<std::string> https_sse_events(uint16_t port, const std::string& ca_file,
                                          const std::string& target, const std::string& body);

// A wss:// session on /v1/stream: sends `frame`, then returns every text frame received until
// one has "type" "done" or "error" (or the socket closes).
std::vector<std::string> wss_exchange(uint16_t port, const std::string& ca_file,
                                      const std::string& frame);

}  // namespace pagedserve::net::testing
