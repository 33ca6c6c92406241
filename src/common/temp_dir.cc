#include "common/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace meridian {

StatusOr<std::unique_ptr<TempDir>> TempDir::Make(std::string_view prefix) {
  // mkdtemp replaces the trailing six Xs of its template with a unique name.
  std::string tmpl = fmt::format("/tmp/{}-XXXXXX", prefix);
  if (mkdtemp(tmpl.data()) == nullptr) {
    return UnavailableError(fmt::format("cannot create a directory under /tmp: {}", std::strerror(errno)));
  }
  return std::unique_ptr<TempDir>(new TempDir(std::move(tmpl)));
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace meridian
