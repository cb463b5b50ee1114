// Lookup of the embedded playground files (see ui_assets.h).
#include "net/ui/ui_assets.h"

namespace pagedserve::net::ui {

std::string_view ui_content_type(std::string_view name) {
  struct Type {
    std::string_view extension;
    std::string_view content_type;
  };
  static constexpr Type kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".json", "application/json"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
  };
  for (const Type& type : kTypes) {
    if (name.ends_with(type.extension)) return type.content_type;
  }
  return "application/octet-stream";
}

std::optional<UiAsset> find_ui_asset(std::string_view path) {
  constexpr std::string_view kPrefix = "/ui/";
  std::string_view name;
  if (path == "/") {
    name = "index.html";
  } else if (path.starts_with(kPrefix)) {
    name = path.substr(kPrefix.size());
  } else {
    return std::nullopt;
  }
  for (size_t i = 0; i < kNumEmbeddedUiFiles; ++i) {
    if (kEmbeddedUiFiles[i].name == name) {
      return UiAsset{name, ui_content_type(name), kEmbeddedUiFiles[i].body};
    }
  }
  return std::nullopt;
}

}  // namespace pagedserve::net::ui
