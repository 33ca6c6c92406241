// kernels/ops.h on a CUDA device: argument checks and error translation around
// kernels_cuda.cu.
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/ops.h"

namespace meridian::kernels {
namespace {

class CudaOps final : public Ops {
 public:
  CudaOps(int device, std::string name) : device_(device), name_(fmt::format("cuda:{} ({})", device, name)) {}

  std::string name() const override { return name_; }
  bool is_gpu() const override { return true; }

  StatusOr<__int128> Sum(std::span<const int64_t> values) const override {
    __int128 total = 0;
    MERIDIAN_RETURN_IF_ERROR(Check(cuda::Sum(device_, values.data(), values.size(), &total), nullptr));
    return total;
  }

  Status Sort(std::vector<int64_t>& values, uint64_t seed, int64_t generate, int64_t lo, int64_t hi,
              const std::atomic<bool>& stop) const override {
    const size_t given = values.size();
    values.resize(given + static_cast<size_t>(generate));
    return Check(cuda::Sort(device_, values.data(), given, static_cast<size_t>(generate), seed, lo,
                            static_cast<uint64_t>(hi - lo), &stop),
                 &stop);
  }

  Status Histogram(std::span<const double> values, uint64_t seed, int64_t generate, const Binning& b,
                   std::vector<int64_t>& counts, int64_t& outside, const std::atomic<bool>& stop) const override {
    const double mid = (b.lo + b.hi) / 2, sd = (b.hi - b.lo) / 6;
    return Check(cuda::Histogram(device_, values.data(), values.size(), seed, generate, b.lo, b.hi, b.width(), mid, sd,
                                 b.bins, counts.data(), &outside, &stop),
                 &stop);
  }

  StatusOr<MatMulResult> MatMul(int64_t n, uint64_t seed, int64_t repeat, const std::atomic<bool>& stop) const override {
    MatMulResult r;
    double squares = 0;
    MERIDIAN_RETURN_IF_ERROR(
        Check(cuda::MatMul(device_, n, seed, repeat, &stop, &r.sum, &squares, &r.gemm_seconds), &stop));
    r.frobenius = std::sqrt(squares);
    return r;
  }

  Status Sha256d(std::span<const uint8_t> messages, size_t length, std::span<uint8_t> digests) const override {
    MERIDIAN_RETURN_IF_ERROR(CheckSha256dArgs(messages, length, digests));
    return Check(cuda::Sha256d(device_, messages.data(), length, messages.size() / length, digests.data()), nullptr);
  }

  Status Simulate(int32_t qubits, std::span<const QGate> gates, std::vector<double>& state,
                  const std::atomic<bool>& stop) const override {
    if (qubits < 1 || qubits > kMaxGpuQubits) {
      return InvalidArgumentError(fmt::format("{} qubits: a GPU simulates 1 to {}", qubits, kMaxGpuQubits));
    }
    MERIDIAN_RETURN_IF_ERROR(CheckGates(qubits, gates));
    state.assign(uint64_t{2} << qubits, 0.0);
    return Check(cuda::Simulate(device_, qubits, gates.data(), gates.size(), state.data(), &stop), &stop);
  }

  Status WindowStats(std::span<const double> values, std::span<const int64_t> offsets,
                     std::span<WindowStat> out) const override {
    MERIDIAN_RETURN_IF_ERROR(CheckWindowStatsArgs(values, offsets, out));
    return Check(cuda::WindowStats(device_, values.data(), values.size(), offsets.data(), out.size(), out.data()),
                 nullptr);
  }

  Status MlpGradient(const MlpShape& shape, std::span<const float> params, std::span<const float> x,
                     std::span<const int32_t> labels, std::span<float> grad, double* loss) const override {
    MERIDIAN_RETURN_IF_ERROR(CheckMlpArgs(shape, params, x, labels, grad));
    return Check(cuda::MlpGradient(device_, shape.inputs, shape.hidden, shape.classes, params.data(), x.data(),
                                   labels.data(), static_cast<int64_t>(labels.size()), grad.data(), loss),
                 nullptr);
  }

  StatusOr<std::unique_ptr<MlpOnDevice>> LoadMlp(const MlpShape& shape, std::span<const float> params) const override;

 private:
  Status Check(const std::string& error, const std::atomic<bool>* stop) const {
    if (stop != nullptr && stop->load()) return Status(StatusCode::kCancelled, "stopped");
    if (error.empty()) return OkStatus();
    return InternalError(fmt::format("{}: {}", name_, error));
  }

  int device_;
  std::string name_;
};

class CudaMlp final : public MlpOnDevice {
 public:
  CudaMlp(const MlpShape& shape, cuda::MlpWeights* weights, std::string name)
      : shape_(shape), weights_(weights), name_(std::move(name)) {}
  ~CudaMlp() override { cuda::MlpFree(weights_); }
  CudaMlp(const CudaMlp&) = delete;
  CudaMlp& operator=(const CudaMlp&) = delete;

  const MlpShape& shape() const override { return shape_; }
  Status Logits(std::span<const float> x, std::span<float> logits) const override {
    MERIDIAN_RETURN_IF_ERROR(CheckMlpLogitsArgs(shape_, x, logits));
    const auto images = static_cast<int64_t>(x.size() / static_cast<size_t>(shape_.inputs));
    if (std::string e = cuda::MlpLogits(weights_, x.data(), images, logits.data()); !e.empty()) {
      return InternalError(fmt::format("{}: {}", name_, e));
    }
    return OkStatus();
  }

 private:
  MlpShape shape_;
  cuda::MlpWeights* weights_;
  std::string name_;
};

StatusOr<std::unique_ptr<MlpOnDevice>> CudaOps::LoadMlp(const MlpShape& shape, std::span<const float> params) const {
  MERIDIAN_RETURN_IF_ERROR(CheckMlpParams(shape, params));
  cuda::MlpWeights* weights = nullptr;
  if (std::string e = cuda::MlpLoad(device_, shape.inputs, shape.hidden, shape.classes, params.data(), &weights);
      !e.empty()) {
    return InternalError(fmt::format("{}: {}", name_, e));
  }
  return std::unique_ptr<MlpOnDevice>(std::make_unique<CudaMlp>(shape, weights, name_));
}

}  // namespace

StatusOr<const Ops*> GpuOps(int device) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<CudaOps>> made;
  std::lock_guard<std::mutex> lock(mu);
  auto it = made.find(device);
  if (it != made.end()) return it->second.get();
  std::string name;
  if (std::string e = cuda::DeviceName(device, &name); !e.empty()) {
    return UnavailableError(fmt::format("CUDA device {}: {}", device, e));
  }
  auto ops = std::make_unique<CudaOps>(device, name);
  const Ops* out = ops.get();
  made.emplace(device, std::move(ops));
  return out;
}

}  // namespace meridian::kernels
