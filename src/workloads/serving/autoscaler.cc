#include "workloads/serving/autoscaler.h"

#include <algorithm>
#include <cmath>

namespace meridian::serving {

void Autoscaler::Observe(int64_t now_us, double inflight, int64_t answer_us) {
  samples_.push_back(Sample{now_us, inflight, answer_us});
  while (!samples_.empty() && samples_.front().at_us <= now_us - policy_.window_us) samples_.pop_front();
}

double Autoscaler::MeanInflight() const {
  if (samples_.empty()) return 0.0;
  double sum = 0.0;
  for (const Sample& s : samples_) sum += s.inflight;
  return sum / static_cast<double>(samples_.size());
}

int64_t Autoscaler::MeanAnswerUs() const {
  int64_t sum = 0, n = 0;
  for (const Sample& s : samples_) {
    if (s.answer_us <= 0) continue;
    sum += s.answer_us;
    ++n;
  }
  return n == 0 ? 0 : sum / n;
}

int32_t Autoscaler::Want(int64_t now_us, int32_t replicas) {
  const double mean = MeanInflight();
  const double by_depth = std::ceil(mean / policy_.target_inflight - 1e-9);
  int64_t wanted = static_cast<int64_t>(std::min<double>(by_depth, policy_.max));
  // More, but within the tolerance of what the replicas there are aim at: hold.
  if (wanted > replicas && mean <= replicas * policy_.target_inflight * (1.0 + policy_.tolerance)) {
    wanted = replicas;
  }
  if (MeanAnswerUs() > policy_.latency_target_us && wanted <= replicas) wanted = int64_t{replicas} + 1;
  wanted = std::clamp<int64_t>(wanted, policy_.min, policy_.max);
  if (wanted >= replicas) {
    low_since_us_ = -1;
    // Below min (a replica failed for good) or more load: up at once.
    return static_cast<int32_t>(std::max<int64_t>(wanted, std::clamp<int32_t>(replicas, policy_.min, policy_.max)));
  }
  if (low_since_us_ < 0) low_since_us_ = now_us;
  if (now_us - low_since_us_ < policy_.scale_in_after_us) return replicas;
  low_since_us_ = now_us;  // the next one waits its turn
  return replicas - 1;
}

int ChooseScaleIn(std::span<const ScaleInCandidate> replicas) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(replicas.size()); ++i) {
    const ScaleInCandidate& r = replicas[static_cast<size_t>(i)];
    if (best < 0) {
      best = i;
      continue;
    }
    const ScaleInCandidate& b = replicas[static_cast<size_t>(best)];
    // Not serving before serving; then the highest number.
    if (r.serving != b.serving ? !r.serving : r.ordinal > b.ordinal) best = i;
  }
  return best;
}

bool ScaleUpOutlivedItsService(std::span<const uint64_t> basis, std::span<const uint64_t> live_after) {
  if (basis.empty()) return false;
  return std::none_of(basis.begin(), basis.end(), [&](uint64_t job) {
    return std::find(live_after.begin(), live_after.end(), job) != live_after.end();
  });
}

}  // namespace meridian::serving
