// Leadership: a coordinator on a PostgreSQL store leads only while it holds the
// store's lease (store::PostgresLease). It waits as a standby until the lease is free,
// then renews it in the background; once a renewal fails, or none has succeeded for
// two thirds of the lease's time to live (the server unreachable), it stops leading
// at once: it logs why and sends its own process SIGTERM, and lost() says why. Its
// writes were fenced off already (PostgresStateStore::SetFence), so a standby that
// took over meanwhile is safe from them.
//
// Thread-safety: Await on the main thread; lost() from any.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "store/postgres_lease.h"

namespace meridian::cli {

class Leadership {
 public:
  // Waits until the lease is this coordinator's. Null (with OK) when a termination
  // signal came first; an error when the store cannot be read at all.
  static StatusOr<std::unique_ptr<Leadership>> Await(const std::string& uri, const std::string& holder,
                                                     int64_t ttl_us);
  // Stops renewing and, if it still holds the lease, gives it up: a standby takes
  // over without waiting for it to expire.
  ~Leadership();

  int64_t epoch() const { return lease_->epoch(); }
  // Renews from now on, in a thread of its own.
  void StartRenewing();
  // Why it stopped leading, if it did.
  std::optional<std::string> lost();

 private:
  Leadership(std::unique_ptr<store::PostgresLease> lease, int64_t ttl_us)
      : lease_(std::move(lease)), ttl_us_(ttl_us) {}
  void RenewLoop();

  std::unique_ptr<store::PostgresLease> lease_;
  const int64_t ttl_us_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;             // guarded by mu_
  std::optional<std::string> lost_;   // guarded by mu_
  std::thread renewer_;
};

}  // namespace meridian::cli
