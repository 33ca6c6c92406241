// The compute steps of the built-in kernels, on one device. The kernels (builtins.cc)
// parse arguments and inputs and format outputs; the heavy part goes through an Ops:
// CpuOps() is the reference, GpuOps(d) runs the same steps on CUDA device d (CUB and
// cuBLAS; src/kernels/cuda/). Both draw generated data from kernels/generate.h, so they
// see the same numbers. Integer results (sums, sorts, histogram counts) are identical
// on both; floating-point sums (the matmul checksums) agree to rounding.
//
// Thread-safety: every method may be called from any number of threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/qgate.h"
#include "kernels/window_stats.h"

namespace meridian::kernels {

struct Binning {
  int64_t bins = 10;
  double lo = 0.0;
  double hi = 1.0;
  double width() const { return (hi - lo) / static_cast<double>(bins); }
};

struct MatMulResult {
  double sum = 0.0;           // of every element of the product
  double frobenius = 0.0;     // sqrt of the sum of squares
  double gemm_seconds = 0.0;  // the products alone (device time on a GPU)
};

// Generated matrices are at most this size on the CPU (the reference is O(n^3)).
inline constexpr int64_t kMaxCpuMatMulN = 4096;
inline constexpr int64_t kMaxGpuMatMulN = 32768;
// State vectors of 16 bytes an amplitude: 16 GiB at 30 qubits, 64 GiB at 32.
inline constexpr int32_t kMaxCpuQubits = 30;
inline constexpr int32_t kMaxGpuQubits = 32;

// The built-in trainer's perceptron (workloads/training): inputs -> hidden (ReLU) ->
// classes, softmax cross-entropy. Its parameters, row-major, one after another: w1
// [inputs x hidden], b1 [hidden], w2 [hidden x classes], b2 [classes].
struct MlpShape {
  int32_t inputs = 64;
  int32_t hidden = 128;
  int32_t classes = 10;
  int64_t parameters() const { return int64_t{inputs + 1 + classes} * hidden + classes; }
};
inline constexpr int32_t kMaxMlpWidth = 4096;     // inputs, hidden units, classes
inline constexpr int64_t kMaxMlpImages = 1 << 20;  // in one call

// A perceptron's parameters held by one device for inference (serving), made by
// Ops::LoadMlp: loaded once, then any number of batches run through them.
//
// Thread-safety: Logits from any number of threads at once (a GPU's take turns).
class MlpOnDevice {
 public:
  virtual ~MlpOnDevice() = default;
  virtual const MlpShape& shape() const = 0;
  // logits (images x classes, row-major) = relu(x w1 + b1) w2 + b2 for x (images x
  // inputs), 0 to kMaxMlpImages images.
  virtual Status Logits(std::span<const float> x, std::span<float> logits) const = 0;
};

class Ops {
 public:
  virtual ~Ops() = default;
  // "cpu" or "cuda:N (NVIDIA H200)".
  virtual std::string name() const = 0;
  virtual bool is_gpu() const = 0;

  // The exact sum of `values`.
  virtual StatusOr<__int128> Sum(std::span<const int64_t> values) const = 0;
  // Appends `generate` integers gen::Int(seed, i, lo, hi - lo) to `values`, then sorts
  // them ascending.
  virtual Status Sort(std::vector<int64_t>& values, uint64_t seed, int64_t generate, int64_t lo, int64_t hi,
                      const std::atomic<bool>& stop) const = 0;
  // Adds `values` and `generate` samples gen::Affine(mid, width/6, gen::Normal(seed, i))
  // to `counts` (b.bins long) or, outside [lo, hi), to `outside`.
  virtual Status Histogram(std::span<const double> values, uint64_t seed, int64_t generate, const Binning& b,
                           std::vector<int64_t>& counts, int64_t& outside, const std::atomic<bool>& stop) const = 0;
  // C = A * B, `repeat` times, for n x n matrices A[i] = gen::Signed(seed, 2i) and
  // B[i] = gen::Signed(seed, 2i + 1) (row-major, double precision); checksums of C.
  virtual StatusOr<MatMulResult> MatMul(int64_t n, uint64_t seed, int64_t repeat,
                                        const std::atomic<bool>& stop) const = 0;
  // digests[32 i, 32 i + 32) = SHA-256(SHA-256(message i)) for the messages of `length`
  // bytes laid end to end in `messages`; digests holds 32 bytes per message. The CPU
  // uses libsodium; a GPU hashes one message per thread (kernels/sha256.h). Identical
  // on both.
  virtual Status Sha256d(std::span<const uint8_t> messages, size_t length, std::span<uint8_t> digests) const = 0;
  // The state of `qubits` qubits after `gates` (kernels/qgate.h), from |0...0>: 2^qubits
  // amplitudes as (re, im) pairs in `state` (its memory reused when it has the room).
  // Every amplitude sees the same operations in the same order, never a fused
  // multiply-add, on the CPU (threads, runs of gates tile by tile in cache:
  // cpu/statevector.h) and a GPU (a thread per amplitude pair): equal values, bit for
  // bit but for the sign of a zero.
  virtual Status Simulate(int32_t qubits, std::span<const QGate> gates, std::vector<double>& state,
                          const std::atomic<bool>& stop) const = 0;
  // grad (shape.parameters() long) = the gradient, under `params`, of the softmax
  // cross-entropy summed over the images x (labels.size() rows of shape.inputs,
  // row-major) with their labels; *loss = that sum. The CPU goes image by image
  // (MlpForward); a GPU runs the batch as four SGEMMs (cuBLAS) and small kernels, so
  // the two agree to float rounding, not bit for bit.
  virtual Status MlpGradient(const MlpShape& shape, std::span<const float> params, std::span<const float> x,
                             std::span<const int32_t> labels, std::span<float> grad, double* loss) const = 0;
  // `params` (shape.parameters() long, laid out as for MlpGradient) copied to the
  // device, for inference. The CPU's Logits is MlpForward image by image; a GPU's runs
  // the batch as two SGEMMs (cuBLAS) and bias kernels, so the two agree to float
  // rounding, not bit for bit.
  virtual StatusOr<std::unique_ptr<MlpOnDevice>> LoadMlp(const MlpShape& shape, std::span<const float> params) const = 0;
  // The figures of windows whose values lie back to back (a stream's windows as they
  // are written, workloads/stream): window i is values[offsets[i], offsets[i + 1]),
  // offsets ascending from 0 to values.size(), every window non-empty; out has one
  // entry per window. Bit-identical on the CPU and a GPU (kernels/window_stats.h).
  virtual Status WindowStats(std::span<const double> values, std::span<const int64_t> offsets,
                             std::span<WindowStat> out) const = 0;
};

// The argument checks every WindowStats makes.
Status CheckWindowStatsArgs(std::span<const double> values, std::span<const int64_t> offsets,
                            std::span<const WindowStat> out);

// The argument checks every MlpGradient makes: widths within kMaxMlpWidth, at most
// kMaxMlpImages images, spans of the shape's sizes, labels below shape.classes.
Status CheckMlpArgs(const MlpShape& shape, std::span<const float> params, std::span<const float> x,
                    std::span<const int32_t> labels, std::span<const float> grad);
// The argument checks of LoadMlp (widths, the parameters' count) and of Logits (x
// whole images, at most kMaxMlpImages, room for their logits).
Status CheckMlpParams(const MlpShape& shape, std::span<const float> params);
Status CheckMlpLogitsArgs(const MlpShape& shape, std::span<const float> x, std::span<const float> logits);
// The CPU reference's forward pass of one image: `hidden` (shape.hidden, after ReLU)
// and `logits` (shape.classes) of input `x` (shape.inputs) under `params`.
void MlpForward(const MlpShape& shape, const float* params, const float* x, float* hidden, float* logits);

// The argument checks every Simulate makes: each gate's target and controls are qubits
// of the state, and the target is not one of its controls.
Status CheckGates(int32_t qubits, std::span<const QGate> gates);
// The argument checks every Sha256d makes (whole messages, room for the digests).
Status CheckSha256dArgs(std::span<const uint8_t> messages, size_t length, std::span<uint8_t> digests);

const Ops& CpuOps();

// CUDA device `device`, created on first use and kept; an error says why there is
// none (a build without the toolkit, no driver, no such device).
StatusOr<const Ops*> GpuOps(int device);

}  // namespace meridian::kernels
