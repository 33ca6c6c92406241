#include "common/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "common/net.h"
#include "common/units.h"

namespace meridian {

Status WriteFileWhole(const std::filesystem::path& path, std::string_view data, mode_t mode) {
  // O_TRUNC keeps an existing file's mode: it is removed first, so `mode` holds.
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return UnavailableError(fmt::format("cannot create {}: {}", path.string(), std::strerror(errno)));
  const bool written = WriteAll(fd, data);
  const int write_errno = errno;
  const bool closed = close(fd) == 0;
  if (!written || !closed) {
    return UnavailableError(fmt::format("cannot write {} to {}: {}", FormatBytes(static_cast<int64_t>(data.size())),
                                        path.string(), std::strerror(written ? errno : write_errno)));
  }
  return OkStatus();
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view data, mode_t mode) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  if (Status s = WriteFileWhole(tmp, data, mode); !s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return UnavailableError(fmt::format("cannot write {}: {}", path.string(), std::strerror(err)));
  }
  return OkStatus();
}

}  // namespace meridian
