// A TUN device this process reads IPv4 packets from and writes them back to: the
// kernel routes into it what scripts/netsim.sh sends through the delay line, and
// routes on what is written back as if it arrived on that interface.
//
// Thread-safety: one thread uses a TunDevice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace meridian::netsim {

class TunDevice {
 public:
  // Attaches to the TUN device `name` (created by `ip tuntap add NAME mode tun` or
  // made here), packets without a prefix, non-blocking.
  static StatusOr<TunDevice> Open(const std::string& name);
  TunDevice(TunDevice&& other) noexcept : fd_(other.fd_), buffer_(std::move(other.buffer_)) { other.fd_ = -1; }
  TunDevice& operator=(TunDevice&&) = delete;
  TunDevice(const TunDevice&) = delete;
  ~TunDevice();

  // Waits up to `timeout_us` for a packet to read: true when one is there.
  StatusOr<bool> WaitReadable(int64_t timeout_us);
  // The next packet, or none when none is waiting.
  StatusOr<std::optional<std::string>> Read();
  Status Write(const std::string& packet);

  static constexpr size_t kMaxPacket = 65'536;

 private:
  explicit TunDevice(int fd) : fd_(fd), buffer_(kMaxPacket, '\0') {}
  int fd_;
  std::string buffer_;  // one packet read
};

}  // namespace meridian::netsim
