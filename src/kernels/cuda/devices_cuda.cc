// Device discovery through the CUDA runtime (host code; no kernels here).
#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "kernels/devices.h"

namespace meridian::kernels {

bool BuiltWithCuda() { return true; }

std::vector<GpuInfo> DiscoverGpus(std::string* note) {
  std::vector<GpuInfo> out;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (note) *note = fmt::format("no NVIDIA GPU or driver here (CUDA: {})", cudaGetErrorString(err));
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back(GpuInfo{i, prop.name, static_cast<int64_t>(prop.totalGlobalMem), prop.major, prop.minor});
  }
  if (note) *note = fmt::format("{} CUDA device(s)", out.size());
  return out;
}

}  // namespace meridian::kernels
