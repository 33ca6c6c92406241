#include "cli/leadership.h"

#include <chrono>

#include <fmt/format.h>

#include "common/env.h"
#include "common/logging.h"
#include "common/subprocess.h"

namespace meridian::cli {

StatusOr<std::unique_ptr<Leadership>> Leadership::Await(const std::string& uri, const std::string& holder,
                                                        int64_t ttl_us) {
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<store::PostgresLease> lease,
                            store::PostgresLease::Open(uri, {.holder = holder, .ttl_us = ttl_us}));
  std::string last_seen;
  const MonotonicTime start = Env::Default().clock().Now();
  while (true) {
    StatusOr<int64_t> epoch = lease->TryAcquire();
    if (epoch.ok() && *epoch > 0) {
      MERIDIAN_LOG_INFO("leading as epoch {} (after {:.1f} s as a standby); the lease lives {:.1f} s unrenewed",
                        *epoch, (Env::Default().clock().Now().us - start.us) / 1e6, ttl_us / 1e6);
      return std::unique_ptr<Leadership>(new Leadership(std::move(lease), ttl_us));
    }
    std::string seen;
    if (!epoch.ok()) {
      seen = epoch.status().ToString();
    } else if (StatusOr<std::string> held = lease->Describe(); held.ok()) {
      seen = "the lease is held by " + held->substr(0, held->find(" (epoch"));
    }
    if (seen != last_seen) {
      MERIDIAN_LOG_INFO("standby: {}; waiting to lead", seen);
      last_seen = seen;
    }
    if (int sig = WaitForTerminationSignalFor(std::min<int64_t>(ttl_us / 8, 250'000)); sig != 0) {
      MERIDIAN_LOG_INFO("signal {}: a standby stops", sig);
      return std::unique_ptr<Leadership>();
    }
  }
}

void Leadership::StartRenewing() {
  renewer_ = std::thread([this] { RenewLoop(); });
}

void Leadership::RenewLoop() {
  const Clock& clock = Env::Default().clock();
  // Renewed at a quarter of its life; a leader that could not renew for two thirds of
  // it stops before the server lets a standby take it.
  const int64_t every_us = ttl_us_ / 4;
  const int64_t give_up_us = ttl_us_ * 2 / 3;
  MonotonicTime last_ok = clock.Now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::microseconds(every_us), [&] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    const MonotonicTime asked = clock.Now();
    // No longer than the time left before it must stop: a server that stopped
    // answering cannot hold it past its lease.
    Status renewed = lease_->Renew(std::max<int64_t>(last_ok.us + give_up_us - asked.us, 1'000));
    lock.lock();
    if (renewed.ok()) {
      last_ok = asked;
      continue;
    }
    const int64_t since_us = clock.Now().us - last_ok.us;
    if (renewed.code() == StatusCode::kFailedPrecondition || since_us >= give_up_us) {
      lost_ = renewed.code() == StatusCode::kFailedPrecondition
                  ? renewed.message()
                  : fmt::format("the lease was not renewed for {:.1f} s ({})", since_us / 1e6, renewed.message());
      MERIDIAN_LOG_ERROR("no longer the leader: {}; stopping (a standby takes over)", *lost_);
      RaiseTerminationSignal();
      return;
    }
    MERIDIAN_LOG_WARN("renewing the lease failed ({}); trying again", renewed.message());
  }
}

std::optional<std::string> Leadership::lost() {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

Leadership::~Leadership() {
  bool held = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    held = !lost_.has_value();
  }
  wake_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  if (held) {
    if (Status s = lease_->Release(); !s.ok()) {
      MERIDIAN_LOG_WARN("giving up the lease failed ({}); a standby takes over once it expires", s.message());
    } else {
      MERIDIAN_LOG_INFO("gave up the lease of epoch {}", lease_->epoch());
    }
  }
}

}  // namespace meridian::cli
