// A served model: the digits MLP of Meridian's trainer (workloads/training), read from
// one of its checkpoints, and a CPU forward pass over a batch of images that gives
// exactly kernels::MlpForward's figures for each image (the same sums in the same
// order) while reading the weights once a batch instead of once an image.
//
// Thread-safety: immutable once made; Infer from any number of threads.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kernels/ops.h"

namespace meridian::serving {

class MlpModel {
 public:
  // The checkpoint's hidden size comes from its header; kDataLoss names what is wrong
  // with bytes that are not a whole, intact checkpoint, or hold a weight that is not finite.
  static StatusOr<MlpModel> FromCheckpoint(std::string_view bytes);

  int32_t inputs() const { return shape_.inputs; }
  int32_t classes() const { return shape_.classes; }
  int32_t hidden() const { return shape_.hidden; }
  int64_t step() const { return step_; }

  // Logits (images x classes) of `x` (images x inputs).
  void Infer(std::span<const float> x, std::span<float> logits) const;

 private:
  MlpModel(kernels::MlpShape shape, std::vector<float> params, int64_t step)
      : shape_(shape), params_(std::move(params)), step_(step) {}
  kernels::MlpShape shape_;
  std::vector<float> params_;
  int64_t step_;
};

}  // namespace meridian::serving
