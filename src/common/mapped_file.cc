#include "common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace meridian {

StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  // O_NONBLOCK: a FIFO's open would wait for a writer, maybe forever, before it could
  // be told apart from a file (a regular file's reads do not heed the flag).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError(fmt::format("{}: no such file", path));
    return UnavailableError(fmt::format("{}: cannot open it: {}", path, std::strerror(errno)));
  }
  struct stat st = {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return InvalidArgumentError(fmt::format("{}: {}", path, S_ISDIR(st.st_mode) ? "a directory, not a file" : "not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* addr = nullptr;
  if (size > 0) {
    addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      close(fd);
      return UnavailableError(fmt::format("{}: cannot map it: {}", path, std::strerror(err)));
    }
  }
  close(fd);  // the mapping keeps the file
  return std::unique_ptr<MappedFile>(new MappedFile(addr, size));
}

MappedFile::~MappedFile() {
  if (addr_ != nullptr) munmap(addr_, size_);
}

}  // namespace meridian
