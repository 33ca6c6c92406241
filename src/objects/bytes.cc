#include "objects/bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "common/mapped_file.h"
#include "common/units.h"

namespace meridian::objects {
namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

std::shared_ptr<Bytes> Bytes::Allocate(size_t size) {
  void* p = nullptr;
  if (size >= kHugePage) {
    const size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
    if (posix_memalign(&p, kHugePage, rounded) != 0) throw std::bad_alloc();
    madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without huge pages, plain pages
  } else {
    p = std::malloc(size == 0 ? 1 : size);
    if (p == nullptr) throw std::bad_alloc();
  }
  return std::shared_ptr<Bytes>(new Bytes(static_cast<char*>(p), size));
}

std::shared_ptr<Bytes> Bytes::TryAllocate(size_t size) noexcept {
  try {
    return Allocate(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

std::shared_ptr<Bytes> Bytes::Copy(std::string_view data) {
  std::shared_ptr<Bytes> b = Allocate(data.size());
  if (!data.empty()) std::memcpy(b->data(), data.data(), data.size());
  return b;
}

namespace {

// A new file in `dir` without a name, open for reading and writing; -1 with errno set.
int OpenNamelessFile(const std::string& dir) {
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  // A file system without O_TMPFILE: a named file, unlinked at once.
  std::string path = dir + "/arriving-XXXXXX";
  fd = mkostemp(path.data(), O_CLOEXEC);
  if (fd >= 0) unlink(path.c_str());
  return fd;
}

}  // namespace

bool Bytes::FilesCanBeClaimedIn(const std::string& dir) {
  const int fd = OpenNamelessFile(dir);
  if (fd < 0) return false;
  const bool claimed = posix_fallocate(fd, 0, 1) == 0;
  close(fd);
  return claimed;
}

StatusOr<std::shared_ptr<Bytes>> Bytes::AllocateInFile(size_t size, const std::string& dir) {
  if (size == 0) return Allocate(0);  // nothing to map
  const std::string what = fmt::format("a file in {}", dir);
  const int fd = OpenNamelessFile(dir);
  if (fd < 0) return ResourceExhaustedError(fmt::format("cannot make {}: {}", what, std::strerror(errno)));
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
    close(fd);
    return ResourceExhaustedError(fmt::format("cannot claim {} for {}: {}", FormatBytes(static_cast<int64_t>(size)),
                                              what, std::strerror(err)));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) {
    return ResourceExhaustedError(
        fmt::format("cannot map {} of {}: {}", FormatBytes(static_cast<int64_t>(size)), what, std::strerror(err)));
  }
  return std::shared_ptr<Bytes>(new Bytes(static_cast<char*>(p), size, true));
}

StatusOr<std::shared_ptr<Bytes>> Bytes::MapFile(const std::string& path, size_t size) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  if (file->size() < static_cast<int64_t>(size)) {
    return DataLossError(fmt::format("{} holds fewer than the {} expected", path, FormatBytes(static_cast<int64_t>(size))));
  }
  char* p = const_cast<char*>(file->data().data());
  std::shared_ptr<Bytes> b(new Bytes(p, size, true));
  b->file_ = std::move(file);
  return b;
}

Bytes::~Bytes() {
  if (file_) return;  // MappedFile unmaps it
  if (mapped_) {
    munmap(data_, size_);
  } else {
    std::free(data_);
  }
}

}  // namespace meridian::objects
