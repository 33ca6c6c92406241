// NVIDIA's NCCL between the GPUs of a gang (issue 15's GPU collectives), behind a
// plain interface: the CUDA side is kernels/cuda/nccl_cuda.cc, built where the CUDA
// toolkit has nccl.h; NCCL itself is opened at run time (libnccl.so.2), so a machine
// without it runs the CPU path. Joining needs NCCL's unique id at every rank, which
// the caller carries (workloads/training/nccl_group.h broadcasts it over Meridian's
// authenticated collectives). After that NCCL moves the data its own way (NVLink,
// PCIe, or its socket transport between hosts: connections that are NCCL's, neither
// encrypted nor authenticated; docs/training.md).
//
// Thread-safety: one call at a time per NcclComm.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace meridian::kernels {

inline constexpr size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

class NcclComm {
 public:
  virtual ~NcclComm() = default;
  // Every rank's `data` (host memory, the same length everywhere) becomes the
  // element-wise sum over the ranks, through the device.
  virtual Status AllReduceSum(std::span<float> data) = 0;
};

// A new unique id (kNcclIdBytes), drawn by one rank for all; kUnavailable saying why
// where this build or machine has no NCCL.
StatusOr<std::string> NcclUniqueId();
// Joins the communicator of `id` as `rank` of `ranks` on CUDA device `device`; every
// rank calls this at once.
StatusOr<std::unique_ptr<NcclComm>> NcclJoin(const std::string& id, int ranks, int rank, int device);
// CUDA devices this process sees (0 without the toolkit, a driver or a device).
int CudaDevices();

}  // namespace meridian::kernels
