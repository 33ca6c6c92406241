#include "netsim/tun.h"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace meridian::netsim {

StatusOr<TunDevice> TunDevice::Open(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    return InvalidArgumentError(fmt::format("'{}': an interface name is 1 to {} characters", name, IFNAMSIZ - 1));
  }
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return UnavailableError(fmt::format("cannot open /dev/net/tun: {}", std::strerror(errno)));
  ifreq request{};
  request.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::memcpy(request.ifr_name, name.data(), name.size());
  if (ioctl(fd, TUNSETIFF, &request) != 0) {
    const int err = errno;
    close(fd);
    return UnavailableError(fmt::format("cannot attach to the TUN device {}: {}", name, std::strerror(err)));
  }
  return TunDevice(fd);
}

TunDevice::~TunDevice() {
  if (fd_ >= 0) close(fd_);
}

StatusOr<bool> TunDevice::WaitReadable(int64_t timeout_us) {
  pollfd p{fd_, POLLIN, 0};
  timespec t{static_cast<time_t>(timeout_us / 1'000'000), static_cast<long>(timeout_us % 1'000'000 * 1000)};
  const int n = ppoll(&p, 1, &t, nullptr);
  if (n < 0 && errno != EINTR) return UnavailableError(fmt::format("poll on the TUN device: {}", std::strerror(errno)));
  return n > 0;
}

StatusOr<std::optional<std::string>> TunDevice::Read() {
  const ssize_t n = read(fd_, buffer_.data(), buffer_.size());
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return std::optional<std::string>();
    return UnavailableError(fmt::format("read from the TUN device: {}", std::strerror(errno)));
  }
  return std::optional<std::string>(std::in_place, buffer_.data(), static_cast<size_t>(n));
}

Status TunDevice::Write(const std::string& packet) {
  const ssize_t n = write(fd_, packet.data(), packet.size());
  if (n != static_cast<ssize_t>(packet.size())) {
    return UnavailableError(fmt::format("write to the TUN device: {}", n < 0 ? std::strerror(errno) : "short"));
  }
  return OkStatus();
}

}  // namespace meridian::netsim
