// Tickets: the coordinator's word that the holder of a connection may read some
// objects, or put one, on any agent's transfer server. A client that is not a node of
// the cluster (a user's `meridian object get`, say) asks the coordinator, which checks
// the caller's tenant, and gets a ticket signed with a key only the coordinator and
// its agents hold (HMAC-SHA256; agents get the key when they register, over mutual
// TLS). The client shows the ticket at the start of its transfer connection; the
// server checks the signature and the expiry, and serves the objects it names only.
//
// A put ticket names the tenant and the most bytes it allows. After a ticketed put the
// server answers with a receipt, HMAC(tenant, object id), by which the coordinator
// knows the tenant did send those bytes: it then lets that tenant read the object,
// even one another tenant put first (same bytes, same id).
//
// Thread-safety: pure functions and value types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace meridian::security {

enum class TicketKind : uint8_t { kRead = 1, kPut = 2 };

struct Ticket {
  TicketKind kind = TicketKind::kRead;
  std::string tenant;
  int64_t expires_unix_us = 0;  // wall clock: verified by other machines
  std::vector<std::string> ids;  // kRead: the objects the holder may read (32 hex digits each)
  int64_t max_bytes = 0;        // kPut: the most one put may carry
};

inline constexpr size_t kTicketKeyBytes = 32;
inline constexpr size_t kMaxTicketIds = 4096;
inline constexpr size_t kMaxTicketBytes = 80 + 256 + kMaxTicketIds * 16;
inline constexpr size_t kReceiptBytes = 32;

// The ticket's bytes, signed with `key` (as NewTicketKey makes); kInvalidArgument
// for an id that is not 32 hex digits, or more than kMaxTicketIds of them.
StatusOr<std::string> SignTicket(const Ticket& ticket, std::string_view key);
// The ticket `bytes` carry, if `key` signed them and they have not expired at
// `now_unix_us`; kPermissionDenied says which check failed.
StatusOr<Ticket> VerifyTicket(std::string_view bytes, std::string_view key, int64_t now_unix_us);
// What a server answers a ticketed put of `id` with (kReceiptBytes raw bytes).
std::string PutReceipt(std::string_view key, std::string_view tenant, std::string_view id);
// Whether `receipt` is the one for `tenant` putting `id`.
bool CheckPutReceipt(std::string_view key, std::string_view tenant, std::string_view id, std::string_view receipt);
// A fresh key for the coordinator of a cluster: kTicketKeyBytes random bytes, as hex.
StatusOr<std::string> NewTicketKey();
// The key a coordinator holding the cluster CA's private key (PEM) uses: derived
// from it, so the same across the coordinator's restarts (as hex).
std::string TicketKeyFrom(std::string_view ca_key_pem);
// Microseconds since the Unix epoch, by the system clock (tickets cross machines).
int64_t UnixNowUs();

// A gang's launch secret for one run of the gang (rank 0's attempt): the coordinator
// hands it to the gang's members only, and `meridian gang` proves with it that a
// launch (Open MPI's orted, by plm_rsh_agent) comes from a member of the same run.
std::string GangSecret(std::string_view key, uint64_t job, int32_t gang, int32_t attempt);
// The proof of a launch request: HMAC-SHA256 under the secret of the listener's
// nonce and the command, so a proof is good for that command on that connection only.
std::string GangLaunchProof(std::string_view secret, std::string_view nonce, std::string_view command);

}  // namespace meridian::security
