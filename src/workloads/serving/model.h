// A served model: the digits MLP of Meridian's trainer (workloads/training), read from
// one of its checkpoints, and a CPU forward pass over a batch of images that gives
// exactly kernels::MlpForward's figures for each image (the same sums in the same
// order) while reading the weights once a batch instead of once an image. Placed on a
// GPU (PlaceOn), a batch runs there instead: two SGEMMs (cuBLAS), equal to the CPU's
// to float rounding.
//
// Thread-safety: Infer from any number of threads; PlaceOn before the first.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
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

  // Runs batches on `ops`'s device from now on, its parameters copied there once: a
  // GPU's; the CPU's is this class's own forward pass (the default).
  Status PlaceOn(const kernels::Ops& ops);
  // "cpu" or the GPU's name (kernels::Ops::name).
  const std::string& device() const { return device_name_; }
  // Batches the device failed, each run on the CPU instead.
  int64_t device_errors() const { return device_ ? device_->errors.load() : 0; }

  // Logits (images x classes) of `x` (images x inputs). A batch the GPU fails runs on
  // the CPU (logged, counted in device_errors), so a request never fails for it.
  void Infer(std::span<const float> x, std::span<float> logits) const;
  // The CPU's forward pass, wherever the model is placed.
  void InferOnCpu(std::span<const float> x, std::span<float> logits) const;

 private:
  MlpModel(kernels::MlpShape shape, std::vector<float> params, int64_t step)
      : shape_(shape), params_(std::move(params)), step_(step) {}
  struct Device {
    std::unique_ptr<kernels::MlpOnDevice> mlp;
    std::atomic<int64_t> errors{0};
  };
  kernels::MlpShape shape_;
  std::vector<float> params_;
  int64_t step_;
  std::string device_name_ = "cpu";
  std::shared_ptr<Device> device_;  // null: the CPU
};

}  // namespace meridian::serving
