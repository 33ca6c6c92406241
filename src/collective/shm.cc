#include "collective/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include <fmt/format.h>

namespace meridian::collective {

// The first page of the mapping; the ring follows it.
struct ShmStream::Header {
  uint64_t magic;
  uint64_t capacity;
  alignas(64) std::atomic<uint64_t> written;  // by the writer, ever
  alignas(64) std::atomic<uint64_t> read;     // by the reader, ever
};

namespace {

constexpr uint64_t kMagic = 0x474E495231434D52;  // "MRC1RING"
constexpr size_t kHeaderBytes = 4096;
constexpr int kSpins = 256;  // polls before blocking on the socket
static_assert(std::atomic<uint64_t>::is_always_lock_free, "positions shared between processes");

std::string Errno(std::string_view what) { return fmt::format("{}: {}", what, std::strerror(errno)); }

void Relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Copies between the caller's memory and the ring at `position`, wrapping.
void CopyIn(std::byte* ring, size_t capacity, uint64_t position, const std::byte* from, size_t n) {
  const size_t at = static_cast<size_t>(position % capacity);
  const size_t first = std::min(n, capacity - at);
  std::memcpy(ring + at, from, first);
  std::memcpy(ring, from + first, n - first);
}
void CopyOut(const std::byte* ring, size_t capacity, uint64_t position, std::byte* to, size_t n) {
  const size_t at = static_cast<size_t>(position % capacity);
  const size_t first = std::min(n, capacity - at);
  std::memcpy(to, ring + at, first);
  std::memcpy(to + first, ring, n - first);
}

}  // namespace

ShmStream::ShmStream(std::unique_ptr<TcpStream> socket, void* mapping, size_t capacity, bool writer)
    : socket_(std::move(socket)),
      mapping_(mapping),
      capacity_(capacity),
      writer_(writer),
      header_(static_cast<Header*>(mapping)),
      ring_(static_cast<std::byte*>(mapping) + kHeaderBytes) {}

ShmStream::~ShmStream() { munmap(mapping_, kHeaderBytes + capacity_); }

StatusOr<std::unique_ptr<ShmStream>> ShmStream::Offer(std::unique_ptr<TcpStream> socket, size_t capacity) {
  if (capacity < 4096 || capacity > (size_t{1} << 30)) return InvalidArgumentError("a ring has 4 KiB to 1 GiB");
  const int fd = memfd_create("meridian-collective", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return UnavailableError(Errno("memfd_create"));
  void* mapping = MAP_FAILED;
  Status s;
  if (ftruncate(fd, static_cast<off_t>(kHeaderBytes + capacity)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    s = UnavailableError(Errno("sizing the shared ring"));
  } else if ((mapping = mmap(nullptr, kHeaderBytes + capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
             MAP_FAILED) {
    s = UnavailableError(Errno("mapping the shared ring"));
  } else {
    new (mapping) Header{kMagic, capacity, {0}, {0}};
    // The descriptor, with one byte to carry it.
    const char byte = 'R';
    const ssize_t n = SendWithDescriptors(socket->fd(), &byte, 1, std::span<const int>(&fd, 1));
    if (n != 1) s = UnavailableError(Errno("handing over the shared ring"));
  }
  close(fd);  // the mapping (and the peer's descriptor) keep it
  if (!s.ok()) {
    if (mapping != MAP_FAILED) munmap(mapping, kHeaderBytes + capacity);
    return s;
  }
  return std::unique_ptr<ShmStream>(new ShmStream(std::move(socket), mapping, capacity, true));
}

StatusOr<std::unique_ptr<ShmStream>> ShmStream::Take(std::unique_ptr<TcpStream> socket, size_t capacity) {
  if (capacity < 4096 || capacity > (size_t{1} << 30)) return InvalidArgumentError("a ring has 4 KiB to 1 GiB");
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(socket->fd(), &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return UnavailableError(Errno("receiving the shared ring"));
  if (n == 0) return UnavailableError("the peer closed before handing over its shared ring");
  // Every descriptor that came is closed unless it is the one ring we expect.
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.push_back(fd);
    }
  }
  auto refuse = [&](std::string why) {
    for (int fd : fds) close(fd);
    return DataLossError("the peer's shared ring is refused: " + why);
  };
  if (byte != 'R' || fds.size() != 1 || (msg.msg_flags & MSG_CTRUNC) != 0) {
    return refuse(fmt::format("expected one descriptor, got {}", fds.size()));
  }
  const int fd = fds.front();
  struct stat st{};
  const int seals = fcntl(fd, F_GET_SEALS);
  const int need = F_SEAL_SHRINK | F_SEAL_GROW;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) != kHeaderBytes + capacity) {
    return refuse(fmt::format("not a ring of {} bytes", kHeaderBytes + capacity));
  }
  if (seals < 0 || (seals & need) != need) return refuse("not sealed against resizing");
  void* mapping = mmap(nullptr, kHeaderBytes + capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  fds.clear();
  if (mapping == MAP_FAILED) return UnavailableError(Errno("mapping the peer's shared ring"));
  const auto* h = static_cast<const Header*>(mapping);
  if (h->magic != kMagic || h->capacity != capacity) {
    munmap(mapping, kHeaderBytes + capacity);
    return DataLossError("the peer's shared ring is refused: its header is not a ring's");
  }
  return std::unique_ptr<ShmStream>(new ShmStream(std::move(socket), mapping, capacity, false));
}

void ShmStream::Shutdown() {
  shut_.store(true);
  socket_->Shutdown();
}

void ShmStream::Wake() {
  const char byte = 'w';
  // A full socket buffer holds wake-ups already: dropping this one loses nothing.
  (void)send(socket_->fd(), &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

template <typename Done>
Status ShmStream::Wait(Done&& done) {
  for (int i = 0; i < kSpins; ++i) {
    if (shut_.load(std::memory_order_relaxed)) return UnavailableError("the shared-memory stream was shut");
    if (done()) return OkStatus();
    Relax();
  }
  char bytes[256];
  for (;;) {
    if (done()) return OkStatus();
    const ssize_t n = recv(socket_->fd(), bytes, sizeof(bytes), 0);
    if (n > 0) continue;
    // A peer that closes with our wake-ups unread resets the socket: closed all the same.
    if (n == 0 || shut_.load() || errno == ECONNRESET) return UnavailableError("the shared-memory peer closed its end");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return UnavailableError("the shared-memory peer is silent: timed out");
    return UnavailableError(Errno("waiting on the shared-memory peer"));
  }
}

StatusOr<uint64_t> ShmStream::Ready() {
  Status corrupt;
  uint64_t ready = 0;
  auto check = [&] {
    // The peer's position: the reader never ahead of the writer, nor a ring behind.
    const uint64_t theirs = (writer_ ? header_->read : header_->written).load(std::memory_order_acquire);
    const uint64_t apart = writer_ ? position_ - theirs : theirs - position_;
    if ((writer_ ? theirs > position_ : theirs < position_) || apart > capacity_) {
      corrupt = DataLossError(fmt::format("the shared ring's {} position is corrupt", writer_ ? "read" : "write"));
      return true;
    }
    ready = writer_ ? capacity_ - apart : apart;
    return ready > 0;
  };
  if (!check()) {
    Wake();  // what we did: the peer's wait for it ends
    MERIDIAN_RETURN_IF_ERROR(Wait(check));
  }
  if (!corrupt.ok()) return corrupt;
  return ready;
}

Status ShmStream::WriteAll(std::span<const iovec> buffers) {
  if (!writer_) return FailedPreconditionError("the reading end of a shared ring cannot write");
  for (const iovec& b : buffers) {
    const auto* from = static_cast<const std::byte*>(b.iov_base);
    for (size_t left = b.iov_len; left > 0;) {
      MERIDIAN_ASSIGN_OR_RETURN(const uint64_t room, Ready());
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, room));
      CopyIn(ring_, capacity_, position_, from, n);
      position_ += n;
      header_->written.store(position_, std::memory_order_release);
      from += n;
      left -= n;
    }
  }
  Wake();
  return shut_.load() ? UnavailableError("the shared-memory stream was shut") : OkStatus();
}

Status ShmStream::ReadExact(void* data, size_t size) {
  if (writer_) return FailedPreconditionError("the writing end of a shared ring cannot read");
  auto* to = static_cast<std::byte*>(data);
  while (size > 0) {
    MERIDIAN_ASSIGN_OR_RETURN(const uint64_t ready, Ready());
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size, ready));
    CopyOut(ring_, capacity_, position_, to, n);
    position_ += n;
    header_->read.store(position_, std::memory_order_release);
    to += n;
    size -= n;
  }
  Wake();
  return OkStatus();
}

}  // namespace meridian::collective
