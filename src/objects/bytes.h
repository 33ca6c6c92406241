// An object's bytes: one allocation, never zero-filled first (a transfer writes every
// byte of it), on transparent huge pages when large, so that filling 1 GiB costs 512
// page faults rather than 262,144. Or, for an object larger than its store keeps in
// memory, a file mapped into memory: the kernel keeps what it can of it in its page
// cache and the disk holds the rest, so that such an object never takes its size of
// the process's own memory.
//
// Thread-safety: immutable once shared as const.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "common/mapped_file.h"
#include "common/status.h"

namespace meridian::objects {

class Bytes {
 public:
  // Uninitialised bytes; the caller writes all of them before sharing. Throws
  // std::bad_alloc when the memory cannot be had: use it for sizes the process chose.
  static std::shared_ptr<Bytes> Allocate(size_t size);
  // The same for a size that came from outside (a peer's announcement): null when the
  // memory cannot be had, never an exception.
  static std::shared_ptr<Bytes> TryAllocate(size_t size) noexcept;
  static std::shared_ptr<Bytes> Copy(std::string_view data);
  // `size` writable bytes in a new file of `dir` that has no name (it is gone with the
  // last reference, or a crash). Its blocks are claimed at once, so that a disk without
  // room is this error (kResourceExhausted, naming `dir`) and never a fault while the
  // bytes are written: only for a `dir` where FilesCanBeClaimedIn.
  static StatusOr<std::shared_ptr<Bytes>> AllocateInFile(size_t size, const std::string& dir);
  // Whether files of `dir` can have their blocks claimed ahead (posix_fallocate): what
  // AllocateInFile needs to be safe on a full disk.
  static bool FilesCanBeClaimedIn(const std::string& dir);
  // The first `size` bytes of the regular file at `path`, read-only (MappedFile): it
  // must not change while mapped (a spill file, which nothing writes once it is whole).
  static StatusOr<std::shared_ptr<Bytes>> MapFile(const std::string& path, size_t size);
  ~Bytes();
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_, size_}; }
  // Mapped from a file (AllocateInFile, MapFile) rather than held in the heap.
  bool in_file() const { return mapped_; }

 private:
  Bytes(char* data, size_t size, bool mapped = false) : data_(data), size_(size), mapped_(mapped) {}
  char* data_;
  size_t size_;
  bool mapped_;
  std::unique_ptr<MappedFile> file_;  // MapFile's; it unmaps
};

}  // namespace meridian::objects
