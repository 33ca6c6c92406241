#include "workloads/serving/model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/logging.h"
#include "workloads/training/trainer.h"

namespace meridian::serving {

namespace {

// Images a block, and hidden units a block: a block's partial sums (kImages x kUnits
// floats) stay in registers and L1 while one weight row is read once for all its
// images. The inner loops vectorise across hidden units (model.cc is built at -O3),
// which leaves each sum's order of additions, and so its value, as MlpForward's.
constexpr int64_t kImages = 4;
constexpr int64_t kUnits = 32;

// hid[b][k] = relu(b1[k] + sum_i x[b][i] * w1[i][k]) for images [b0, b0 + nb) and units
// [k0, k0 + nk), adding in input order as MlpForward does (a zero pixel adds an exact 0).
void HiddenBlock(const kernels::MlpShape& s, const float* w1, const float* b1, const float* x, int64_t b0, int64_t nb,
                 int64_t k0, int64_t nk, float* hid) {
  float acc[kImages][kUnits];
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t k = 0; k < nk; ++k) acc[b][k] = b1[k0 + k];
  }
  for (int32_t i = 0; i < s.inputs; ++i) {
    const float* row = w1 + int64_t{i} * s.hidden + k0;
    for (int64_t b = 0; b < nb; ++b) {
      const float xv = x[(b0 + b) * s.inputs + i];
      if (xv == 0.0f) continue;
      for (int64_t k = 0; k < nk; ++k) acc[b][k] += xv * row[k];
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t k = 0; k < nk; ++k) hid[(b0 + b) * s.hidden + k0 + k] = std::max(acc[b][k], 0.0f);
  }
}

}  // namespace

StatusOr<MlpModel> MlpModel::FromCheckpoint(std::string_view bytes) {
  MERIDIAN_ASSIGN_OR_RETURN(const int32_t hidden, training::CheckpointHidden(bytes));
  MERIDIAN_ASSIGN_OR_RETURN(training::Checkpoint c, training::DecodeCheckpoint(bytes, hidden));
  const auto n = static_cast<size_t>(training::ParameterCount(hidden));
  std::vector<float> params(c.state.begin(), c.state.begin() + static_cast<std::ptrdiff_t>(n));
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(params[i])) {
      return DataLossError(fmt::format("the checkpoint's parameter {} is {}: not a model to serve", i, params[i]));
    }
  }
  kernels::MlpShape shape;
  shape.inputs = training::kDigitPixels;
  shape.hidden = hidden;
  shape.classes = training::kDigitClasses;
  return MlpModel(shape, std::move(params), c.step);
}

Status MlpModel::PlaceOn(const kernels::Ops& ops) {
  if (!ops.is_gpu()) {
    device_.reset();
    device_name_ = "cpu";
    return OkStatus();
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<kernels::MlpOnDevice> mlp, ops.LoadMlp(shape_, params_));
  auto device = std::make_shared<Device>();
  device->mlp = std::move(mlp);
  device_ = std::move(device);
  device_name_ = ops.name();
  return OkStatus();
}

void MlpModel::Infer(std::span<const float> x, std::span<float> logits) const {
  if (device_) {
    const Status s = device_->mlp->Logits(x, logits);
    if (s.ok()) return;
    // The first failure and every 1000th after it: a device that keeps failing
    // would otherwise write a line a batch.
    if (device_->errors.fetch_add(1) % 1000 == 0) {
      MERIDIAN_LOG_WARN("a batch of {} images failed on {} ({}); it runs on the CPU", x.size() / shape_.inputs,
                        device_name_, s.message());
    }
  }
  InferOnCpu(x, logits);
}

void MlpModel::InferOnCpu(std::span<const float> x, std::span<float> logits) const {
  const kernels::MlpShape& s = shape_;
  const int64_t images = static_cast<int64_t>(x.size()) / s.inputs;
  MERIDIAN_CHECK(static_cast<int64_t>(x.size()) == images * s.inputs);
  MERIDIAN_CHECK(static_cast<int64_t>(logits.size()) == images * s.classes);
  const float* w1 = params_.data();
  const float* b1 = w1 + int64_t{s.inputs} * s.hidden;
  const float* w2 = b1 + s.hidden;
  const float* b2 = w2 + int64_t{s.hidden} * s.classes;
  std::vector<float> hid(static_cast<size_t>(images * s.hidden));
  for (int64_t k0 = 0; k0 < s.hidden; k0 += kUnits) {
    const int64_t nk = std::min<int64_t>(kUnits, s.hidden - k0);
    for (int64_t b0 = 0; b0 < images; b0 += kImages) {
      HiddenBlock(s, w1, b1, x.data(), b0, std::min(kImages, images - b0), k0, nk, hid.data());
    }
  }
  // The second layer row by row, each row read once for the whole batch.
  for (int64_t b = 0; b < images; ++b) std::copy(b2, b2 + s.classes, logits.data() + b * s.classes);
  for (int64_t k = 0; k < s.hidden; ++k) {
    const float* row = w2 + k * s.classes;
    for (int64_t b = 0; b < images; ++b) {
      const float h = hid[b * s.hidden + k];
      if (h == 0.0f) continue;
      float* out = logits.data() + b * s.classes;
      for (int32_t c = 0; c < s.classes; ++c) out[c] += h * row[c];
    }
  }
}

}  // namespace meridian::serving
