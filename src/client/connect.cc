#include "client/connect.h"

#include <cstdlib>

#include <fmt/format.h>

#include "security/pki.h"
#include "spec/yaml_reader.h"

namespace meridian::client {
namespace fs = std::filesystem;

std::string DefaultClusterDir() {
  if (const char* home = std::getenv("MERIDIAN_HOME"); home && *home) return home;
  const char* user_home = std::getenv("HOME");
  return fmt::format("{}/.meridian", user_home && *user_home ? user_home : ".");
}

StatusOr<std::string> ReadSmallFile(const fs::path& path) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string s, spec::ReadFileToString(path.string()));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

StatusOr<std::string> ResolveCoordinator(const ClusterTarget& target) {
  if (!target.coordinator.empty()) return target.coordinator;
  if (const char* env = std::getenv("MERIDIAN_COORDINATOR"); env && *env && target.dir.empty()) return std::string(env);
  fs::path dir = target.dir.empty() ? DefaultClusterDir() : target.dir;
  StatusOr<std::string> addr = ReadSmallFile(dir / kAddrFile);
  if (!addr.ok() || addr->empty()) {
    return UnavailableError(fmt::format(
        "no coordinator: no local cluster in {} (start one with 'meridian up') and no --coordinator HOST:PORT",
        dir.string()));
  }
  return *addr;
}

StatusOr<rpc::ChannelSecurity> ResolveSecurity(const ClusterTarget& target) {
  if (target.insecure) return rpc::ChannelSecurity{};
  const fs::path dir = target.dir.empty() ? DefaultClusterDir() : target.dir;
  std::string tls_dir = target.tls_dir;
  if (const char* env = std::getenv("MERIDIAN_TLS_DIR"); tls_dir.empty() && env && *env) tls_dir = env;
  if (tls_dir.empty() && fs::exists(dir / "tls" / "ca.crt")) tls_dir = (dir / "tls").string();
  if (tls_dir.empty()) {
    if (fs::exists(dir / "insecure")) return rpc::ChannelSecurity{};  // made by 'up --insecure'
    return FailedPreconditionError(fmt::format(
        "no certificates to reach the coordinator with: give --tls-dir DIR (ca.crt, client.crt, client.key), set "
        "MERIDIAN_TLS_DIR, or --insecure for a coordinator started with --insecure (no local cluster in {})",
        dir.string()));
  }
  rpc::ChannelSecurity out;
  MERIDIAN_ASSIGN_OR_RETURN(out.tls, security::LoadCredentials(tls_dir, "client"));
  out.token = target.token;
  if (const char* env = std::getenv("MERIDIAN_TOKEN"); out.token.empty() && env && *env) out.token = env;
  if (out.token.empty()) {
    StatusOr<std::string> local = ReadSmallFile(dir / "admin.token");
    if (local.ok()) out.token = *local;
  }
  return out;
}

StatusOr<std::unique_ptr<Client>> ConnectClient(const ClusterTarget& target, int64_t timeout_us) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string address, ResolveCoordinator(target));
  MERIDIAN_ASSIGN_OR_RETURN(rpc::ChannelSecurity security, ResolveSecurity(target));
  return std::make_unique<Client>(address, std::move(security), timeout_us);
}

StatusOr<std::unique_ptr<Client>> ConnectTokenChecker(const ClusterTarget& target, int64_t timeout_us) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string address, ResolveCoordinator(target));
  MERIDIAN_ASSIGN_OR_RETURN(rpc::ChannelSecurity security, ResolveSecurity(target));
  if (!security.tls.enabled()) {
    return FailedPreconditionError("the cluster is insecure (no TLS): it has no tokens to check");
  }
  security.token.clear();
  return std::make_unique<Client>(address, std::move(security), timeout_us);
}

}  // namespace meridian::client
