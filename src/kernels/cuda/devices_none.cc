// Device discovery in a build without the CUDA toolkit: there are no GPUs to use.
#include "kernels/devices.h"

namespace meridian::kernels {

bool BuiltWithCuda() { return false; }

std::vector<GpuInfo> DiscoverGpus(std::string* note) {
  if (note) *note = "built without the CUDA toolkit";
  return {};
}

}  // namespace meridian::kernels
