// The playground's routing as pure functions: the embedded page (GET / and /ui/*, open without
// a key, off with --no-ui), and the WebSocket upgrade's key carried as a subprotocol (a
// browser cannot set headers on a WebSocket).
#include <gtest/gtest.h>

#include "net/server/router.h"
#include "net/ui/ui_assets.h"
#include "tests/net/protocol/protocol_fixtures.h"

namespace pagedserve::net {
namespace {

using testing::stories_model;

RouteInput get(std::string_view target, bool upgrade = false) {
  RouteInput input;
  input.method = "GET";
  input.target = target;
  input.websocket_upgrade = upgrade;
  return input;
}

int status_of(const Route& route) {
  if (const auto* response = std::get_if<HttpResponse>(&route)) return response->status;
  return std::holds_alternative<RouteWebSocket>(route) ? 101 : 0;
}

TEST(PlaygroundRouterTest, ServesTheEmbeddedPageWithoutAKey) {
  const AccessPolicy access{{"k1"}, {}, /*open_ui=*/true};
  const Route page = route_request(get("/"), stories_model(), access);
  ASSERT_TRUE(std::holds_alternative<HttpResponse>(page));
  const HttpResponse& html = std::get<HttpResponse>(page);
  EXPECT_EQ(html.status, 200);
  EXPECT_EQ(html.content_type, "text/html; charset=utf-8");
  EXPECT_NE(html.body.find("<title>pagedserve playground</title>"), std::string::npos);
  // Every script and stylesheet the page names is embedded, with its type.
  for (const auto& [path, type] :
       std::vector<std::pair<std::string, std::string>>{{"/ui/app.js", "text/javascript"},
                                                        {"/ui/kvmap.js", "text/javascript"},
                                                        {"/ui/gauges.js", "text/javascript"},
                                                        {"/ui/style.css", "text/css"}}) {
    const Route asset = route_request(get(path), stories_model(), access);
    ASSERT_EQ(status_of(asset), 200) << path;
    EXPECT_TRUE(std::get<HttpResponse>(asset).content_type.starts_with(type)) << path;
    EXPECT_FALSE(std::get<HttpResponse>(asset).body.empty()) << path;
  }
  // The query string is ignored; unknown files, other methods and the API stay as before.
  EXPECT_EQ(status_of(route_request(get("/?x=1"), stories_model(), access)), 200);
  EXPECT_EQ(status_of(route_request(get("/ui/missing.js"), stories_model(), access)), 401);
  EXPECT_EQ(status_of(route_request(get("/v1/models"), stories_model(), access)), 401);
  RouteInput post = get("/");
  post.method = "POST";
  EXPECT_EQ(status_of(route_request(post, stories_model(), access)), 401);
}

TEST(PlaygroundRouterTest, NoUiMeansNotFound) {
  const AccessPolicy access{{}, {}, /*open_ui=*/false};
  EXPECT_EQ(status_of(route_request(get("/"), stories_model(), access)), 404);
  EXPECT_EQ(status_of(route_request(get("/ui/app.js"), stories_model(), access)), 404);
}

TEST(PlaygroundRouterTest, EmbeddedFilesMatchTheLookup) {
  ASSERT_GT(ui::kNumEmbeddedUiFiles, 0u);
  for (size_t i = 0; i < ui::kNumEmbeddedUiFiles; ++i) {
    const auto& file = ui::kEmbeddedUiFiles[i];
    const std::optional<ui::UiAsset> asset = ui::find_ui_asset("/ui/" + std::string(file.name));
    ASSERT_TRUE(asset) << file.name;
    EXPECT_EQ(asset->body, file.body);
  }
  EXPECT_FALSE(ui::find_ui_asset("/ui/"));
  EXPECT_FALSE(ui::find_ui_asset("/ui/../CMakeLists.txt"));
  EXPECT_FALSE(ui::find_ui_asset("/index.html"));
  EXPECT_EQ(ui::ui_content_type("a.svg"), "image/svg+xml");
  EXPECT_EQ(ui::ui_content_type("a.bin"), "application/octet-stream");
}

TEST(PlaygroundRouterTest, SubprotocolListsAndKeys) {
  EXPECT_TRUE(offers_websocket_protocol("pagedserve", "pagedserve"));
  EXPECT_TRUE(offers_websocket_protocol("chat, pagedserve ,x", "pagedserve"));
  EXPECT_FALSE(offers_websocket_protocol("pagedservex, pagedserve.key.YQ", "pagedserve"));
  EXPECT_FALSE(offers_websocket_protocol("", "pagedserve"));
  // base64url of "k1" is "azE"; of "sk-ü?>" (UTF-8) "c2stw7w_Pg".
  EXPECT_EQ(websocket_protocol_key("pagedserve, pagedserve.key.azE"), "k1");
  EXPECT_EQ(websocket_protocol_key("pagedserve.key.c2stw7w_Pg,pagedserve"), "sk-\xc3\xbc?>");
  EXPECT_FALSE(websocket_protocol_key("pagedserve"));
  EXPECT_FALSE(websocket_protocol_key("pagedserve.key."));
  EXPECT_FALSE(websocket_protocol_key("pagedserve.key.a+b/"));  // base64, not base64url
}

TEST(PlaygroundRouterTest, WebSocketKeyAsSubprotocol) {
  const AccessPolicy access{{"k1", "other"}, {}, true};
  RouteInput upgrade = get("/v1/stream", true);
  EXPECT_EQ(status_of(route_request(upgrade, stories_model(), access)), 401);
  upgrade.websocket_protocols = "pagedserve, pagedserve.key.azE";  // "k1"
  EXPECT_EQ(status_of(route_request(upgrade, stories_model(), access)), 101);
  upgrade.websocket_protocols = "pagedserve, pagedserve.key.azI";  // "k2"
  EXPECT_EQ(status_of(route_request(upgrade, stories_model(), access)), 401);
  // Only the WebSocket path takes it: HTTP requests send a header.
  RouteInput models = get("/v1/models");
  models.websocket_protocols = "pagedserve.key.azE";
  EXPECT_EQ(status_of(route_request(models, stories_model(), access)), 401);
}

}  // namespace
}  // namespace pagedserve::net
