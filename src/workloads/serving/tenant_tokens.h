// Whose is this API token? A gateway's answer, for clients that call a service with
// their tenant's own coordinator token (docs/serving.md, "Who may call a service").
//
// The coordinator knows (the gateway asks it through `Identify`, a call with that
// token); TenantTokens keeps its answers so that a token is asked about once in a
// while, not once a request:
//   - an owner is kept `good_for_us` (30 s): a token revoked at the coordinator is
//     refused by the gateways within that time;
//   - a refusal (unknown, revoked, expired) is kept `bad_for_us` (5 s);
//   - "the coordinator cannot say now" is not kept.
// It holds at most `max_entries` answers, keyed by the token's SHA-256 (the secret is
// not kept), dropping the soonest to expire when full.
//
// Questions cost the coordinator a call each, and anyone can make up tokens: at most
// `lookups_per_second` (bursts of `burst`) are asked, one at a time on TenantTokens'
// own thread, and at most `max_waiting` different tokens wait to be asked. Requests
// that bear a token already being asked about wait for that one answer; at most
// `max_waiters` requests wait in all (each holds its body meanwhile). A token past any
// bound is answered ResourceExhausted at once (the gateway's 429), and a flood of
// made-up tokens cannot reach the coordinator faster than that.
//
// Thread-safety: Find from any thread; `done` runs on TenantTokens' thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"

namespace meridian::serving {

struct TokenOwner {
  std::string user;
  std::string tenant;
  bool admin = false;  // calls every tenant's services
};

// An owner, or why there is none: Unauthenticated (not a token of the coordinator's:
// unknown, revoked, expired, or not its shape), PermissionDenied (a token that may
// not call: a join token), ResourceExhausted (too many unknown tokens being asked
// about), Unavailable (the coordinator could not say).
using TokenAnswer = StatusOr<TokenOwner>;

class TenantTokens {
 public:
  // Asks the coordinator; runs on TenantTokens' thread, one call at a time.
  using Identify = std::function<TokenAnswer(const std::string& token)>;
  using Done = std::function<void(const TokenAnswer&)>;

  struct Options {
    int64_t good_for_us = 30'000'000;
    int64_t bad_for_us = 5'000'000;
    size_t max_entries = 10'000;
    double lookups_per_second = 20;
    int32_t burst = 20;
    size_t max_waiting = 64;   // different tokens waiting to be asked about
    size_t max_waiters = 256;  // requests waiting for those answers, in all
    std::function<int64_t()> now_us;    // a monotonic clock (tests give a fake); empty: steady_clock
  };

  TenantTokens(Identify identify, Options options);
  ~TenantTokens();  // waits for a question under way (its call's deadline at most)
  TenantTokens(const TenantTokens&) = delete;
  TenantTokens& operator=(const TenantTokens&) = delete;

  // The answer when it is known now (kept, or refused at once: not a token's shape,
  // ResourceExhausted); otherwise nullopt, and `done` is called once with the answer.
  std::optional<TokenAnswer> Find(std::string_view token, Done done);

  struct Counters {
    int64_t hits = 0;      // answered from what is kept
    int64_t lookups = 0;   // questions asked of the coordinator
    int64_t limited = 0;   // answered ResourceExhausted
    size_t entries = 0;    // answers kept now
  };
  Counters counters() const;

 private:
  struct Entry {
    TokenAnswer answer;
    int64_t expires_us = 0;
  };
  int64_t Now() const;
  bool TakeLookupLocked(int64_t now);
  void KeepLocked(const std::string& key, const TokenAnswer& answer, int64_t now);
  void Run();

  const Identify identify_;
  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry, std::less<>> kept_;  // GUARDED_BY(mu_); by the token's SHA-256
  // Tokens to ask about, in order: {key, token}.
  std::deque<std::pair<std::string, std::string>> queue_;  // GUARDED_BY(mu_)
  // Who waits for each token queued or being asked about, by key.
  std::map<std::string, std::vector<Done>, std::less<>> waiting_;  // GUARDED_BY(mu_)
  size_t waiters_ = 0;  // GUARDED_BY(mu_): the Dones in waiting_
  double allowance_ = 0;                            // GUARDED_BY(mu_); lookups the rate allows now
  int64_t allowance_at_us_ = 0;                     // GUARDED_BY(mu_)
  Counters counters_;                               // GUARDED_BY(mu_)
  bool stopping_ = false;                           // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace meridian::serving
