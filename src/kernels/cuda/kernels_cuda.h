// The CUDA side of kernels/ops.h, as a plain C++ interface compiled by nvcc
// (kernels_cuda.cu) and used by ops_cuda.cc. Only the plain host-and-device headers
// (generate.h, qgate.h, sha256.h) cross this line, so the CUDA compiler sees no more
// of the project than those.
//
// Every function makes `device` current on the calling thread, works on the thread's
// own stream (cudaStreamPerThread), waits for the result, and returns an empty string
// on success or what failed.
//
// Thread-safety: any number of threads may call at once.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/qgate.h"
#include "kernels/window_stats.h"

namespace meridian::kernels::cuda {

std::string DeviceName(int device, std::string* name);

// *total = the exact sum of values[0..n).
std::string Sum(int device, const int64_t* values, size_t n, __int128* total);

// values[given .. given + generate) = gen::Int(seed, i, lo, span); then all of
// values[0 .. given + generate) sorted ascending (CUB radix sort).
std::string Sort(int device, int64_t* values, size_t given, size_t generate, uint64_t seed, int64_t lo, uint64_t span,
                 const std::atomic<bool>* stop);

// Bins values[0..n) and `generate` samples gen::Affine(mid, sd, gen::Normal(seed, i))
// over [lo, hi) in `bins` bins of `width`; adds to counts[0..bins) and *outside.
std::string Histogram(int device, const double* values, size_t n, uint64_t seed, int64_t generate, double lo, double hi,
                      double width, double mid, double sd, int64_t bins, int64_t* counts, int64_t* outside,
                      const std::atomic<bool>* stop);

// C = A * B (cuBLAS DGEMM), `repeat` times, for generated n x n row-major A and B;
// the sum and the sum of squares of C, and the GEMMs' device time in seconds.
std::string MatMul(int device, int64_t n, uint64_t seed, int64_t repeat, const std::atomic<bool>* stop, double* sum,
                   double* sum_squares, double* gemm_seconds);

// digests[32 i .. 32 i + 32) = SHA-256(SHA-256(messages[length i .. length (i + 1))))
// for i < count.
std::string Sha256d(int device, const uint8_t* messages, size_t length, size_t count, uint8_t* digests);

// state[0 .. 2^(qubits+1)) = the (re, im) amplitudes after gates[0..count) from |0...0>,
// one gate after another on the device, a thread per amplitude pair.
std::string Simulate(int device, int32_t qubits, const QGate* gates, size_t count, double* state,
                     const std::atomic<bool>* stop);

// The built-in trainer's gradient (kernels/ops.h, MlpGradient): grad[0..parameters)
// and *loss for `images` rows of x (row-major, `inputs` a row) with their labels, the
// parameters laid out w1, b1, w2, b2. Four SGEMMs (cuBLAS) and small kernels; every
// sum over images runs in a fixed order, so a call's result is the same every time.
std::string MlpGradient(int device, int32_t inputs, int32_t hidden, int32_t classes, const float* params,
                        const float* x, const int32_t* labels, int64_t images, float* grad, double* loss);

// A perceptron's parameters on a device, for inference (kernels/ops.h, MlpOnDevice).
struct MlpWeights;
// *out = `params` (laid out w1, b1, w2, b2) copied to `device`; MlpFree frees it.
std::string MlpLoad(int device, int32_t inputs, int32_t hidden, int32_t classes, const float* params,
                    MlpWeights** out);
// logits[0 .. images * classes) of x[0 .. images * inputs): two SGEMMs (cuBLAS) and
// bias-and-ReLU kernels, the forward pass of MlpGradient. One batch at a time for
// each MlpWeights (calls take turns).
std::string MlpLogits(MlpWeights* weights, const float* x, int64_t images, float* logits);
void MlpFree(MlpWeights* weights);

// A stream's window figures (kernels/ops.h, WindowStats): one thread per window, each
// computing kernels/window_stats.h's Compute over its values, as the CPU does.
std::string WindowStats(int device, const double* values, size_t count, const int64_t* offsets, size_t windows,
                        WindowStat* out);

}  // namespace meridian::kernels::cuda
