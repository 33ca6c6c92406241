// Shared memory between two ranks on one host: a one-way byte stream through a ring
// in a sealed memfd, set up over an authenticated local socket that stays open beside
// it to wake the other end and to tell when it is gone.
//
// The writer creates the ring (memfd_create, sized, then sealed against shrinking and
// growing) and hands the descriptor to the reader over the socket (SCM_RIGHTS). The
// reader maps it only if it is a sealed regular file of exactly the agreed size, so a
// peer can never make it touch memory beyond the mapping. Each end keeps its own
// position privately and only publishes it: a peer that scribbles on the shared
// positions can make the other end read nonsense, which is refused as kDataLoss, but
// never read or write outside the ring.
//
// Waking: after publishing, an end sends one byte on the socket without blocking (a
// full socket buffer means bytes are pending already); an end that finds nothing to
// do spins briefly, then blocks reading the socket, so no wake-up is lost. The
// socket's timeout bounds every wait; its close (the peer exited, or Shutdown) fails
// the wait at once.
//
// Thread-safety: one thread reads (or writes) at a time; Shutdown from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/net.h"
#include "common/status.h"

namespace meridian::collective {

// The ring's size: frames stream through it, so it need not hold a whole one.
inline constexpr size_t kShmRingBytes = size_t{4} << 20;

class ShmStream final : public ByteStream {
 public:
  // The writing end: creates a ring of `capacity` bytes and hands it to the peer at
  // the other end of `socket`.
  static StatusOr<std::unique_ptr<ShmStream>> Offer(std::unique_ptr<TcpStream> socket, size_t capacity);
  // The reading end: receives the peer's ring (within the socket's timeout) and
  // checks it is a sealed memfd of `capacity` bytes (and its header) before mapping it.
  static StatusOr<std::unique_ptr<ShmStream>> Take(std::unique_ptr<TcpStream> socket, size_t capacity);
  ~ShmStream() override;
  ShmStream(const ShmStream&) = delete;
  ShmStream& operator=(const ShmStream&) = delete;

  using ByteStream::WriteAll;
  // The writing end only.
  Status WriteAll(std::span<const iovec> buffers) override;
  // The reading end only.
  Status ReadExact(void* data, size_t size) override;
  Status SetTimeout(int64_t timeout_us) override { return socket_->SetTimeout(timeout_us); }
  void Shutdown() override;
  std::string peer() const override { return "shared memory"; }

 private:
  struct Header;
  ShmStream(std::unique_ptr<TcpStream> socket, void* mapping, size_t capacity, bool writer);
  // Waits until `done()` or the peer sends a wake-up byte; errors when the socket
  // closes or times out.
  template <typename Done>
  Status Wait(Done&& done);
  void Wake();
  // The bytes this end may move now (room for the writer, data for the reader),
  // waiting for the peer when there are none; kDataLoss when the peer's position is
  // impossible.
  StatusOr<uint64_t> Ready();

  std::unique_ptr<TcpStream> socket_;
  void* mapping_;
  size_t capacity_;
  bool writer_;
  Header* header_;
  std::byte* ring_;
  uint64_t position_ = 0;  // bytes this end has written (writer) or read (reader), ever
  std::atomic<bool> shut_{false};
};

}  // namespace meridian::collective
