#include "workloads/training/nccl_group.h"

#include <cstring>

#include <fmt/format.h>

namespace meridian::training {

StatusOr<std::unique_ptr<kernels::NcclComm>> JoinNccl(collective::Communicator& bootstrap, int device) {
  // The id, or (a first byte of 0 after it) rank 0's reason for having none.
  std::string message(1 + kernels::kNcclIdBytes + 256, '\0');
  if (bootstrap.rank() == 0) {
    StatusOr<std::string> id = kernels::NcclUniqueId();
    if (id.ok()) {
      message[0] = 1;
      std::memcpy(&message[1], id->data(), kernels::kNcclIdBytes);
    } else {
      const std::string why(id.status().message().substr(0, 255));
      std::memcpy(&message[1 + kernels::kNcclIdBytes], why.data(), why.size());
    }
  }
  MERIDIAN_RETURN_IF_ERROR(bootstrap.Broadcast(std::as_writable_bytes(std::span<char>(message)), 0));
  if (message[0] != 1) {
    return UnavailableError(fmt::format("rank 0 has no NCCL: {}", message.c_str() + 1 + kernels::kNcclIdBytes));
  }
  return kernels::NcclJoin(message.substr(1, kernels::kNcclIdBytes), bootstrap.size(), bootstrap.rank(), device);
}

}  // namespace meridian::training
