// ApiError helpers: OpenAI error bodies and JSON responses (see api_error.h).
#include "net/protocol/api_error.h"

namespace pagedserve::net {

std::string_view error_type_for(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

ApiError invalid_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

ApiError not_found(std::string message, std::string param, std::string code) {
  return ApiError{404, std::move(message), "not_found_error", std::move(param), std::move(code)};
}

ApiError server_error(std::string message, int status, std::string code) {
  return ApiError{status, std::move(message), "server_error", {}, std::move(code)};
}

nlohmann::ordered_json error_json(const ApiError& error) {
  nlohmann::ordered_json out;
  out["message"] = error.message;
  out["type"] = error.type.empty() ? std::string(error_type_for(error.status)) : error.type;
  out["param"] =
      error.param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.param);
  out["code"] = error.code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.code);
  return out;
}

std::string error_body(const ApiError& error) {
  nlohmann::ordered_json body;
  body["error"] = error_json(error);
  return dump_json(body);
}

std::string dump_json(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

HttpResponse json_response(const nlohmann::ordered_json& body, int status) {
  return HttpResponse{status, "application/json", dump_json(body)};
}

HttpResponse error_response(const ApiError& error) {
  return HttpResponse{error.status, "application/json", error_body(error)};
}

}  // namespace pagedserve::net
