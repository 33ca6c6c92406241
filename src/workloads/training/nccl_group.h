// NCCL among the ranks of a gang: rank 0 draws NCCL's unique id and broadcasts it over
// the gang's own collectives (collective::Communicator: every connection proves the
// gang's secret), then every rank joins on its CUDA device (kernels/nccl.h).
#pragma once

#include <memory>

#include "collective/communicator.h"
#include "common/status.h"
#include "kernels/nccl.h"

namespace meridian::training {

// Every rank of `bootstrap` calls this at once. Where rank 0 has no NCCL (this build,
// this machine) every rank gets its reason (kUnavailable), none waits.
StatusOr<std::unique_ptr<kernels::NcclComm>> JoinNccl(collective::Communicator& bootstrap, int device);

}  // namespace meridian::training
