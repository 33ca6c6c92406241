// A model replica: the digits MLP behind HTTP (http/loop_server.h), its requests batched
// (batcher.h).
//
//   POST /v1/predict  {"instances": [[64 pixels in 0..1], ...]}   (1..256 images)
//     -> 200 {"predictions": [{"label": 3, "probabilities": [10 numbers]}, ...]}
//     -> 400 naming what is wrong with the body; 503 when the replica is saturated
//   GET /healthz       -> 200 {"status": "ok", "inflight": N}; 503 while draining
//   GET /v1/stats      -> requests, images, batches, refused, the model's hidden size
//
// Thread-safety: Start and destruction from one thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "common/status.h"
#include "workloads/serving/batcher.h"
#include "http/loop_server.h"
#include "workloads/serving/model.h"

namespace meridian::serving {

inline constexpr int64_t kMaxImagesPerRequest = 256;

struct ReplicaOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;  // the bearer token callers (the gateway) must present
  std::string tls_cert_file, tls_key_file;  // HTTPS when given (http/loop_server.h)
  std::string tls_cert_pem, tls_key_pem;    // the same as PEM text
  BatchOptions batch;
};

class Replica {
 public:
  static StatusOr<std::unique_ptr<Replica>> Start(MlpModel model, ReplicaOptions options);
  ~Replica();
  int port() const { return server_->port(); }
  BatcherStats stats() const { return batcher_->stats(); }
  // Where the model's batches run: "cpu" or the GPU's name.
  const std::string& device() const { return model_.device(); }
  // From now on /healthz answers 503 (gateways stop sending it requests); requests that
  // still come are served. For a replica being stopped: it drains, then ends.
  void StartDraining() { draining_ = true; }
  // Predict requests taken and not answered yet.
  int64_t inflight() const { return inflight_->load(); }

 private:
  Replica(MlpModel model, const ReplicaOptions& options);
  void Handle(const http::HttpRequest& request, std::unique_ptr<http::Reply> reply);

  MlpModel model_;
  // Predict requests taken and not answered yet, from every caller: /healthz says it,
  // so that each region's gateway sees the load all gateways put on the replica.
  std::shared_ptr<std::atomic<int64_t>> inflight_ = std::make_shared<std::atomic<int64_t>>(0);
  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<http::LoopServer> server_;
  std::atomic<bool> draining_{false};
};

// Parses a predict body into images (images x inputs); the error names what is wrong.
StatusOr<std::vector<float>> ParsePredictBody(std::string_view body, int32_t inputs);
// The predict answer for `logits` (images x classes).
std::string PredictAnswer(std::span<const float> logits, int32_t classes);

}  // namespace meridian::serving
