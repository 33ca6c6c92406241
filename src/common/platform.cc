// The only place that reads the real clocks (see env.h).
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/env.h"
#include "common/parallel.h"

namespace meridian {
namespace {

class RealClock final : public Clock {
 public:
  MonotonicTime Now() const override {
    auto d = std::chrono::steady_clock::now().time_since_epoch();
    return {std::chrono::duration_cast<std::chrono::microseconds>(d).count()};
  }
  WallTime WallNow() const override {
    auto d = std::chrono::system_clock::now().time_since_epoch();
    return {std::chrono::duration_cast<std::chrono::microseconds>(d).count()};
  }
};

class RealEnv final : public Env {
 public:
  const Clock& clock() const override { return clock_; }

 private:
  RealClock clock_;
};

}  // namespace

Env& Env::Default() {
  static RealEnv* env = new RealEnv();
  return *env;
}

uint64_t SeedFromEntropy() {
  uint64_t t = static_cast<uint64_t>(Env::Default().clock().WallNow().us);
  return t ^ (static_cast<uint64_t>(getpid()) << 32);
}

void ReturnFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

void ParallelFor(size_t count, size_t max_threads, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < count;) fn(i);
  };
  std::vector<std::thread> helpers;
  for (size_t k = 1; k < std::min(count, max_threads); ++k) helpers.emplace_back(worker);
  worker();
  for (std::thread& t : helpers) t.join();
}

}  // namespace meridian
