// Fuzzes raw HTTP/1.1 request bytes through the server's request path: Beast's request parser
// (as http_session.cpp configures it: 4 MiB body limit), then route_request, which parses
// completions, chat, tokenize and detokenize bodies in the protocol layer.
//
// Checks: nothing in net/ throws (the protocol layer returns errors as values); every JSON
// answer parses and errors carry a message; an accepted generation request is runnable
// (check_generation_request); with an API key set, exactly the requests whose Authorization
// header is "Bearer <key>" (scheme in any case), whose X-Api-Key header is the key, or whose
// path is /health or /metrics get past authentication, computed here independently of
// is_authorized.
#include <strings.h>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <cstddef>
#include <cstdint>

#include "net/server/router.h"
#include "tests/fuzz/served_models.h"

namespace http = boost::beast::http;
using namespace pagedserve;

namespace {

constexpr std::string_view kApiKey = "sk-fuzz";

bool expect_authorized(std::string_view path, std::string_view authorization,
                       std::string_view x_api_key) {
  if (path == "/health" || path == "/metrics" || x_api_key == kApiKey) return true;
  return authorization.size() == 7 + kApiKey.size() &&
         strncasecmp(authorization.data(), "bearer ", 7) == 0 && authorization.substr(7) == kApiKey;
}

void check_route(const net::Route& route, const net::ServedModel& served) {
  if (const auto* response = std::get_if<net::HttpResponse>(&route)) {
    fuzz::check_response(*response);
  } else if (const auto* generate = std::get_if<net::RouteGenerate>(&route)) {
    fuzz::check_generation_request(generate->request, served);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::stories_model();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  http::request_parser<http::string_body> parser;
  parser.body_limit(4 << 20);
  parser.header_limit(16 * 1024);
  parser.eager(true);  // the body too, not only the header
  boost::system::error_code ec;
  size_t used = 0;
  while (!parser.is_done()) {
    const size_t consumed = parser.put(boost::asio::buffer(data + used, size - used), ec);
    used += consumed;
    if (ec != http::error::need_more) break;
    ec = {};
    if (used == size) {
      // The client closed after its bytes (Beast's precondition: some were parsed).
      if (parser.got_some()) parser.put_eof(ec);
      break;
    }
    if (consumed == 0) break;  // wants bytes it was given: as the session, give up
  }
  if (ec || !parser.is_done()) return 0;  // the session answers 400 (bad_http_error)

  const http::request<http::string_body>& req = parser.get();
  const std::string_view authorization = req[http::field::authorization];
  net::RouteInput input;
  input.method = req.method_string();
  input.target = req.target();
  input.authorization = authorization;
  input.x_api_key = req["X-Api-Key"];
  input.origin = req[http::field::origin];
  input.body = req.body();
  input.websocket_upgrade = boost::beast::websocket::is_upgrade(req);

  const net::ServedModel& served = fuzz::stories_model();
  check_route(net::route_request(input, served, net::AccessPolicy{}), served);

  const std::string_view path = input.target.substr(0, input.target.find('?'));
  if (!expect_authorized(path, authorization, input.x_api_key)) {
    const net::AccessPolicy keyed_access{{std::string(kApiKey)}, {}};
    const net::Route keyed = net::route_request(input, served, keyed_access);
    const auto* response = std::get_if<net::HttpResponse>(&keyed);
    FUZZ_CHECK(response && response->status == 401,
               "unauthorized request to " + std::string(path) + " was not refused");
    check_route(keyed, served);
  }
  return 0;
}
