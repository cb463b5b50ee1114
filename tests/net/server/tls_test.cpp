// TLS end to end: a certificate made at test time, the server started with it, and a real
// TLS client (OpenSSL through Asio, verifying the chain and the host name) for a completion,
// an SSE stream and a WebSocket session; plain HTTP sent to the TLS port gets a 400 and the
// server keeps serving; a missing file, a non-PEM file or a key of another certificate stops
// start() with an error naming the flag.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/net/server/test_client.h"
#include "tests/net/server/tls_client.h"

namespace pagedserve::net::testing {
namespace {

using nlohmann::json;

std::filesystem::path temp_dir(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("pagedserve_tls_" + name + "_" + std::to_string(::getpid()));
}

HttpServerConfig tls_config(const TlsFiles& files) {
  HttpServerConfig config;
  config.tls_cert_file = files.cert_file;
  config.tls_key_file = files.key_file;
  return config;
}

TEST(TlsTest, CompletionSseAndWebSocketOverTls) {
  const TlsFiles files = make_self_signed(temp_dir("serve"), "server");
  TestServer server(tls_config(files));
  const uint16_t port = server.port();

  const HttpResult health = https_request(port, files.cert_file, "GET", "/health");
  EXPECT_EQ(health.status, 200);
  const HttpResult completion =
      https_request(port, files.cert_file, "POST", "/v1/completions",
                    R"({"prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": true})");
  ASSERT_EQ(completion.status, 200) << completion.body;
  const json body = json::parse(completion.body);
  EXPECT_EQ(body["usage"]["completion_tokens"], 5);

  // SSE: the greedy stream's text is the greedy JSON answer's text, and it ends with [DONE].
  const std::string greedy = R"({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0)";
  const HttpResult whole =
      https_request(port, files.cert_file, "POST", "/v1/completions", greedy + "}");
  ASSERT_EQ(whole.status, 200) << whole.body;
  const std::vector<std::string> events =
      https_sse_events(port, files.cert_file, "/v1/completions", greedy + R"(, "stream": true})");
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string streamed;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    streamed += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(streamed, json::parse(whole.body)["choices"][0]["text"]);

  const std::vector<std::string> frames = wss_exchange(
      port, files.cert_file,
      R"({"type": "completion", "id": "t", "prompt": "Once", "max_tokens": 3, "ignore_eos": true})");
  ASSERT_FALSE(frames.empty());
  const json done = json::parse(frames.back());
  EXPECT_EQ(done["type"], "done") << frames.back();
  EXPECT_EQ(done["usage"]["completion_tokens"], 3);
  EXPECT_TRUE(server.wait_until_idle());
}

TEST(TlsTest, PlainHttpToTheTlsPortFailsCleanly) {
  const TlsFiles files = make_self_signed(temp_dir("plain"), "server");
  TestServer server(tls_config(files));
  const std::string answer =
      raw_exchange(server.port(), "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  EXPECT_NE(answer.find("HTTPS"), std::string::npos) << answer;
  // Garbage that is not HTTP either, and a client that leaves mid-handshake.
  raw_exchange(server.port(), std::string("\x16\x03\x01\x00\x05hello", 10));
  EXPECT_EQ(https_request(server.port(), files.cert_file, "GET", "/health").status, 200);
}

TEST(TlsTest, ClientRejectsAnUntrustedServer) {
  const TlsFiles files = make_self_signed(temp_dir("untrusted"), "server");
  const TlsFiles other = make_self_signed(temp_dir("untrusted"), "other");
  TestServer server(tls_config(files));
  // The client checks the chain: this is what makes the other tests' passes mean something.
  EXPECT_ANY_THROW(https_request(server.port(), other.cert_file, "GET", "/health"));
  EXPECT_EQ(https_request(server.port(), files.cert_file, "GET", "/health").status, 200);
}

std::string start_error(const HttpServerConfig& config) {
  try {
    TestServer server(config);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(TlsTest, BadFilesStopStartWithAClearError) {
  const std::filesystem::path dir = temp_dir("bad");
  const TlsFiles files = make_self_signed(dir, "server");
  const TlsFiles other = make_self_signed(dir, "other");

  HttpServerConfig missing = tls_config(files);
  missing.tls_cert_file = (dir / "nope.crt").string();
  std::string error = start_error(missing);
  EXPECT_NE(error.find("--ssl-certfile"), std::string::npos) << error;
  EXPECT_NE(error.find("nope.crt"), std::string::npos) << error;

  const std::string not_pem = (dir / "not_pem.crt").string();
  std::ofstream(not_pem) << "hello\n";
  HttpServerConfig garbage = tls_config(files);
  garbage.tls_cert_file = not_pem;
  error = start_error(garbage);
  EXPECT_NE(error.find("--ssl-certfile"), std::string::npos) << error;
  EXPECT_NE(error.find("not a PEM"), std::string::npos) << error;

  HttpServerConfig mismatched = tls_config(files);
  mismatched.tls_key_file = other.key_file;
  error = start_error(mismatched);
  EXPECT_NE(error.find("--ssl-keyfile"), std::string::npos) << error;

  HttpServerConfig half = tls_config(files);
  half.tls_key_file.clear();
  error = start_error(half);
  EXPECT_NE(error.find("both"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagedserve::net::testing
