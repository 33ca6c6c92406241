#include "store/postgres_lease.h"

#include <libpq-fe.h>
#include <poll.h>

#include <cerrno>

#include <vector>

#include <fmt/format.h>

#include "common/env.h"
#include "store/postgres_connection.h"
#include "store/postgres_state_store.h"

namespace meridian::store {

PostgresLease::PostgresLease(std::string uri, Options options)
    : uri_(std::move(uri)), shown_(PostgresStateStore::Redact(uri_)), options_(std::move(options)) {}

StatusOr<std::unique_ptr<PostgresLease>> PostgresLease::Open(const std::string& uri, Options options) {
  if (options.ttl_us < 100'000) return InvalidArgumentError("a leader's lease lives at least 100 ms");
  std::unique_ptr<PostgresLease> l(new PostgresLease(uri, std::move(options)));
  MERIDIAN_ASSIGN_OR_RETURN(std::string has,
                            l->Query("SELECT count(*) FROM leader_lease", {}, "read the lease", 10'000'000));
  if (has != "1") return FailedPreconditionError(fmt::format("state store {} has no leader's lease", l->shown_));
  return l;
}

PostgresLease::~PostgresLease() { PQfinish(conn_); }

StatusOr<std::string> PostgresLease::Query(const char* sql, std::initializer_list<std::string> params,
                                           const char* what, int64_t timeout_us) {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock& clock = Env::Default().clock();
  const int64_t deadline_us = clock.Now().us + std::max<int64_t>(timeout_us, 1'000);
  auto fail = [&](const std::string& why) {
    // A connection that did not answer in time may answer later: it is not reused.
    PQfinish(conn_);
    conn_ = nullptr;
    return UnavailableError(fmt::format("state store {}: {}: {}", shown_, what, why));
  };
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    PQfinish(conn_);
    conn_ = ConnectPostgres(uri_, "meridian-lease");
    if (PQstatus(conn_) != CONNECTION_OK) return fail("connect: " + PostgresMessage(PQerrorMessage(conn_)));
  }
  std::vector<const char*> values;
  for (const std::string& p : params) values.push_back(p.c_str());
  // Sent, then waited for with a deadline: a server that stopped answering (a
  // partition) must not hold a leader past its lease.
  if (PQsendQueryParams(conn_, sql, static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0) != 1) {
    return fail(PostgresMessage(PQerrorMessage(conn_)));
  }
  while (PQisBusy(conn_)) {
    const int64_t left_us = deadline_us - clock.Now().us;
    if (left_us <= 0) return fail(fmt::format("no answer within {:.2f} s", timeout_us / 1e6));
    pollfd p{PQsocket(conn_), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>((left_us + 999) / 1000)) < 0 && errno != EINTR) return fail("poll failed");
    if (PQconsumeInput(conn_) != 1) return fail(PostgresMessage(PQerrorMessage(conn_)));
  }
  StatusOr<std::string> out = std::string();
  while (PGresult* r = PQgetResult(conn_)) {
    const ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      if (out.ok()) {
        out = UnavailableError(
            fmt::format("state store {}: {}: {}", shown_, what, PostgresMessage(PQresultErrorMessage(r))));
      }
    } else if (out.ok() && PQntuples(r) > 0) {
      out = std::string(PQgetvalue(r, 0, 0));
    }
    PQclear(r);
  }
  return out;
}

StatusOr<int64_t> PostgresLease::TryAcquire() {
  // The server's clock decides expiry: the coordinators' clocks need not agree.
  MERIDIAN_ASSIGN_OR_RETURN(
      std::string epoch,
      Query("UPDATE leader_lease SET holder = $1, epoch = epoch + 1, "
            "expires_at = now() + $2::BIGINT * interval '1 microsecond' "
            "WHERE id = 1 AND expires_at < now() RETURNING epoch",
            {options_.holder, std::to_string(options_.ttl_us)}, "take the lease", options_.ttl_us / 3));
  if (epoch.empty()) return int64_t{0};
  epoch_ = std::stoll(epoch);
  return epoch_;
}

Status PostgresLease::Renew(int64_t timeout_us) {
  MERIDIAN_ASSIGN_OR_RETURN(
      std::string renewed,
      Query("UPDATE leader_lease SET expires_at = now() + $2::BIGINT * interval '1 microsecond' "
            "WHERE id = 1 AND epoch = $1 RETURNING epoch",
            {std::to_string(epoch_), std::to_string(options_.ttl_us)}, "renew the lease", timeout_us));
  if (renewed.empty()) {
    StatusOr<std::string> now = Describe();
    return FailedPreconditionError(fmt::format("lost the lease of epoch {}: {}", epoch_,
                                               now.ok() ? "held by " + *now : now.status().ToString()));
  }
  return OkStatus();
}

Status PostgresLease::Release() {
  return Query("UPDATE leader_lease SET expires_at = '-infinity' WHERE id = 1 AND epoch = $1",
               {std::to_string(epoch_)}, "give up the lease", options_.ttl_us / 3)
      .status();
}

StatusOr<std::string> PostgresLease::Describe() {
  return Query("SELECT format('%s (epoch %s, %s)', NULLIF(holder, ''), epoch, "
               "CASE WHEN expires_at < now() THEN 'expired' ELSE format('expires in %s s', "
               "round(extract(epoch FROM expires_at - now())::numeric, 1)) END) FROM leader_lease WHERE id = 1",
               {}, "read the lease", options_.ttl_us / 3);
}

}  // namespace meridian::store
