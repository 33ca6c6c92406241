// kernels/ops.h's GPU side in a build without the CUDA toolkit.
#include <fmt/format.h>

#include "kernels/ops.h"

namespace meridian::kernels {

StatusOr<const Ops*> GpuOps(int device) {
  return UnavailableError(fmt::format("GPU {}: this build of Meridian has no CUDA (the toolkit was not found)", device));
}

}  // namespace meridian::kernels
