// Env: the one door through which code reaches clocks, timers and randomness, so
// that control-plane logic can run under a fake or virtual clock, deterministically
// from one seed. Only src/common/platform*.cc touches std::chrono::*::now directly.
//
// Monotonic and wall time are distinct types: a monotonic instant measures
// intervals, a wall instant is what a human or another machine understands.
//
// Thread-safety: Clock implementations are thread-safe. Random is not; give each
// thread (or each simulation) its own, seeded from the parent.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>

namespace meridian {

// Microseconds on a clock that never goes backwards; arbitrary origin.
struct MonotonicTime {
  int64_t us = 0;
  friend auto operator<=>(MonotonicTime, MonotonicTime) = default;
};

// Microseconds since the Unix epoch.
struct WallTime {
  int64_t us = 0;
  friend auto operator<=>(WallTime, WallTime) = default;
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual MonotonicTime Now() const = 0;
  virtual WallTime WallNow() const = 0;
};

// The next value of splitmix64 from `state` (advanced): a well-mixed 64-bit hash of
// it, for seeds and for values drawn from a few integers.
uint64_t SplitMix64(uint64_t* state);

// A deterministic pseudo-random source (xoshiro256**, seeded through splitmix64).
// The sequence for a seed is the same on every platform and compiler, unlike the
// std:: distributions.
class Random {
 public:
  explicit Random(uint64_t seed);

  uint64_t seed() const { return seed_; }
  uint64_t Next();
  // Uniform in [0, n); n > 0.
  uint64_t Uniform(uint64_t n);
  // Uniform in [lo, hi]; lo <= hi.
  int64_t UniformRange(int64_t lo, int64_t hi);
  // Uniform in [0, 1).
  double UniformDouble();
  // true with probability p.
  bool Bernoulli(double p) { return UniformDouble() < p; }
  // A new, independent source derived from this one.
  Random Fork();

 private:
  uint64_t seed_;
  uint64_t s_[4];
};

// Owns the process-wide real clock and the seed random sources derive from.
class Env {
 public:
  virtual ~Env() = default;
  virtual const Clock& clock() const = 0;
  // A fresh random source; real environments seed it from `seed`.
  virtual Random NewRandom(uint64_t seed) const { return Random(seed); }

  // The real environment: steady_clock and system_clock. Lives forever.
  static Env& Default();
};

// A seed from the real clock and the process id, for runs that want variety; print it.
uint64_t SeedFromEntropy();

// Hands memory the allocator holds free back to the system (after a large structure
// is dropped), where the C library can; else does nothing.
void ReturnFreedMemory();

}  // namespace meridian
