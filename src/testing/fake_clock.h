// A Clock that moves only when told to. For tests of time-dependent logic.
//
// Thread-safety: Advance/Set and the readers may race; tests drive it from one thread.
#pragma once

#include <atomic>

#include "common/env.h"

namespace meridian::testing {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_us = 0, int64_t wall_offset_us = 1'700'000'000'000'000)
      : now_us_(start_us), wall_offset_us_(wall_offset_us) {}

  MonotonicTime Now() const override { return {now_us_.load()}; }
  WallTime WallNow() const override { return {now_us_.load() + wall_offset_us_}; }

  void Advance(int64_t us) { now_us_ += us; }

 private:
  std::atomic<int64_t> now_us_;
  int64_t wall_offset_us_;
};

}  // namespace meridian::testing
