// HTTP transport of the load generator (Beast): one connection per streamed request, the
// response body read incrementally (response_parser + buffer_body) so that each SSE chunk
// is timed when its bytes arrive; and the blocking fetch used for set-up calls.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "tools/loadgen/client_internal.h"
#include "tools/loadgen/connect.h"

namespace pagedserve::loadgen {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace detail {

constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

http::request<http::string_body> make_request(const BaseUrl& url, const std::string& path,
                                              const std::string& body, const std::string& api_key) {
  http::request<http::string_body> req{body.empty() ? http::verb::get : http::verb::post,
                                       url.path_prefix + path, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::user_agent, "pagedserve-bench");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  return req;
}

// Streams one request; always finishes `record` (ok or with an error) before returning it.
asio::awaitable<RequestRecord> stream_request(RunContext& ctx, const OutgoingRequest& request,
                                              RequestRecord record) {
  const std::string path = request.chat ? "/v1/chat/completions" : "/v1/completions";
  const auto expiry = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(ctx.options.request_timeout_s));
  // Not `stream(co_await ...)`: GCC 12 miscompiles a co_await inside a coroutine local's
  // constructor arguments (the object ends up corrupt in Debug builds).
  const auto executor = co_await asio::this_coro::executor;
  beast::tcp_stream stream(executor);
  const auto fail = [&](const std::string& reason) {
    record.ok = false;
    record.error = reason;
    record.end_s = ctx.now_s();
    return record;
  };
  // Results of co_await land in these, declared once: GCC 12 mishandles structured bindings
  // initialised by co_await (in if-statements and loops), corrupting the frame in Debug.
  beast::error_code ec;
  size_t n = 0;
  stream.expires_after(expiry);
  ec = co_await connect_first(stream, ctx.endpoints);
  if (ec) co_return fail("connect: " + ec.message());
  auto req = make_request(ctx.url, path, http_body(request), ctx.options.api_key);
  stream.expires_after(expiry);
  std::tie(ec, n) = co_await http::async_write(stream, req, kTuple);
  if (ec) co_return fail("write: " + ec.message());
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  stream.expires_after(expiry);
  std::tie(ec, n) = co_await http::async_read_header(stream, buffer, parser, kTuple);
  if (ec) co_return fail("read: " + ec.message());
  const int status = static_cast<int>(parser.get().result_int());
  SseSplitter splitter;
  std::string error_body;
  std::optional<std::string> server_error;
  std::optional<int64_t> usage_completion;
  bool saw_done = false;
  std::vector<char> chunk(16384);  // on the heap: a large array in the coroutine frame
                                   // is where GCC 12 Debug frames went wrong
  while (!parser.is_done() && !saw_done) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    stream.expires_after(expiry);
    std::tie(ec, n) = co_await http::async_read_some(stream, buffer, parser, kTuple);
    if (ec && ec != http::error::need_buffer) co_return fail("read: " + ec.message());
    const double now = ctx.now_s();
    const size_t got = chunk.size() - parser.get().body().size;
    if (status != 200) {
      error_body.append(chunk.data(), got);
      continue;
    }
    for (const std::string& event : splitter.feed(chunk.data(), got)) {
      const ChunkInfo info = read_sse_chunk(event);
      if (info.error && !server_error) server_error = *info.error;
      if (info.has_output) {
        record.chunk_s.push_back(now);
        ctx.tokens_received += std::max<int64_t>(1, info.output_tokens);
      }
      if (info.usage_completion_tokens) usage_completion = info.usage_completion_tokens;
      if (info.usage_prompt_tokens && record.prompt_tokens == 0) {
        record.prompt_tokens = *info.usage_prompt_tokens;
      }
      saw_done |= info.done;
    }
  }
  record.end_s = ctx.now_s();
  beast::error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  if (status != 200) co_return fail(http_error_reason(status, error_body));
  if (server_error) co_return fail("server: " + *server_error);
  if (!saw_done) co_return fail("stream ended without [DONE]");
  record.output_tokens = usage_completion.value_or(static_cast<int64_t>(record.chunk_s.size()));
  record.ok = true;
  co_return record;
}

void start_http_request(RunContext& ctx, const OutgoingRequest& request, RequestRecord record,
                        DoneHandler done) {
  const int64_t index = record.index;
  asio::co_spawn(ctx.io, stream_request(ctx, request, std::move(record)),
                 [done = std::move(done), index, &ctx](std::exception_ptr e, RequestRecord r) {
                   if (e) {
                     r = RequestRecord{};
                     r.index = index;
                     r.end_s = ctx.now_s();
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::exception& ex) {
                       r.error = std::string("client: ") + ex.what();
                     }
                   }
                   done(std::move(r));
                 });
}

}  // namespace detail

namespace {
asio::awaitable<HttpReply> fetch(BaseUrl url, std::string path, std::string body,
                                 std::string api_key, double timeout_s) {
  HttpReply reply;
  const auto executor = co_await asio::this_coro::executor;
  asio::ip::tcp::resolver resolver(executor);
  beast::tcp_stream stream(executor);
  stream.expires_after(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3)));
  auto [ec, endpoints] = co_await resolver.async_resolve(url.host, url.port, detail::kTuple);
  if (!ec) ec = co_await detail::connect_first(stream, endpoints);
  auto req = detail::make_request(url, path, body, api_key);
  if (!ec) std::tie(ec, std::ignore) = co_await http::async_write(stream, req, detail::kTuple);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  if (!ec) {
    std::tie(ec, std::ignore) = co_await http::async_read(stream, buffer, response, detail::kTuple);
  }
  if (ec) {
    reply.error = ec.message();
  } else {
    reply.status = static_cast<int>(response.result_int());
    reply.body = std::move(response.body());
  }
  co_return reply;
}
}  // namespace

HttpReply http_fetch(const std::string& base_url, const std::string& path, const std::string& body,
                     const std::string& api_key, double timeout_s) {
  HttpReply reply;
  try {
    asio::io_context io;
    asio::co_spawn(io, fetch(parse_base_url(base_url), path, body, api_key, timeout_s),
                   [&reply](std::exception_ptr e, HttpReply r) {
                     if (e) {
                       reply.error = "client error";
                     } else {
                       reply = std::move(r);
                     }
                   });
    io.run();
  } catch (const std::exception& e) {
    reply.error = e.what();
  }
  return reply;
}

}  // namespace pagedserve::loadgen
