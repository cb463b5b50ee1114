// The playground page's files (net/ui/web/), embedded in the binary at build time by
// net/ui/embed_assets.cmake (a generated .cpp of byte arrays), so `pagedserve serve` needs no
// files beside it and the page loads nothing from the network. No Asio; any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace pagedserve::net::ui {

struct UiAsset {
  std::string_view name;          // file name in net/ui/web/, e.g. "app.js"
  std::string_view content_type;  // from the extension, e.g. "text/javascript; charset=utf-8"
  std::string_view body;
};

// "/" -> index.html; "/ui/<name>" -> that file; anything else (or a name not embedded): nullopt.
std::optional<UiAsset> find_ui_asset(std::string_view path);

// The Content-Type served for a file name's extension (application/octet-stream if unknown).
std::string_view ui_content_type(std::string_view name);

// Defined in the generated file: every embedded file, sorted by name.
struct EmbeddedFile {
  std::string_view name;
  std::string_view body;
};
extern const EmbeddedFile kEmbeddedUiFiles[];
extern const size_t kNumEmbeddedUiFiles;

}  // namespace pagedserve::net::ui
