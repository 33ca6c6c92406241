#include "agent/gang.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include <fmt/format.h>

namespace meridian::agent {

StatusOr<std::vector<std::string>> GangEnvironment(const model::GangInfo& gang) {
  const size_t world = gang.members.size();
  if (world == 0 || world > model::kMaxGangMembers) {
    return InvalidArgumentError(
        fmt::format("gang '{}' has {} members (1 to {})", gang.name, world, model::kMaxGangMembers));
  }
  if (gang.rank >= world) {
    return InvalidArgumentError(fmt::format("gang '{}': rank {} of {} members", gang.name, gang.rank, world));
  }
  if (gang.master_port <= 0 || gang.master_port > 65535 || gang.master_addr.empty()) {
    return InvalidArgumentError(
        fmt::format("gang '{}': no rank-0 address ('{}' port {})", gang.name, gang.master_addr, gang.master_port));
  }
  const std::string& node = gang.members[gang.rank].node;
  uint32_t local_rank = 0;
  uint32_t local_world = 0;
  std::map<std::string, uint32_t> node_rank;  // nodes in order of their lowest rank
  for (size_t r = 0; r < world; ++r) {
    const std::string& n = gang.members[r].node;
    node_rank.emplace(n, static_cast<uint32_t>(node_rank.size()));
    if (n != node) continue;
    if (r < gang.rank) ++local_rank;
    ++local_world;
  }
  const uint32_t group = node_rank.at(node);
  return std::vector<std::string>{
      fmt::format("RANK={}", gang.rank),
      fmt::format("WORLD_SIZE={}", world),
      fmt::format("LOCAL_RANK={}", local_rank),
      fmt::format("LOCAL_WORLD_SIZE={}", local_world),
      fmt::format("NODE_RANK={}", group),
      fmt::format("GROUP_RANK={}", group),
      fmt::format("MASTER_ADDR={}", gang.master_addr),
      fmt::format("MASTER_PORT={}", gang.master_port),
      fmt::format("MERIDIAN_GANG={}", gang.name),
      fmt::format("MERIDIAN_GANG_FAILURE={}", gang.failure),
  };
}

std::string GangPeersText(const model::GangInfo& gang) {
  std::string out;
  for (size_t r = 0; r < gang.members.size(); ++r) {
    const model::GangMember& m = gang.members[r];
    out += fmt::format("{} {} {} {}\n", r, m.node, m.site, m.host);
  }
  return out;
}

StatusOr<int> ListenOnAllAddresses(int32_t port) {
  // Dual-stack where the host has IPv6 (IPv4 peers reach it too), else IPv4.
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool v6 = fd >= 0;
  if (!v6) fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(strerror(errno));
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  bool bound = false;
  if (v6) {
    const int off = 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    bound = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    bound = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  if (!bound || listen(fd, 8) != 0) {
    const int err = errno;
    close(fd);
    return UnavailableError(strerror(err));
  }
  return fd;
}

Status CheckPortFree(int32_t port) {
  StatusOr<int> fd = ListenOnAllAddresses(port);
  if (!fd.ok()) {
    return UnavailableError(fmt::format("port {} (MASTER_PORT) is taken on this host: {}", port, fd.status().message()));
  }
  close(*fd);
  return OkStatus();
}

}  // namespace meridian::agent
