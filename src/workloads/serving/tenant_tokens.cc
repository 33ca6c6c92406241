#include "workloads/serving/tenant_tokens.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "model/auth.h"
#include "security/pki.h"

namespace meridian::serving {

TenantTokens::TenantTokens(Identify identify, Options options)
    : identify_(std::move(identify)), options_(std::move(options)) {
  allowance_ = options_.burst;
  allowance_at_us_ = Now();
  thread_ = std::thread([this] { Run(); });
}

TenantTokens::~TenantTokens() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int64_t TenantTokens::Now() const {
  if (options_.now_us) return options_.now_us();
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A token bucket: `lookups_per_second` refill it, up to `burst`.
bool TenantTokens::TakeLookupLocked(int64_t now) {
  const double refill = static_cast<double>(now - allowance_at_us_) * options_.lookups_per_second / 1e6;
  allowance_ = std::min<double>(options_.burst, allowance_ + std::max(0.0, refill));
  allowance_at_us_ = std::max(allowance_at_us_, now);
  if (allowance_ < 1) return false;
  allowance_ -= 1;
  return true;
}

void TenantTokens::KeepLocked(const std::string& key, const TokenAnswer& answer, int64_t now) {
  int64_t for_us = options_.bad_for_us;
  if (answer.ok()) {
    for_us = options_.good_for_us;
  } else if (answer.status().code() != StatusCode::kUnauthenticated &&
             answer.status().code() != StatusCode::kPermissionDenied) {
    return;  // the coordinator could not say: ask again next time
  }
  if (kept_.size() >= options_.max_entries && kept_.count(key) == 0) {
    std::erase_if(kept_, [now](const auto& e) { return e.second.expires_us <= now; });
    if (kept_.size() >= options_.max_entries) {
      auto soonest = std::min_element(kept_.begin(), kept_.end(), [](const auto& a, const auto& b) {
        return a.second.expires_us < b.second.expires_us;
      });
      kept_.erase(soonest);
    }
  }
  kept_.insert_or_assign(key, Entry{answer, now + for_us});
}

std::optional<TokenAnswer> TenantTokens::Find(std::string_view token, Done done) {
  if (!model::SplitApiToken(token)) {
    return TokenAnswer(UnauthenticatedError(fmt::format("not a Meridian API token ({}...)", model::kApiTokenPrefix)));
  }
  std::string key = security::Sha256Hex(token);
  std::lock_guard lock(mu_);
  const int64_t now = Now();
  if (auto it = kept_.find(key); it != kept_.end()) {
    if (it->second.expires_us > now) {
      ++counters_.hits;
      return it->second.answer;
    }
    kept_.erase(it);
  }
  auto limited = [&](std::string why) {
    ++counters_.limited;
    return TokenAnswer(ResourceExhaustedError(std::move(why)));
  };
  if (waiters_ >= options_.max_waiters) {
    return limited(fmt::format("{} requests already wait for their tokens to be checked", waiters_));
  }
  if (auto it = waiting_.find(key); it != waiting_.end()) {
    it->second.push_back(std::move(done));
    ++waiters_;
    return std::nullopt;
  }
  if (waiting_.size() >= options_.max_waiting) {
    return limited(fmt::format("{} unknown tokens already wait to be checked with the coordinator", waiting_.size()));
  }
  if (!TakeLookupLocked(now)) {
    return limited(fmt::format("unknown tokens are checked with the coordinator at most {} a second",
                               options_.lookups_per_second));
  }
  queue_.emplace_back(key, std::string(token));
  waiting_[std::move(key)].push_back(std::move(done));
  ++waiters_;
  cv_.notify_one();
  return std::nullopt;
}

void TenantTokens::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) break;
    auto [key, token] = std::move(queue_.front());
    queue_.pop_front();
    ++counters_.lookups;
    lock.unlock();
    const TokenAnswer answer = identify_(token);
    lock.lock();
    KeepLocked(key, answer, Now());
    std::vector<Done> waiters;
    if (auto it = waiting_.find(key); it != waiting_.end()) {
      waiters = std::move(it->second);
      waiters_ -= waiters.size();
      waiting_.erase(it);
    }
    lock.unlock();
    for (Done& done : waiters) done(answer);
    lock.lock();
  }
  // Stopping: whoever still waits is told so.
  std::vector<Done> left;
  for (auto& [key, waiters] : waiting_) {
    for (Done& d : waiters) left.push_back(std::move(d));
  }
  waiting_.clear();
  waiters_ = 0;
  queue_.clear();
  lock.unlock();
  const TokenAnswer stopped(UnavailableError("the gateway is stopping"));
  for (Done& done : left) done(stopped);
}

TenantTokens::Counters TenantTokens::counters() const {
  std::lock_guard lock(mu_);
  Counters c = counters_;
  c.entries = kept_.size();
  return c;
}

}  // namespace meridian::serving
