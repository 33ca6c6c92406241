// kernels/nccl.h in a build without NCCL's headers (or without the CUDA toolkit).
#include "kernels/nccl.h"

namespace meridian::kernels {

StatusOr<std::string> NcclUniqueId() {
  return UnavailableError("this build of Meridian has no NCCL (the CUDA toolkit's nccl.h was not found)");
}

StatusOr<std::unique_ptr<NcclComm>> NcclJoin(const std::string&, int, int, int) {
  return UnavailableError("this build of Meridian has no NCCL (the CUDA toolkit's nccl.h was not found)");
}

int CudaDevices() { return 0; }

}  // namespace meridian::kernels
