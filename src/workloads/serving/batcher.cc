#include "workloads/serving/batcher.h"

#include <fmt/format.h>

namespace meridian::serving {

Status CheckBatchOptions(const BatchOptions& o) {
  if (o.max_batch < 1 || o.max_batch > 4096) {
    return InvalidArgumentError(fmt::format("max batch {}: expected 1..4096 images", o.max_batch));
  }
  if (o.max_wait_us < 0 || o.max_wait_us > 1'000'000) {
    return InvalidArgumentError(fmt::format("max wait {} us: expected 0..1000000", o.max_wait_us));
  }
  if (o.max_queued_images < o.max_batch || o.max_queued_images > (int64_t{1} << 20)) {
    return InvalidArgumentError(
        fmt::format("max queued images {}: expected max batch ({})..1048576", o.max_queued_images, o.max_batch));
  }
  return OkStatus();
}

Batcher::Batcher(const MlpModel& model, BatchOptions options) : model_(model), options_(options) {
  thread_ = std::thread([this] { Run(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status Batcher::Submit(std::vector<float> images, Done done) {
  const int64_t n = static_cast<int64_t>(images.size()) / model_.inputs();
  MERIDIAN_CHECK(n >= 1 && n * model_.inputs() == static_cast<int64_t>(images.size()));
  {
    std::lock_guard lock(mu_);
    if (queued_images_ > 0 && queued_images_ + n > options_.max_queued_images) {
      ++stats_.refused;
      return ResourceExhaustedError(fmt::format("the replica is saturated: {} images wait for the model (at most {})",
                                                queued_images_, options_.max_queued_images));
    }
    queue_.push_back(Pending{std::move(images), std::move(done), std::chrono::steady_clock::now()});
    queued_images_ += n;
  }
  cv_.notify_one();
  return OkStatus();
}

BatcherStats Batcher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Batcher::Run() {
  const int64_t inputs = model_.inputs();
  const int64_t classes = model_.classes();
  std::vector<float> x, logits;
  while (true) {
    std::vector<Pending> batch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      const auto deadline = queue_.front().arrived + std::chrono::microseconds(options_.max_wait_us);
      cv_.wait_until(lock, deadline, [&] { return stopping_ || queued_images_ >= options_.max_batch; });
      int64_t images = 0;
      while (!queue_.empty()) {
        const int64_t n = static_cast<int64_t>(queue_.front().images.size()) / inputs;
        if (!batch.empty() && images + n > options_.max_batch) break;
        images += n;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_images_ -= images;
      stats_.requests += static_cast<int64_t>(batch.size());
      stats_.images += images;
      ++stats_.batches;
    }
    x.clear();
    for (const Pending& p : batch) x.insert(x.end(), p.images.begin(), p.images.end());
    logits.assign(x.size() / inputs * classes, 0.0f);
    model_.Infer(x, logits);
    size_t at = 0;
    for (Pending& p : batch) {
      const size_t n = p.images.size() / inputs * classes;
      p.done(std::vector<float>(logits.begin() + at, logits.begin() + at + n));
      at += n;
    }
  }
}

}  // namespace meridian::serving
