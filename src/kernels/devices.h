// Accelerators found on this machine. With the CUDA toolkit at build time, NVIDIA
// GPUs are found through the CUDA runtime; without it, or without a device or
// driver, the list is empty and `note` says why.
//
// Thread-safety: may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace meridian::kernels {

struct GpuInfo {
  int32_t index = 0;
  std::string name;  // as the driver reports it: "NVIDIA H200"
  int64_t memory_bytes = 0;
  int32_t compute_major = 0;
  int32_t compute_minor = 0;
};

// Whether this build can use CUDA at all.
bool BuiltWithCuda();
std::vector<GpuInfo> DiscoverGpus(std::string* note);

}  // namespace meridian::kernels
