// The reference implementation of kernels/ops.h: plain loops, one thread per call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <sodium.h>

#include "kernels/cpu/statevector.h"
#include "kernels/generate.h"
#include "kernels/ops.h"

namespace meridian::kernels {
namespace {

Status Stopped() { return Status(StatusCode::kCancelled, "stopped"); }

class CpuOpsImpl final : public Ops {
 public:
  // libsodium chooses its implementations for this CPU once, before any use (and may be
  // asked again: it is idempotent and thread-safe).
  CpuOpsImpl() { MERIDIAN_CHECK(sodium_init() >= 0); }

  std::string name() const override { return "cpu"; }
  bool is_gpu() const override { return false; }

  StatusOr<__int128> Sum(std::span<const int64_t> values) const override {
    __int128 total = 0;
    for (int64_t v : values) total += v;
    return total;
  }

  Status Sort(std::vector<int64_t>& values, uint64_t seed, int64_t generate, int64_t lo, int64_t hi,
              const std::atomic<bool>& stop) const override {
    const size_t base = values.size();
    values.resize(base + static_cast<size_t>(generate));
    const uint64_t span = static_cast<uint64_t>(hi - lo);
    for (int64_t i = 0; i < generate; ++i) {
      if ((i & 0xFFFFF) == 0 && stop.load()) return Stopped();
      values[base + i] = gen::Int(seed, static_cast<uint64_t>(i), lo, span);
    }
    if (stop.load()) return Stopped();
    std::sort(values.begin(), values.end());
    return OkStatus();
  }

  Status Histogram(std::span<const double> values, uint64_t seed, int64_t generate, const Binning& b,
                   std::vector<int64_t>& counts, int64_t& outside, const std::atomic<bool>& stop) const override {
    const double width = b.width();
    auto add = [&](double v) {
      int64_t bin = gen::Bin(v, b.lo, b.hi, width, b.bins);
      if (bin < 0) {
        ++outside;
      } else {
        ++counts[bin];
      }
    };
    for (double v : values) add(v);
    const double mid = (b.lo + b.hi) / 2, sd = (b.hi - b.lo) / 6;
    for (int64_t i = 0; i < generate; ++i) {
      if ((i & 0xFFFF) == 0 && stop.load()) return Stopped();
      add(gen::Affine(mid, sd, gen::Normal(seed, static_cast<uint64_t>(i))));
    }
    return OkStatus();
  }

  StatusOr<MatMulResult> MatMul(int64_t n, uint64_t seed, int64_t repeat, const std::atomic<bool>& stop) const override {
    if (n > kMaxCpuMatMulN) {
      return InvalidArgumentError(fmt::format("n={} is above the CPU's limit of {}; ask for a GPU", n, kMaxCpuMatMulN));
    }
    const size_t sz = static_cast<size_t>(n) * n;
    std::vector<double> a(sz), b(sz), c(sz);
    for (size_t i = 0; i < sz; ++i) {
      a[i] = gen::Signed(seed, 2 * i);
      b[i] = gen::Signed(seed, 2 * i + 1);
    }
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < repeat; ++r) {
      std::fill(c.begin(), c.end(), 0.0);
      // i-k-j order: the inner loop streams rows of B and C.
      for (int64_t i = 0; i < n; ++i) {
        if (stop.load()) return Stopped();
        double* ci = &c[i * n];
        for (int64_t k = 0; k < n; ++k) {
          const double aik = a[i * n + k];
          const double* bk = &b[k * n];
          for (int64_t j = 0; j < n; ++j) ci[j] += aik * bk[j];
        }
      }
    }
    MatMulResult out;
    out.gemm_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double sq = 0;
    for (double x : c) {
      out.sum += x;
      sq += x * x;
    }
    out.frobenius = std::sqrt(sq);
    return out;
  }

  Status Simulate(int32_t qubits, std::span<const QGate> gates, std::vector<double>& state,
                  const std::atomic<bool>& stop) const override {
    if (qubits < 1 || qubits > kMaxCpuQubits) {
      return InvalidArgumentError(
          fmt::format("{} qubits: the CPU simulates 1 to {} (16 bytes an amplitude); ask for a GPU", qubits, kMaxCpuQubits));
    }
    MERIDIAN_RETURN_IF_ERROR(CheckGates(qubits, gates));
    return SimulateOnCpu(qubits, gates, state, stop);
  }

  Status Sha256d(std::span<const uint8_t> messages, size_t length, std::span<uint8_t> digests) const override {
    MERIDIAN_RETURN_IF_ERROR(CheckSha256dArgs(messages, length, digests));
    const size_t count = messages.size() / length;
    uint8_t first[crypto_hash_sha256_BYTES];
    for (size_t i = 0; i < count; ++i) {
      crypto_hash_sha256(first, messages.data() + i * length, length);
      crypto_hash_sha256(digests.data() + i * crypto_hash_sha256_BYTES, first, sizeof(first));
    }
    return OkStatus();
  }

  Status WindowStats(std::span<const double> values, std::span<const int64_t> offsets,
                     std::span<WindowStat> out) const override {
    MERIDIAN_RETURN_IF_ERROR(CheckWindowStatsArgs(values, offsets, out));
    for (size_t i = 0; i < out.size(); ++i) {
      out[i] = window::Compute(values.data() + offsets[i], offsets[i + 1] - offsets[i]);
    }
    return OkStatus();
  }

  Status MlpGradient(const MlpShape& shape, std::span<const float> params, std::span<const float> x,
                     std::span<const int32_t> labels, std::span<float> grad, double* loss) const override {
    MERIDIAN_RETURN_IF_ERROR(CheckMlpArgs(shape, params, x, labels, grad));
    const int64_t h = shape.hidden;
    const int32_t classes = shape.classes;
    const float* w2 = params.data() + int64_t{shape.inputs + 1} * h;
    std::fill(grad.begin(), grad.end(), 0.0f);
    float* g1 = grad.data();
    float* gb1 = g1 + int64_t{shape.inputs} * h;
    float* g2 = gb1 + h;
    float* gb2 = g2 + h * classes;
    std::vector<float> hid(static_cast<size_t>(h)), dhid(static_cast<size_t>(h));
    std::vector<float> logits(static_cast<size_t>(classes)), d(static_cast<size_t>(classes));
    double sum = 0.0;
    for (size_t n = 0; n < labels.size(); ++n) {
      const float* xi = x.data() + n * static_cast<size_t>(shape.inputs);
      const int32_t label = labels[n];
      MlpForward(shape, params.data(), xi, hid.data(), logits.data());
      const float top = *std::max_element(logits.begin(), logits.end());
      double z = 0.0;
      for (float l : logits) z += std::exp(static_cast<double>(l - top));
      for (int32_t c = 0; c < classes; ++c) {
        d[c] = static_cast<float>(std::exp(static_cast<double>(logits[c] - top)) / z) - (c == label ? 1.0f : 0.0f);
        gb2[c] += d[c];
      }
      sum += std::log(z) - static_cast<double>(logits[label] - top);
      for (int64_t k = 0; k < h; ++k) {
        const float* row = w2 + k * classes;
        float* grow = g2 + k * classes;
        float back = 0.0f;
        for (int32_t c = 0; c < classes; ++c) {
          grow[c] += hid[k] * d[c];
          back += d[c] * row[c];
        }
        dhid[k] = hid[k] > 0.0f ? back : 0.0f;
        gb1[k] += dhid[k];
      }
      for (int32_t i = 0; i < shape.inputs; ++i) {
        if (xi[i] == 0.0f) continue;
        float* grow = g1 + i * h;
        for (int64_t k = 0; k < h; ++k) grow[k] += xi[i] * dhid[k];
      }
    }
    *loss = sum;
    return OkStatus();
  }

  StatusOr<std::unique_ptr<MlpOnDevice>> LoadMlp(const MlpShape& shape, std::span<const float> params) const override;
};

// The reference: MlpForward image by image.
class CpuMlp final : public MlpOnDevice {
 public:
  CpuMlp(const MlpShape& shape, std::span<const float> params) : shape_(shape), params_(params.begin(), params.end()) {}
  const MlpShape& shape() const override { return shape_; }
  Status Logits(std::span<const float> x, std::span<float> logits) const override {
    MERIDIAN_RETURN_IF_ERROR(CheckMlpLogitsArgs(shape_, x, logits));
    std::vector<float> hid(static_cast<size_t>(shape_.hidden));
    const size_t images = x.size() / static_cast<size_t>(shape_.inputs);
    for (size_t n = 0; n < images; ++n) {
      MlpForward(shape_, params_.data(), x.data() + n * static_cast<size_t>(shape_.inputs), hid.data(),
                 logits.data() + n * static_cast<size_t>(shape_.classes));
    }
    return OkStatus();
  }

 private:
  MlpShape shape_;
  std::vector<float> params_;
};

StatusOr<std::unique_ptr<MlpOnDevice>> CpuOpsImpl::LoadMlp(const MlpShape& shape, std::span<const float> params) const {
  MERIDIAN_RETURN_IF_ERROR(CheckMlpParams(shape, params));
  return std::unique_ptr<MlpOnDevice>(std::make_unique<CpuMlp>(shape, params));
}

}  // namespace

void MlpForward(const MlpShape& shape, const float* params, const float* x, float* hid, float* logits) {
  const int64_t h = shape.hidden;
  const int32_t classes = shape.classes;
  const float* w1 = params;
  const float* b1 = w1 + int64_t{shape.inputs} * h;
  const float* w2 = b1 + h;
  const float* b2 = w2 + h * classes;
  std::copy(b1, b1 + h, hid);
  for (int32_t i = 0; i < shape.inputs; ++i) {
    if (x[i] == 0.0f) continue;
    const float* row = w1 + i * h;
    for (int64_t k = 0; k < h; ++k) hid[k] += x[i] * row[k];
  }
  for (int64_t k = 0; k < h; ++k) hid[k] = std::max(hid[k], 0.0f);
  std::copy(b2, b2 + classes, logits);
  for (int64_t k = 0; k < h; ++k) {
    if (hid[k] == 0.0f) continue;
    const float* row = w2 + k * classes;
    for (int32_t c = 0; c < classes; ++c) logits[c] += hid[k] * row[c];
  }
}

namespace {

Status CheckMlpWidths(const MlpShape& shape) {
  for (const auto& [what, v] : {std::pair{"inputs", shape.inputs}, {"hidden", shape.hidden}, {"classes", shape.classes}}) {
    if (v < 1 || v > kMaxMlpWidth) return InvalidArgumentError(fmt::format("{} {}: expected 1..{}", what, v, kMaxMlpWidth));
  }
  return OkStatus();
}

}  // namespace

Status CheckMlpArgs(const MlpShape& shape, std::span<const float> params, std::span<const float> x,
                    std::span<const int32_t> labels, std::span<const float> grad) {
  MERIDIAN_RETURN_IF_ERROR(CheckMlpWidths(shape));
  const auto images = static_cast<int64_t>(labels.size());
  if (images > kMaxMlpImages) {
    return InvalidArgumentError(fmt::format("{} images in one gradient: at most {}", images, kMaxMlpImages));
  }
  const auto p = static_cast<size_t>(shape.parameters());
  if (params.size() != p || grad.size() != p || x.size() != static_cast<size_t>(images * shape.inputs)) {
    return InvalidArgumentError(fmt::format("an MLP of {} parameters over {} images of {} inputs was given {} "
                                            "parameters, {} gradient slots and {} inputs",
                                            p, images, shape.inputs, params.size(), grad.size(), x.size()));
  }
  for (size_t n = 0; n < labels.size(); ++n) {
    if (labels[n] < 0 || labels[n] >= shape.classes) {
      return InvalidArgumentError(fmt::format("image {}: label {} is not one of {} classes", n, labels[n], shape.classes));
    }
  }
  return OkStatus();
}

Status CheckMlpParams(const MlpShape& shape, std::span<const float> params) {
  MERIDIAN_RETURN_IF_ERROR(CheckMlpWidths(shape));
  if (params.size() != static_cast<size_t>(shape.parameters())) {
    return InvalidArgumentError(
        fmt::format("an MLP of {} parameters was given {}", shape.parameters(), params.size()));
  }
  return OkStatus();
}

Status CheckMlpLogitsArgs(const MlpShape& shape, std::span<const float> x, std::span<const float> logits) {
  const auto inputs = static_cast<size_t>(shape.inputs);
  const size_t images = x.size() / inputs;
  if (x.size() % inputs != 0 || logits.size() != images * static_cast<size_t>(shape.classes)) {
    return InvalidArgumentError(fmt::format("{} inputs are not whole images of {} with room for {} classes each in {} "
                                            "logits",
                                            x.size(), inputs, shape.classes, logits.size()));
  }
  if (images > static_cast<size_t>(kMaxMlpImages)) {
    return InvalidArgumentError(fmt::format("{} images in one batch: at most {}", images, kMaxMlpImages));
  }
  return OkStatus();
}

Status CheckGates(int32_t qubits, std::span<const QGate> gates) {
  for (size_t k = 0; k < gates.size(); ++k) {
    const QGate& g = gates[k];
    if (static_cast<int32_t>(g.target) >= qubits || (qubits < 64 && (g.controls >> qubits) != 0) ||
        (g.controls >> g.target) & 1) {
      return InvalidArgumentError(fmt::format("gate {}: target {} or controls {:#x} outside {} qubits, or the target "
                                              "among its controls", k, g.target, g.controls, qubits));
    }
  }
  return OkStatus();
}

Status CheckWindowStatsArgs(std::span<const double> values, std::span<const int64_t> offsets,
                            std::span<const WindowStat> out) {
  if (offsets.size() != out.size() + 1) {
    return InvalidArgumentError(fmt::format("{} windows need {} offsets, not {}", out.size(), out.size() + 1,
                                            offsets.size()));
  }
  if (offsets.front() != 0 || offsets.back() != static_cast<int64_t>(values.size())) {
    return InvalidArgumentError("window offsets must run from 0 to the number of values");
  }
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    if (offsets[i + 1] <= offsets[i]) return InvalidArgumentError(fmt::format("window {} is empty", i));
  }
  return OkStatus();
}

Status CheckSha256dArgs(std::span<const uint8_t> messages, size_t length, std::span<uint8_t> digests) {
  if (length == 0 || messages.size() % length != 0) {
    return InvalidArgumentError(fmt::format("{} bytes are not whole messages of {} bytes", messages.size(), length));
  }
  if (digests.size() != messages.size() / length * 32) {
    return InvalidArgumentError(
        fmt::format("{} messages need {} bytes of digests, not {}", messages.size() / length,
                    messages.size() / length * 32, digests.size()));
  }
  return OkStatus();
}

const Ops& CpuOps() {
  static const CpuOpsImpl ops;
  return ops;
}

}  // namespace meridian::kernels
