// Dynamic batching for a model replica: requests' images wait until `max_batch` images
// are waiting or the oldest has waited `max_wait_us`, then run through the model as one
// batch on the batcher's thread. max_batch 1 runs each request alone (batching off).
// A request's images stay together: one larger than max_batch runs as its own batch.
// At most `max_queued_images` wait; Submit refuses more (the replica answers 503).
//
// Thread-safety: Submit and stats from any thread; `done` runs on the batcher's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "workloads/serving/model.h"

namespace meridian::serving {

struct BatchOptions {
  int32_t max_batch = 32;        // images, 1..4096
  int64_t max_wait_us = 1000;    // 0..1,000,000
  int64_t max_queued_images = 4096;
};

Status CheckBatchOptions(const BatchOptions& options);

struct BatcherStats {
  int64_t requests = 0;
  int64_t images = 0;
  int64_t batches = 0;
  int64_t refused = 0;  // submissions past max_queued_images
};

class Batcher {
 public:
  // Gets the logits (images x classes) of the request's images.
  using Done = std::function<void(std::vector<float> logits)>;

  // `model` outlives the batcher.
  Batcher(const MlpModel& model, BatchOptions options);
  ~Batcher();  // runs what is queued, then stops
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // `images` holds whole images (a multiple of the model's inputs, at least one).
  // kResourceExhausted, naming the bound, when the queue is full.
  Status Submit(std::vector<float> images, Done done);
  BatcherStats stats() const;

 private:
  struct Pending {
    std::vector<float> images;
    Done done;
    std::chrono::steady_clock::time_point arrived;
  };
  void Run();

  const MlpModel& model_;
  const BatchOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;     // GUARDED_BY(mu_)
  int64_t queued_images_ = 0;     // GUARDED_BY(mu_)
  bool stopping_ = false;         // GUARDED_BY(mu_)
  BatcherStats stats_;            // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace meridian::serving
