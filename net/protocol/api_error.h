// ApiError: every failure of the protocol layer as a value (an HTTP status plus OpenAI's error
// fields), the OpenAI error body `{"error":{"message","type","param","code"}}`, the
// HttpResponse value the pure endpoint functions return, and Result<T>, the value-or-ApiError
// every parse function returns (nothing in net/protocol throws out of a parse function).
//
//   ApiError                 status + message/type/param/code
//   error_json(e)            {"message","type","param","code"} (param/code null when empty)
//   error_body(e)            {"error": error_json(e)} as text
//   error_response(e)        HttpResponse{e.status, "application/json", error_body(e)}
//   invalid_request(m, p)    400 naming param p; not_found(m) 404; server_error(m, s) 5xx
//   Result<T>                holds a T or an ApiError
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

namespace pagedserve::net {

struct ApiError {
  int status = 400;     // HTTP status code
  std::string message;  // human-readable; names the offending field where there is one
  std::string type;     // OpenAI error type; empty: derived from status (error_type_for)
  std::string param;    // the request field at fault, e.g. "max_tokens"; empty -> null
  std::string code;     // machine-readable code, e.g. "context_length_exceeded"; empty -> null
};

// OpenAI's type for a status: 400 (and other 4xx) "invalid_request_error", 401
// "authentication_error", 403 "permission_error", 404 "not_found_error", 429
// "rate_limit_error", 5xx "server_error".
std::string_view error_type_for(int status);

ApiError invalid_request(std::string message, std::string param = {}, std::string code = {});
ApiError not_found(std::string message, std::string param = {}, std::string code = {});
ApiError server_error(std::string message, int status = 500, std::string code = {});

nlohmann::ordered_json error_json(const ApiError& error);
std::string error_body(const ApiError& error);

// A complete HTTP answer from a pure endpoint function; the transport adds the headers it owns
// (Server, Content-Length, keep-alive).
struct HttpResponse {
  int status = 200;                               // HTTP status code
  std::string content_type = "application/json";  // empty: send no Content-Type (e.g. /health)
  std::string body;                               // the full body
};

HttpResponse json_response(const nlohmann::ordered_json& body, int status = 200);
HttpResponse error_response(const ApiError& error);

// Serializes without ever throwing: invalid UTF-8 (which the parsers never let in) would be
// replaced by U+FFFD rather than raise nlohmann's type_error 316.
std::string dump_json(const nlohmann::ordered_json& value);

// A T or the ApiError that prevented it.
template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(ApiError error) : value_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return value_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(value_); }
  const T& value() const { return std::get<0>(value_); }
  const ApiError& error() const { return std::get<1>(value_); }

 private:
  std::variant<T, ApiError> value_;
};

}  // namespace pagedserve::net
