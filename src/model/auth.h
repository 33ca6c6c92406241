// Who may do what: roles, API tokens and the caller a request comes from. The
// coordinator keeps tokens (as hashes) in its store; rpc/server.cc decides per call
// (docs/security.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"

namespace meridian::model {

// What a credential may do; each role can do what the ones before it can, within its
// tenant (admin: every tenant). kAgent is a join token's: it can only join a node.
enum class Role { kViewer, kSubmitter, kAdmin, kAgent };
std::string_view RoleName(Role role);
std::optional<Role> ParseRole(std::string_view name);

// An API token, as stored: the secret itself is never kept, only its SHA-256.
struct TokenRecord {
  std::string id;           // public, 16 hex digits
  std::string secret_hash;  // SHA-256 of the secret part, hex
  std::string user;
  std::string tenant;
  Role role = Role::kViewer;
  int64_t created_us = 0;
  int64_t expires_us = 0;   // 0: never
  bool revoked = false;
};

// An API token's secret as its holder gives it: "mrd_" ID "_" SECRET, ID 16 hex digits
// (public: it names the token), SECRET 64 (32 random bytes; only its SHA-256 is kept).
inline constexpr std::string_view kApiTokenPrefix = "mrd_";
inline constexpr size_t kApiTokenIdHex = 16;
inline constexpr size_t kApiTokenSecretHex = 64;
// {id, secret} of a token of that shape (hex digits); nullopt for any other text.
std::optional<std::pair<std::string, std::string>> SplitApiToken(std::string_view token);

// The authenticated party of a call.
struct Caller {
  std::string user;    // a token's user, or "node:NAME" for an agent's certificate
  std::string tenant;  // empty for nodes, and for every call of an insecure coordinator
  Role role = Role::kViewer;
  std::string node;    // the node an agent's certificate names
  bool insecure = false;  // no TLS: nobody is authenticated (a trusted machine only)

  // "user alice (submitter, tenant team-a)" for messages and the audit log.
  std::string Describe() const;
  // Whether it sees and acts on every tenant's jobs and objects: an admin, or anyone
  // of an insecure coordinator.
  bool SeesAllTenants() const { return insecure || role == Role::kAdmin; }
};

// A user's or a tenant's name (tokens, client certificates): 1 to 64 letters,
// digits and - _ . @ (so never a path); `what` names it in the error.
Status CheckPrincipalName(std::string_view name, std::string_view what);

}  // namespace meridian::model
