// PostgresLease: which of several coordinators sharing one PostgreSQL store leads.
// One row holds the lease: its holder, an epoch that grows with every new holder (the
// fencing token: PostgresStateStore::SetFence) and when it expires, by the server's
// clock. A standby takes the lease once it has expired (its leader died, or lost
// the server); a leader renews it well within its time to live, and stops leading as
// soon as a renewal fails or it cannot tell for too long.
//
// Thread-safety: safe to call from several threads (one connection, under a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

struct pg_conn;

namespace meridian::store {

class PostgresLease {
 public:
  struct Options {
    std::string holder;               // who asks: shown to the others ("host:port pid N")
    int64_t ttl_us = 3'000'000;       // a lease not renewed for this long may be taken
  };
  // Connects to a store that PostgresStateStore::Open has migrated.
  static StatusOr<std::unique_ptr<PostgresLease>> Open(const std::string& uri, Options options);
  ~PostgresLease();

  // Takes the lease if it is free (expired, given up, or never held): its new epoch;
  // 0 when another holds it.
  StatusOr<int64_t> TryAcquire();
  // Extends the lease this object holds, waiting at most `timeout_us` for the
  // server. FailedPrecondition: another took it; Unavailable: no answer in time.
  Status Renew(int64_t timeout_us);
  // Gives it up at once (a clean shutdown), so a standby need not wait for it to
  // expire.
  Status Release();
  // Who holds it, as "HOLDER (epoch N, expires in S s)", for a standby's log.
  StatusOr<std::string> Describe();
  int64_t epoch() const { return epoch_; }

 private:
  PostgresLease(std::string uri, Options options);
  // The first row's first value of a statement with parameters (text), or "" for
  // none; Unavailable when the server has not answered within `timeout_us` (each
  // call but Renew waits a third of the lease's life).
  StatusOr<std::string> Query(const char* sql, std::initializer_list<std::string> params, const char* what,
                              int64_t timeout_us);

  const std::string uri_;
  const std::string shown_;
  const Options options_;
  std::mutex mu_;
  pg_conn* conn_ = nullptr;
  int64_t epoch_ = 0;
};

}  // namespace meridian::store
