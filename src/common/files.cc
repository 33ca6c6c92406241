#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "common/net.h"
#include "common/units.h"

namespace meridian {

namespace {

// Writes `data` to `fd` and closes it, every write and the close checked.
Status WriteAndClose(int fd, const std::filesystem::path& path, std::string_view data) {
  const bool written = WriteAll(fd, data);
  const int write_errno = errno;
  const bool closed = close(fd) == 0;
  if (!written || !closed) {
    return UnavailableError(fmt::format("cannot write {} to {}: {}", FormatBytes(static_cast<int64_t>(data.size())),
                                        path.string(), std::strerror(written ? errno : write_errno)));
  }
  return OkStatus();
}

}  // namespace

Status WriteFileWhole(const std::filesystem::path& path, std::string_view data, mode_t mode) {
  // O_TRUNC keeps an existing file's mode: it is removed first, so `mode` holds.
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return UnavailableError(fmt::format("cannot create {}: {}", path.string(), std::strerror(errno)));
  return WriteAndClose(fd, path, data);
}

Status WriteOutputFile(const std::filesystem::path& path, std::string_view data) {
  struct stat st = {};
  if (stat(path.c_str(), &st) != 0) {
    struct stat link = {};
    if (errno == ENOENT && lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      std::error_code ec;
      const std::filesystem::path to = std::filesystem::read_symlink(path, ec);
      return InvalidArgumentError(fmt::format("{}: a link to {}, which does not exist; not written through it",
                                              path.string(), to.string()));
    }
    return WriteFileAtomically(path, data);  // nothing there yet
  }
  if (S_ISDIR(st.st_mode)) return InvalidArgumentError(fmt::format("{}: a directory, not a file", path.string()));
  if (!S_ISREG(st.st_mode)) {
    const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return UnavailableError(fmt::format("cannot open {}: {}", path.string(), std::strerror(errno)));
    return WriteAndClose(fd, path, data);
  }
  std::error_code ec;
  const std::filesystem::path target = std::filesystem::is_symlink(path, ec) ? std::filesystem::canonical(path, ec) : path;
  if (ec) return UnavailableError(fmt::format("cannot follow {}: {}", path.string(), ec.message()));
  return WriteFileAtomically(target, data, st.st_mode & 07777);
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view data, mode_t mode) {
  return WriteFilesTogether({{path, data, mode}});
}

Status WriteFilesTogether(const std::vector<FileToWrite>& files) {
  std::vector<std::filesystem::path> written;
  auto remove_written = [&] {
    for (const std::filesystem::path& tmp : written) unlink(tmp.c_str());
  };
  for (const FileToWrite& f : files) {
    std::filesystem::path tmp = f.path;
    tmp += ".tmp";
    if (Status s = WriteFileWhole(tmp, f.data, f.mode); !s.ok()) {
      unlink(tmp.c_str());
      remove_written();
      return s;
    }
    written.push_back(std::move(tmp));
  }
  // A rename within a directory takes no room: past the writes, nothing fails for a
  // full disk.
  for (size_t i = 0; i < files.size(); ++i) {
    if (rename(written[i].c_str(), files[i].path.c_str()) != 0) {
      const int err = errno;
      written.erase(written.begin(), written.begin() + static_cast<std::ptrdiff_t>(i));
      remove_written();
      return UnavailableError(fmt::format("cannot write {}: {}", files[i].path.string(), std::strerror(err)));
    }
  }
  return OkStatus();
}

}  // namespace meridian
