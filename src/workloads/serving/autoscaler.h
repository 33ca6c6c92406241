// A region's autoscaling policy (docs/serving.md, "Autoscaling"): how many replicas a
// region should have, from what its gateway sees: the requests in flight to the
// region's replicas (its queue depth) and the time they take to answer.
//
//  - Up, at once: wanted = ceil(mean in flight over the last `window_us` / target in
//    flight per replica); and one more than now when the replicas' answer time over
//    the window is above the latency target while that count would not grow.
//    Not while the load is within `tolerance` of the target of the replicas there are
//    (mean <= replicas * target * (1 + tolerance)): a load near a multiple of the
//    target would otherwise flap, in at exactly the target per replica and up again
//    at the next sample above it (Kubernetes' autoscaler holds the same way).
//  - Down, slowly: only after the load has wanted fewer replicas for `scale_in_after_us`
//    without a break, and one replica at a time (the timer starts again after each).
//  - Always within [min, max].
//  - Which replica leaves (ChooseScaleIn): one that does not serve yet first (waiting
//    for room, or starting: no request is in flight to it, so it is cancelled at
//    once), else the serving one with the highest number (drained first).
//  - A scale-up that raced a deletion (ScaleUpOutlivedItsService) is undone.
//
// Pure arithmetic on the samples given (no clock, no I/O), so tests drive it exactly.
//
// Thread-safety: not thread-safe; one owner.
#pragma once

#include <cstdint>
#include <deque>
#include <span>

namespace meridian::serving {

struct AutoscalePolicy {
  double target_inflight = 2.0;        // requests in flight a replica should have
  int64_t latency_target_us = 100'000;  // a replica's mean answer time above this adds one
  int64_t scale_in_after_us = 10'000'000;
  int64_t window_us = 2'000'000;        // samples averaged
  double tolerance = 0.1;               // a load this far above the replicas' target adds none
  int32_t min = 1, max = 1;
};

class Autoscaler {
 public:
  explicit Autoscaler(AutoscalePolicy policy) : policy_(policy) {}
  const AutoscalePolicy& policy() const { return policy_; }

  // One sample at `now_us`: the requests in flight to the region's replicas, all
  // together, and their mean answer time (0: none answered since the last sample).
  void Observe(int64_t now_us, double inflight, int64_t answer_us);

  // The replicas the region should have, given it has `replicas` now (running or on
  // their way, not counting those draining).
  int32_t Want(int64_t now_us, int32_t replicas);

  // The mean in flight, and the mean answer time of the samples that had one, over
  // the window (for the gateway's log line).
  double MeanInflight() const;
  int64_t MeanAnswerUs() const;

 private:
  struct Sample {
    int64_t at_us;
    double inflight;
    int64_t answer_us;
  };
  AutoscalePolicy policy_;
  std::deque<Sample> samples_;
  int64_t low_since_us_ = -1;  // since when the load wants fewer replicas; -1: it does not
};

struct ScaleInCandidate {
  int32_t ordinal = 0;   // the replica's number in its service
  bool serving = false;  // it runs and the gateway sends it requests
};
// The index of the replica to remove when scaling in; -1 when there is none.
int ChooseScaleIn(std::span<const ScaleInCandidate> replicas);

// Whether replicas added on a read of the service's live replica jobs (`basis`, their
// ids) outlived the service, judged on a read made after they were submitted
// (`live_after`): true when none of `basis` lives any more. `service delete` cancels
// every replica job and reads again until none is left, so a scale-up submitted after
// its last read finds every job of its basis ended, and must cancel what it added
// (else the deleted service keeps a replica). An empty basis never outlives anything.
bool ScaleUpOutlivedItsService(std::span<const uint64_t> basis, std::span<const uint64_t> live_after);

}  // namespace meridian::serving
