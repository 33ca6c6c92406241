#include "workloads/serving/replica.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace meridian::serving {

StatusOr<std::vector<float>> ParsePredictBody(std::string_view body, int32_t inputs) {
  const auto doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgumentError("the body is not JSON: expected {\"instances\": [[...], ...]}");
  if (!doc.is_object() || !doc.contains("instances")) {
    return InvalidArgumentError("the body has no 'instances': expected {\"instances\": [[...], ...]}");
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "instances") return InvalidArgumentError(fmt::format("unknown field '{}': only 'instances'", key));
  }
  const auto& instances = doc["instances"];
  if (!instances.is_array() || instances.empty() || static_cast<int64_t>(instances.size()) > kMaxImagesPerRequest) {
    return InvalidArgumentError(fmt::format("'instances' must be a list of 1..{} images", kMaxImagesPerRequest));
  }
  std::vector<float> x;
  x.reserve(instances.size() * static_cast<size_t>(inputs));
  for (size_t i = 0; i < instances.size(); ++i) {
    const auto& image = instances[i];
    if (!image.is_array() || static_cast<int32_t>(image.size()) != inputs) {
      return InvalidArgumentError(fmt::format("instance {}: expected a list of {} numbers", i, inputs));
    }
    for (const auto& v : image) {
      if (!v.is_number()) return InvalidArgumentError(fmt::format("instance {}: {} is not a number", i, v.dump()));
      const double d = v.get<double>();
      if (!(d >= 0.0 && d <= 1.0)) {
        return InvalidArgumentError(fmt::format("instance {}: pixel {} is not in 0..1", i, v.dump()));
      }
      x.push_back(static_cast<float>(d));
    }
  }
  return x;
}

std::string PredictAnswer(std::span<const float> logits, int32_t classes) {
  std::string out = "{\"predictions\":[";
  const size_t images = logits.size() / static_cast<size_t>(classes);
  std::vector<double> p(static_cast<size_t>(classes));
  for (size_t b = 0; b < images; ++b) {
    const float* l = logits.data() + b * static_cast<size_t>(classes);
    const auto best = std::max_element(l, l + classes) - l;
    double sum = 0.0;
    for (int32_t c = 0; c < classes; ++c) sum += p[c] = std::exp(static_cast<double>(l[c] - l[best]));
    out += fmt::format("{}{{\"label\":{},\"probabilities\":[", b == 0 ? "" : ",", best);
    for (int32_t c = 0; c < classes; ++c) out += fmt::format("{}{:.6g}", c == 0 ? "" : ",", p[c] / sum);
    out += "]}";
  }
  out += "]}\n";
  return out;
}

Replica::Replica(MlpModel model, const ReplicaOptions& options) : model_(std::move(model)) {
  batcher_ = std::make_unique<Batcher>(model_, options.batch);
}

StatusOr<std::unique_ptr<Replica>> Replica::Start(MlpModel model, ReplicaOptions options) {
  MERIDIAN_RETURN_IF_ERROR(CheckBatchOptions(options.batch));
  std::unique_ptr<Replica> r(new Replica(std::move(model), options));
  http::LoopServer::Options http;
  http.host = options.host;
  http.port = options.port;
  http.token = options.token;
  http.tls_cert_file = options.tls_cert_file;
  http.tls_key_file = options.tls_key_file;
  http.tls_cert_pem = options.tls_cert_pem;
  http.tls_key_pem = options.tls_key_pem;
  // 256 images of 64 pixels, each a few bytes of JSON.
  http.max_body_bytes = int64_t{1} << 20;
  http.name = "meridian-replica";
  Replica* self = r.get();
  MERIDIAN_ASSIGN_OR_RETURN(r->server_, http::LoopServer::Start(http, [self](const http::HttpRequest& req, std::unique_ptr<http::Reply> reply) {
    self->Handle(req, std::move(reply));
  }));
  return r;
}

Replica::~Replica() {
  // The loop first: no new request reaches the batcher, whose last replies are dropped.
  if (server_ != nullptr) server_->Stop();
  batcher_.reset();
}

void Replica::Handle(const http::HttpRequest& req, std::unique_ptr<http::Reply> reply) {
  if (req.path == "/healthz") {
    if (draining_) {
      reply->Send(http::JsonError(503, "draining: the replica is stopping"));
      return;
    }
    reply->Send(http::HttpResponse{200, fmt::format("{{\"status\":\"ok\",\"inflight\":{}}}\n", inflight_->load())});
    return;
  }
  if (req.path == "/v1/stats") {
    const BatcherStats s = batcher_->stats();
    reply->Send(http::HttpResponse{200, nlohmann::json{{"requests", s.requests},
                                                 {"images", s.images},
                                                 {"batches", s.batches},
                                                 {"refused", s.refused},
                                                 {"hidden", model_.hidden()},
                                                 {"step", model_.step()},
                                                 {"device", model_.device()},
                                                 {"device_errors", model_.device_errors()}}
                                          .dump() + "\n"});
    return;
  }
  if (req.path != "/v1/predict") {
    reply->Send(http::JsonError(404, fmt::format("no such path '{}': POST /v1/predict, GET /healthz or /v1/stats", req.path)));
    return;
  }
  if (req.method != "POST") {
    reply->Send(http::JsonError(405, "/v1/predict takes POST"));
    return;
  }
  auto images = ParsePredictBody(req.body, model_.inputs());
  if (!images.ok()) {
    reply->Send(http::JsonError(400, images.status().message()));
    return;
  }
  const int32_t classes = model_.classes();
  auto shared = std::make_shared<std::unique_ptr<http::Reply>>(std::move(reply));
  inflight_->fetch_add(1);
  const Status queued =
      batcher_->Submit(std::move(*images), [shared, classes, inflight = inflight_](std::vector<float> logits) {
        inflight->fetch_sub(1);
        (*shared)->Send(http::HttpResponse{200, PredictAnswer(logits, classes)});
      });
  if (!queued.ok()) {
    inflight_->fetch_sub(1);
    http::HttpResponse busy = http::JsonError(503, queued.message());
    busy.retry_after_s = 1;
    (*shared)->Send(std::move(busy));
  }
}

}  // namespace meridian::serving
