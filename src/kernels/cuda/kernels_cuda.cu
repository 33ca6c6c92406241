// CUDA implementations of the built-in kernels' compute (see kernels_cuda.h): a
// grid-stride 128-bit sum, a shared-memory histogram, CUB's radix sort and cuBLAS's
// DGEMM. Generated data comes from kernels/generate.h, element by element, so it
// matches the CPU reference exactly.
//
// cuBLAS is opened with dlopen on first use rather than linked: every Meridian process
// would otherwise map its 600 MB of libraries at start, GPU or not.
#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <vector>

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/cuda/kernels_cuda.h"
#include "kernels/cuda/open_library.h"
#include "kernels/generate.h"
#include "kernels/qgate.h"
#include "kernels/sha256.h"

namespace meridian::kernels::cuda {
namespace {

constexpr int kThreads = 256;

std::string Error(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

#define MERIDIAN_CUDA_TRY(expr)                           \
  do {                                                    \
    cudaError_t e_ = (expr);                              \
    if (e_ != cudaSuccess) return Error(#expr, e_);       \
  } while (0)

// Device memory freed when it goes out of scope.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }
  void Reset() {
    if (ptr != nullptr) cudaFree(ptr);
    ptr = nullptr;
  }
  cudaError_t Allocate(size_t count) { return cudaMalloc(&ptr, count == 0 ? 1 : count * sizeof(T)); }
};

int Blocks(size_t n, int cap) {
  size_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  return static_cast<int>(b < static_cast<size_t>(cap) ? b : cap);
}

std::string Begin(int device) {
  MERIDIAN_CUDA_TRY(cudaSetDevice(device));
  // Clear an error an earlier call on this thread left (say, a device that does not
  // exist), so that Finish reports this call's errors only.
  cudaGetLastError();
  return {};
}

std::string Finish(const char* what) {
  cudaError_t e = cudaStreamSynchronize(cudaStreamPerThread);
  if (e == cudaSuccess) e = cudaGetLastError();
  return e == cudaSuccess ? std::string() : Error(what, e);
}

bool Stopped(const std::atomic<bool>* stop) { return stop != nullptr && stop->load(); }

// ---- sum ----

__global__ void SumPartials(const int64_t* values, size_t n, __int128* partials) {
  __int128 acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    acc += values[i];
  }
  // A shared-memory tree: 128-bit values, which CUB's warp shuffles do not take.
  __shared__ __int128 shared[kThreads];
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

// ---- sort ----

__global__ void GenerateInts(int64_t* out, size_t count, uint64_t seed, int64_t lo, uint64_t span) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = gen::Int(seed, i, lo, span);
  }
}

// ---- histogram ----

// counts has bins + 1 slots; the last counts values outside [lo, hi).
__global__ void HistogramKernel(const double* values, size_t n, uint64_t seed, uint64_t generate, double lo, double hi,
                                double width, double mid, double sd, int bins, unsigned long long* counts) {
  extern __shared__ unsigned long long local[];
  for (int b = threadIdx.x; b <= bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const size_t total = n + generate;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    double v = i < n ? values[i] : gen::Affine(mid, sd, gen::Normal(seed, i - n));
    int64_t b = gen::Bin(v, lo, hi, width, bins);
    atomicAdd(&local[b < 0 ? bins : b], 1ull);
  }
  __syncthreads();
  for (int b = threadIdx.x; b <= bins; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&counts[b], local[b]);
  }
}

// ---- matmul ----

__global__ void GenerateMatrices(double* a, double* b, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    a[i] = gen::Signed(seed, 2 * i);
    b[i] = gen::Signed(seed, 2 * i + 1);
  }
}

struct SumAndSquares {
  double sum;
  double squares;
};

struct AddSumAndSquares {
  __device__ SumAndSquares operator()(const SumAndSquares& x, const SumAndSquares& y) const {
    return {x.sum + y.sum, x.squares + y.squares};
  }
};

__global__ void ChecksumPartials(const double* c, size_t count, SumAndSquares* partials) {
  SumAndSquares acc{0.0, 0.0};
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    acc.sum += c[i];
    acc.squares += c[i] * c[i];
  }
  using Reduce = cub::BlockReduce<SumAndSquares, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  SumAndSquares total = Reduce(temp).Reduce(acc, AddSumAndSquares());
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// ---- sha256d ----

// One message per thread: the same code as the host's kernels/sha256.h.
__global__ void Sha256dKernel(const uint8_t* messages, size_t length, size_t count, uint8_t* digests) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    sha256::DoubleDigest(messages + i * length, length, digests + i * sha256::kDigestBytes);
  }
}

// ---- state-vector simulation ----

__global__ void ApplyGateKernel(double* state, uint64_t pairs, QGate g) {
  for (uint64_t p = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; p < pairs;
       p += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    qsim::ApplyPair(state, p, g);
  }
}

// ---- a stream's windows ----

__global__ void WindowStatsKernel(const double* values, const int64_t* offsets, size_t windows, WindowStat* out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < windows;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = window::Compute(values + offsets[i], offsets[i + 1] - offsets[i]);
  }
}

// ---- the trainer's perceptron ----

// m[r * cols + c] += bias[c], then max(0, .) when relu.
__global__ void AddBias(float* m, const float* bias, int64_t rows, int32_t cols, bool relu) {
  const uint64_t total = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float v = m[i] + bias[i % static_cast<uint64_t>(cols)];
    m[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

// Row by row, as the CPU does: d = softmax(logits) - onehot(label), and the row's loss
// log(sum exp(l - top)) - (l[label] - top), in double where the CPU uses double.
__global__ void SoftmaxCrossEntropy(const float* logits, const int32_t* labels, int64_t rows, int32_t classes,
                                    float* d, double* row_loss) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* l = logits + r * classes;
    float top = l[0];
    for (int32_t c = 1; c < classes; ++c) top = fmaxf(top, l[c]);
    double z = 0.0;
    for (int32_t c = 0; c < classes; ++c) z += exp(static_cast<double>(l[c] - top));
    const int32_t label = labels[r];
    for (int32_t c = 0; c < classes; ++c) {
      d[r * classes + c] = static_cast<float>(exp(static_cast<double>(l[c] - top)) / z) - (c == label ? 1.0f : 0.0f);
    }
    row_loss[r] = log(z) - static_cast<double>(l[label] - top);
  }
}

// out[c] = sum over rows of m[r * cols + c], rows in order: one thread a column.
__global__ void ColumnSums(const float* m, int64_t rows, int32_t cols, float* out) {
  for (int32_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (int64_t r = 0; r < rows; ++r) acc += m[r * cols + c];
    out[c] = acc;
  }
}

// dh *= (h > 0): the ReLU's gradient.
__global__ void ReluBackward(float* dh, const float* h, uint64_t n) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    if (!(h[i] > 0.0f)) dh[i] = 0.0f;
  }
}

// cuBLAS, opened once.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasDgemm_v2) dgemm = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  std::string error;
};

const Cublas& LoadCublas() {
  static const Cublas lib = [] {
    Cublas c;
    const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* h = OpenLibrary(soname, &c.error);
    if (h == nullptr) return c;
    c.create = reinterpret_cast<decltype(c.create)>(dlsym(h, "cublasCreate_v2"));
    c.set_stream = reinterpret_cast<decltype(c.set_stream)>(dlsym(h, "cublasSetStream_v2"));
    c.dgemm = reinterpret_cast<decltype(c.dgemm)>(dlsym(h, "cublasDgemm_v2"));
    c.sgemm = reinterpret_cast<decltype(c.sgemm)>(dlsym(h, "cublasSgemm_v2"));
    if (!c.create || !c.set_stream || !c.dgemm || !c.sgemm) {
      c.error = soname + " lacks cublasCreate/SetStream/Dgemm/Sgemm";
    }
    return c;
  }();
  return lib;
}

// One handle per thread and device, made on first use and kept for the thread's life
// (the kernel threads of an agent live as long as it does). Never destroyed: at exit
// the CUDA runtime may already be gone.
std::string Handle(int device, cublasHandle_t* out) {
  const Cublas& lib = LoadCublas();
  if (!lib.error.empty()) return lib.error;
  thread_local std::vector<std::pair<int, cublasHandle_t>> handles;
  for (const auto& [d, h] : handles) {
    if (d == device) {
      *out = h;
      return {};
    }
  }
  cublasHandle_t h = nullptr;
  cublasStatus_t s = lib.create(&h);
  if (s != CUBLAS_STATUS_SUCCESS) return "cublasCreate failed with status " + std::to_string(static_cast<int>(s));
  s = lib.set_stream(h, cudaStreamPerThread);
  if (s != CUBLAS_STATUS_SUCCESS) return "cublasSetStream failed with status " + std::to_string(static_cast<int>(s));
  handles.emplace_back(device, h);
  *out = h;
  return {};
}

}  // namespace

std::string DeviceName(int device, std::string* name) {
  cudaDeviceProp prop{};
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  cudaGetLastError();  // not sticky: later calls on this thread start clean
  if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
    return std::string("no NVIDIA GPU or driver on this machine (CUDA: ") + cudaGetErrorString(e) + ")";
  }
  if (e != cudaSuccess) return Error("cudaGetDeviceProperties", e);
  *name = prop.name;
  return {};
}

std::string Sum(int device, const int64_t* values, size_t n, __int128* total) {
  if (std::string e = Begin(device); !e.empty()) return e;
  *total = 0;
  if (n == 0) return {};
  DeviceBuffer<int64_t> d_values;
  MERIDIAN_CUDA_TRY(d_values.Allocate(n));
  const int blocks = Blocks(n, 1024);
  DeviceBuffer<__int128> d_partials;
  MERIDIAN_CUDA_TRY(d_partials.Allocate(blocks));
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(d_values.ptr, values, n * sizeof(int64_t), cudaMemcpyHostToDevice, cudaStreamPerThread));
  SumPartials<<<blocks, kThreads, 0, cudaStreamPerThread>>>(d_values.ptr, n, d_partials.ptr);
  std::vector<__int128> partials(blocks);
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(partials.data(), d_partials.ptr, blocks * sizeof(__int128), cudaMemcpyDeviceToHost,
                                    cudaStreamPerThread));
  if (std::string e = Finish("sum"); !e.empty()) return e;
  for (__int128 p : partials) *total += p;
  return {};
}

std::string Sort(int device, int64_t* values, size_t given, size_t generate, uint64_t seed, int64_t lo, uint64_t span,
                 const std::atomic<bool>* stop) {
  if (std::string e = Begin(device); !e.empty()) return e;
  const size_t n = given + generate;
  if (n == 0) return {};
  DeviceBuffer<int64_t> d_in, d_out;
  MERIDIAN_CUDA_TRY(d_in.Allocate(n));
  MERIDIAN_CUDA_TRY(d_out.Allocate(n));
  if (given > 0) {
    MERIDIAN_CUDA_TRY(cudaMemcpyAsync(d_in.ptr, values, given * sizeof(int64_t), cudaMemcpyHostToDevice, cudaStreamPerThread));
  }
  if (generate > 0) {
    GenerateInts<<<Blocks(generate, 4096), kThreads, 0, cudaStreamPerThread>>>(d_in.ptr + given, generate, seed, lo, span);
  }
  size_t temp_bytes = 0;
  MERIDIAN_CUDA_TRY(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, d_in.ptr, d_out.ptr, n, 0, 64, cudaStreamPerThread));
  DeviceBuffer<char> temp;
  MERIDIAN_CUDA_TRY(temp.Allocate(temp_bytes));
  if (Stopped(stop)) return "stopped";
  MERIDIAN_CUDA_TRY(cub::DeviceRadixSort::SortKeys(temp.ptr, temp_bytes, d_in.ptr, d_out.ptr, n, 0, 64, cudaStreamPerThread));
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(values, d_out.ptr, n * sizeof(int64_t), cudaMemcpyDeviceToHost, cudaStreamPerThread));
  return Finish("sort");
}

std::string Histogram(int device, const double* values, size_t n, uint64_t seed, int64_t generate, double lo, double hi,
                      double width, double mid, double sd, int64_t bins, int64_t* counts, int64_t* outside,
                      const std::atomic<bool>* stop) {
  if (std::string e = Begin(device); !e.empty()) return e;
  const size_t total = n + static_cast<size_t>(generate);
  if (total == 0) return {};
  DeviceBuffer<double> d_values;
  MERIDIAN_CUDA_TRY(d_values.Allocate(n));
  DeviceBuffer<unsigned long long> d_counts;
  MERIDIAN_CUDA_TRY(d_counts.Allocate(bins + 1));
  MERIDIAN_CUDA_TRY(cudaMemsetAsync(d_counts.ptr, 0, (bins + 1) * sizeof(unsigned long long), cudaStreamPerThread));
  if (n > 0) {
    MERIDIAN_CUDA_TRY(cudaMemcpyAsync(d_values.ptr, values, n * sizeof(double), cudaMemcpyHostToDevice, cudaStreamPerThread));
  }
  if (Stopped(stop)) return "stopped";
  const size_t shared = (bins + 1) * sizeof(unsigned long long);
  HistogramKernel<<<Blocks(total, 1024), kThreads, shared, cudaStreamPerThread>>>(
      d_values.ptr, n, seed, static_cast<uint64_t>(generate), lo, hi, width, mid, sd, static_cast<int>(bins), d_counts.ptr);
  std::vector<unsigned long long> got(bins + 1);
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(got.data(), d_counts.ptr, got.size() * sizeof(unsigned long long),
                                    cudaMemcpyDeviceToHost, cudaStreamPerThread));
  if (std::string e = Finish("histogram"); !e.empty()) return e;
  for (int64_t b = 0; b < bins; ++b) counts[b] += static_cast<int64_t>(got[b]);
  *outside += static_cast<int64_t>(got[bins]);
  return {};
}

std::string MatMul(int device, int64_t n, uint64_t seed, int64_t repeat, const std::atomic<bool>* stop, double* sum,
                   double* sum_squares, double* gemm_seconds) {
  if (std::string e = Begin(device); !e.empty()) return e;
  cublasHandle_t handle = nullptr;
  if (std::string e = Handle(device, &handle); !e.empty()) return e;
  const Cublas& lib = LoadCublas();
  const size_t count = static_cast<size_t>(n) * static_cast<size_t>(n);
  DeviceBuffer<double> a, b, c;
  MERIDIAN_CUDA_TRY(a.Allocate(count));
  MERIDIAN_CUDA_TRY(b.Allocate(count));
  MERIDIAN_CUDA_TRY(c.Allocate(count));
  GenerateMatrices<<<Blocks(count, 8192), kThreads, 0, cudaStreamPerThread>>>(a.ptr, b.ptr, count, seed);
  cudaEvent_t start = nullptr, end = nullptr;
  MERIDIAN_CUDA_TRY(cudaEventCreate(&start));
  MERIDIAN_CUDA_TRY(cudaEventCreate(&end));
  struct Events {
    cudaEvent_t s, e;
    ~Events() {
      cudaEventDestroy(s);
      cudaEventDestroy(e);
    }
  } events{start, end};
  MERIDIAN_CUDA_TRY(cudaEventRecord(start, cudaStreamPerThread));
  // Row-major C = A B is column-major C^T = B^T A^T: hand cuBLAS B first.
  const double one = 1.0, zero = 0.0;
  const int dim = static_cast<int>(n);
  for (int64_t r = 0; r < repeat; ++r) {
    if (Stopped(stop)) {
      cudaStreamSynchronize(cudaStreamPerThread);
      return "stopped";
    }
    cublasStatus_t s = lib.dgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, dim, dim, dim, &one, b.ptr, dim, a.ptr, dim, &zero,
                                 c.ptr, dim);
    if (s != CUBLAS_STATUS_SUCCESS) return "cublasDgemm failed with status " + std::to_string(static_cast<int>(s));
  }
  MERIDIAN_CUDA_TRY(cudaEventRecord(end, cudaStreamPerThread));
  const int blocks = Blocks(count, 1024);
  DeviceBuffer<SumAndSquares> partials;
  MERIDIAN_CUDA_TRY(partials.Allocate(blocks));
  ChecksumPartials<<<blocks, kThreads, 0, cudaStreamPerThread>>>(c.ptr, count, partials.ptr);
  std::vector<SumAndSquares> got(blocks);
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(got.data(), partials.ptr, blocks * sizeof(SumAndSquares), cudaMemcpyDeviceToHost,
                                    cudaStreamPerThread));
  if (std::string e = Finish("matmul"); !e.empty()) return e;
  float ms = 0;
  MERIDIAN_CUDA_TRY(cudaEventElapsedTime(&ms, start, end));
  *gemm_seconds = ms / 1e3;
  *sum = 0;
  *sum_squares = 0;
  for (const SumAndSquares& p : got) {
    *sum += p.sum;
    *sum_squares += p.squares;
  }
  return {};
}

std::string Sha256d(int device, const uint8_t* messages, size_t length, size_t count, uint8_t* digests) {
  if (std::string e = Begin(device); !e.empty()) return e;
  if (count == 0) return {};
  DeviceBuffer<uint8_t> in, out;
  MERIDIAN_CUDA_TRY(in.Allocate(length * count));
  MERIDIAN_CUDA_TRY(out.Allocate(sha256::kDigestBytes * count));
  MERIDIAN_CUDA_TRY(
      cudaMemcpyAsync(in.ptr, messages, length * count, cudaMemcpyHostToDevice, cudaStreamPerThread));
  Sha256dKernel<<<Blocks(count, 4096), kThreads, 0, cudaStreamPerThread>>>(in.ptr, length, count, out.ptr);
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(digests, out.ptr, sha256::kDigestBytes * count, cudaMemcpyDeviceToHost,
                                    cudaStreamPerThread));
  return Finish("sha256d");
}

std::string WindowStats(int device, const double* values, size_t count, const int64_t* offsets, size_t windows,
                        WindowStat* out) {
  if (windows == 0) return {};
  if (std::string e = Begin(device); !e.empty()) return e;
  DeviceBuffer<double> d_values;
  DeviceBuffer<int64_t> d_offsets;
  DeviceBuffer<WindowStat> d_out;
  MERIDIAN_CUDA_TRY(d_values.Allocate(count));
  MERIDIAN_CUDA_TRY(d_offsets.Allocate(windows + 1));
  MERIDIAN_CUDA_TRY(d_out.Allocate(windows));
  cudaStream_t s = cudaStreamPerThread;
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(d_values.ptr, values, count * sizeof(double), cudaMemcpyHostToDevice, s));
  MERIDIAN_CUDA_TRY(
      cudaMemcpyAsync(d_offsets.ptr, offsets, (windows + 1) * sizeof(int64_t), cudaMemcpyHostToDevice, s));
  WindowStatsKernel<<<Blocks(windows, 4096), kThreads, 0, s>>>(d_values.ptr, d_offsets.ptr, windows, d_out.ptr);
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(out, d_out.ptr, windows * sizeof(WindowStat), cudaMemcpyDeviceToHost, s));
  return Finish("window stats");
}

std::string Simulate(int device, int32_t qubits, const QGate* gates, size_t count, double* state,
                     const std::atomic<bool>* stop) {
  if (std::string e = Begin(device); !e.empty()) return e;
  const uint64_t amplitudes = uint64_t{1} << qubits, pairs = amplitudes / 2;
  DeviceBuffer<double> d;
  MERIDIAN_CUDA_TRY(d.Allocate(2 * amplitudes));
  MERIDIAN_CUDA_TRY(cudaMemsetAsync(d.ptr, 0, 2 * amplitudes * sizeof(double), cudaStreamPerThread));
  const double one = 1.0;
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(d.ptr, &one, sizeof(one), cudaMemcpyHostToDevice, cudaStreamPerThread));
  const int blocks = Blocks(pairs, 65536);
  for (size_t k = 0; k < count; ++k) {
    if ((k & 63) == 0 && Stopped(stop)) {
      cudaStreamSynchronize(cudaStreamPerThread);
      return "stopped";
    }
    ApplyGateKernel<<<blocks, kThreads, 0, cudaStreamPerThread>>>(d.ptr, pairs, gates[k]);
  }
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(state, d.ptr, 2 * amplitudes * sizeof(double), cudaMemcpyDeviceToHost,
                                    cudaStreamPerThread));
  return Finish("simulate");
}

}  // namespace meridian::kernels::cuda

namespace meridian::kernels::cuda {
namespace {

// Row-major C[m x n] = op(A)[m x k] op(B)[k x n] (beta 0): cuBLAS is column-major, so
// it computes C^T = op(B)^T op(A)^T, B first. A is stored [k x m] when transposed, else
// [m x k]; B [n x k] when transposed, else [k x n].
std::string RowGemm(cublasHandle_t handle, bool ta, bool tb, int m, int n, int k, const float* a, const float* b,
                    float* c) {
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t s = LoadCublas().sgemm(handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                                        &one, b, tb ? k : n, a, ta ? m : k, &zero, c, n);
  return s == CUBLAS_STATUS_SUCCESS ? std::string() : "cublasSgemm failed with status " + std::to_string(static_cast<int>(s));
}

// The perceptron's forward pass over `images` rows of x, on the thread's stream:
// h = relu(x w1 + b1), logits = h w2 + b2, with `params` (on the device) laid out w1,
// b1, w2, b2.
std::string Forward(cublasHandle_t handle, int32_t inputs, int32_t hidden, int32_t classes, const float* params,
                    const float* x, int64_t images, float* h, float* logits) {
  const float* w1 = params;
  const float* b1 = w1 + static_cast<size_t>(inputs) * hidden;
  const float* w2 = b1 + hidden;
  const float* b2 = w2 + static_cast<size_t>(hidden) * classes;
  const size_t n = static_cast<size_t>(images);
  const int rows = static_cast<int>(images);
  cudaStream_t s = cudaStreamPerThread;
  if (std::string e = RowGemm(handle, false, false, rows, hidden, inputs, x, w1, h); !e.empty()) return e;
  AddBias<<<Blocks(n * hidden, 4096), kThreads, 0, s>>>(h, b1, images, hidden, true);
  if (std::string e = RowGemm(handle, false, false, rows, classes, hidden, h, w2, logits); !e.empty()) return e;
  AddBias<<<Blocks(n * classes, 4096), kThreads, 0, s>>>(logits, b2, images, classes, false);
  return {};
}

}  // namespace

std::string MlpGradient(int device, int32_t inputs, int32_t hidden, int32_t classes, const float* params,
                        const float* x, const int32_t* labels, int64_t images, float* grad, double* loss) {
  const size_t p = static_cast<size_t>(inputs + 1 + classes) * hidden + classes;
  *loss = 0.0;
  if (images == 0) {
    for (size_t i = 0; i < p; ++i) grad[i] = 0.0f;
    return {};
  }
  if (std::string e = Begin(device); !e.empty()) return e;
  cublasHandle_t handle = nullptr;
  if (std::string e = Handle(device, &handle); !e.empty()) return e;
  const size_t n = static_cast<size_t>(images);
  DeviceBuffer<float> d_params, d_grad, d_x, d_h, d_logits, d_d, d_dh;
  DeviceBuffer<int32_t> d_labels;
  DeviceBuffer<double> d_loss;
  MERIDIAN_CUDA_TRY(d_params.Allocate(p));
  MERIDIAN_CUDA_TRY(d_grad.Allocate(p));
  MERIDIAN_CUDA_TRY(d_x.Allocate(n * inputs));
  MERIDIAN_CUDA_TRY(d_h.Allocate(n * hidden));
  MERIDIAN_CUDA_TRY(d_logits.Allocate(n * classes));
  MERIDIAN_CUDA_TRY(d_d.Allocate(n * classes));
  MERIDIAN_CUDA_TRY(d_dh.Allocate(n * hidden));
  MERIDIAN_CUDA_TRY(d_labels.Allocate(n));
  MERIDIAN_CUDA_TRY(d_loss.Allocate(n));
  cudaStream_t s = cudaStreamPerThread;
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(d_params.ptr, params, p * sizeof(float), cudaMemcpyHostToDevice, s));
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(d_x.ptr, x, n * inputs * sizeof(float), cudaMemcpyHostToDevice, s));
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(d_labels.ptr, labels, n * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  const float* w2 = d_params.ptr + static_cast<size_t>(inputs + 1) * hidden;
  float* g1 = d_grad.ptr;
  float* gb1 = g1 + static_cast<size_t>(inputs) * hidden;
  float* g2 = gb1 + hidden;
  float* gb2 = g2 + static_cast<size_t>(hidden) * classes;
  const int rows = static_cast<int>(images);
  if (std::string e = Forward(handle, inputs, hidden, classes, d_params.ptr, d_x.ptr, images, d_h.ptr, d_logits.ptr);
      !e.empty()) {
    return e;
  }
  // Backward: d = softmax - onehot; g2 = h^T d, gb2 = sum d; dh = (d w2^T) * (h > 0);
  // g1 = x^T dh, gb1 = sum dh.
  SoftmaxCrossEntropy<<<Blocks(n, 1024), kThreads, 0, s>>>(d_logits.ptr, d_labels.ptr, images, classes, d_d.ptr,
                                                            d_loss.ptr);
  if (std::string e = RowGemm(handle, true, false, hidden, classes, rows, d_h.ptr, d_d.ptr, g2); !e.empty()) return e;
  ColumnSums<<<Blocks(classes, 1024), kThreads, 0, s>>>(d_d.ptr, images, classes, gb2);
  if (std::string e = RowGemm(handle, false, true, rows, hidden, classes, d_d.ptr, w2, d_dh.ptr); !e.empty()) return e;
  ReluBackward<<<Blocks(n * hidden, 4096), kThreads, 0, s>>>(d_dh.ptr, d_h.ptr, n * hidden);
  if (std::string e = RowGemm(handle, true, false, inputs, hidden, rows, d_x.ptr, d_dh.ptr, g1); !e.empty()) return e;
  ColumnSums<<<Blocks(hidden, 1024), kThreads, 0, s>>>(d_dh.ptr, images, hidden, gb1);
  std::vector<double> row_loss(n);
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(grad, d_grad.ptr, p * sizeof(float), cudaMemcpyDeviceToHost, s));
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(row_loss.data(), d_loss.ptr, n * sizeof(double), cudaMemcpyDeviceToHost, s));
  if (std::string e = Finish("mlp gradient"); !e.empty()) return e;
  for (double l : row_loss) *loss += l;  // in image order, as the CPU sums
  return {};
}

// ---- the perceptron for inference ----

struct MlpWeights {
  int device = 0;
  int32_t inputs = 0, hidden = 0, classes = 0;
  DeviceBuffer<float> params;
  // Scratch for a batch, grown to the largest batch yet; one batch at a time.
  std::mutex mu;
  size_t capacity = 0;  // images
  DeviceBuffer<float> x, h, logits;
};

std::string MlpLoad(int device, int32_t inputs, int32_t hidden, int32_t classes, const float* params,
                    MlpWeights** out) {
  if (std::string e = Begin(device); !e.empty()) return e;
  auto w = std::make_unique<MlpWeights>();
  w->device = device;
  w->inputs = inputs;
  w->hidden = hidden;
  w->classes = classes;
  const size_t p = static_cast<size_t>(inputs + 1 + classes) * hidden + classes;
  MERIDIAN_CUDA_TRY(w->params.Allocate(p));
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(w->params.ptr, params, p * sizeof(float), cudaMemcpyHostToDevice, cudaStreamPerThread));
  if (std::string e = Finish("mlp load"); !e.empty()) return e;
  *out = w.release();
  return {};
}

std::string MlpLogits(MlpWeights* w, const float* x, int64_t images, float* logits) {
  if (images == 0) return {};
  std::lock_guard<std::mutex> lock(w->mu);
  if (std::string e = Begin(w->device); !e.empty()) return e;
  cublasHandle_t handle = nullptr;
  if (std::string e = Handle(w->device, &handle); !e.empty()) return e;
  const size_t n = static_cast<size_t>(images);
  if (n > w->capacity) {
    // Freed and made again, larger: the old scratch is no longer in use (one batch at a time).
    w->x.Reset();
    w->h.Reset();
    w->logits.Reset();
    w->capacity = 0;
    MERIDIAN_CUDA_TRY(w->x.Allocate(n * w->inputs));
    MERIDIAN_CUDA_TRY(w->h.Allocate(n * w->hidden));
    MERIDIAN_CUDA_TRY(w->logits.Allocate(n * w->classes));
    w->capacity = n;
  }
  cudaStream_t s = cudaStreamPerThread;
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(w->x.ptr, x, n * w->inputs * sizeof(float), cudaMemcpyHostToDevice, s));
  if (std::string e = Forward(handle, w->inputs, w->hidden, w->classes, w->params.ptr, w->x.ptr, images, w->h.ptr,
                              w->logits.ptr);
      !e.empty()) {
    return e;
  }
  MERIDIAN_CUDA_TRY(cudaMemcpyAsync(logits, w->logits.ptr, n * w->classes * sizeof(float), cudaMemcpyDeviceToHost, s));
  return Finish("mlp logits");
}

void MlpFree(MlpWeights* w) {
  if (w == nullptr) return;
  cudaSetDevice(w->device);
  delete w;
}

}  // namespace meridian::kernels::cuda
