// Which cluster a client talks to, and with what credentials: what the `meridian`
// command and the Python package (python/) resolve the same way.
//
// The coordinator: `coordinator` when given, else $MERIDIAN_COORDINATOR, else the
// address file of the local cluster in `dir` (default DefaultClusterDir()). The
// credentials: the CA and client certificate in `tls_dir` (else $MERIDIAN_TLS_DIR,
// else the local cluster's tls/), and `token` (else $MERIDIAN_TOKEN, else the local
// cluster's admin.token). `insecure`: plaintext, to a coordinator started with
// --insecure (a local cluster made by `up --insecure` is found so without it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "client/client.h"
#include "common/status.h"
#include "rpc/api.h"

namespace meridian::client {

struct ClusterTarget {
  std::string coordinator;
  std::string dir;
  std::string tls_dir = {};
  std::string token = {};
  bool insecure = false;
};

// The file in a local cluster's directory that holds its coordinator's address.
inline constexpr const char* kAddrFile = "coordinator.addr";

// ${MERIDIAN_HOME}, else ~/.meridian: where `meridian up` keeps a local cluster.
std::string DefaultClusterDir();
// A one-line file (an address, a pid) without its line end.
StatusOr<std::string> ReadSmallFile(const std::filesystem::path& path);
StatusOr<std::string> ResolveCoordinator(const ClusterTarget& target);
// Errors: kFailedPrecondition (no certificates found and not insecure), and reading
// the certificates'.
StatusOr<rpc::ChannelSecurity> ResolveSecurity(const ClusterTarget& target);
// A client of the target's coordinator, with its credentials. Nothing is sent yet:
// the first call finds out whether the coordinator answers.
StatusOr<std::unique_ptr<Client>> ConnectClient(const ClusterTarget& target, int64_t timeout_us = 10'000'000);
// A client of the target's coordinator with its certificate but no token of its own,
// for Client::WhoIs; FailedPrecondition for an insecure cluster (it has no tokens).
StatusOr<std::unique_ptr<Client>> ConnectTokenChecker(const ClusterTarget& target, int64_t timeout_us);

}  // namespace meridian::client
