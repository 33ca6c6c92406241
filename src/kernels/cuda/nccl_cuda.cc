// kernels/nccl.h on CUDA: NCCL opened at run time, the buffer on the device.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>

#include <fmt/format.h>

#include "kernels/cuda/open_library.h"
#include "kernels/nccl.h"

namespace meridian::kernels {
namespace {
// NCCL, opened once (it is large, and a machine may have the toolkit's headers at
// build time but no NCCL at run time).
struct Nccl {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) init_rank = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  std::string error;
};

const Nccl& LoadNccl() {
  static const Nccl lib = [] {
    Nccl n;
    const std::string soname = "libnccl.so." + std::to_string(NCCL_MAJOR);
    void* h = cuda::OpenLibrary(soname, &n.error);
    if (h == nullptr) return n;
    n.get_unique_id = reinterpret_cast<decltype(n.get_unique_id)>(dlsym(h, "ncclGetUniqueId"));
    n.init_rank = reinterpret_cast<decltype(n.init_rank)>(dlsym(h, "ncclCommInitRank"));
    n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(dlsym(h, "ncclAllReduce"));
    n.destroy = reinterpret_cast<decltype(n.destroy)>(dlsym(h, "ncclCommDestroy"));
    n.error_string = reinterpret_cast<decltype(n.error_string)>(dlsym(h, "ncclGetErrorString"));
    if (!n.get_unique_id || !n.init_rank || !n.all_reduce || !n.destroy || !n.error_string) {
      n.error = soname + " lacks ncclGetUniqueId/CommInitRank/AllReduce/CommDestroy/GetErrorString";
    }
    return n;
  }();
  return lib;
}

Status Cuda(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return OkStatus();
  return UnavailableError(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

Status Check(const char* what, ncclResult_t r) {
  if (r == ncclSuccess) return OkStatus();
  return UnavailableError(fmt::format("{}: {}", what, LoadNccl().error_string(r)));
}

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes);

class CudaNcclComm final : public NcclComm {
 public:
  ~CudaNcclComm() override {
    cudaSetDevice(device_);
    if (comm_ != nullptr) LoadNccl().destroy(comm_);
    if (buffer_ != nullptr) cudaFree(buffer_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Join(const ncclUniqueId& id, int ranks, int rank, int device) {
    device_ = device;
    MERIDIAN_RETURN_IF_ERROR(Cuda("cudaSetDevice", cudaSetDevice(device)));
    MERIDIAN_RETURN_IF_ERROR(Cuda("cudaStreamCreate", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)));
    return Check("ncclCommInitRank", LoadNccl().init_rank(&comm_, ranks, id, rank));
  }

  Status AllReduceSum(std::span<float> data) override {
    MERIDIAN_RETURN_IF_ERROR(Cuda("cudaSetDevice", cudaSetDevice(device_)));
    if (data.size() > capacity_) {
      if (buffer_ != nullptr) cudaFree(buffer_);
      buffer_ = nullptr;
      capacity_ = 0;
      MERIDIAN_RETURN_IF_ERROR(Cuda("cudaMalloc", cudaMalloc(&buffer_, data.size_bytes())));
      capacity_ = data.size();
    }
    MERIDIAN_RETURN_IF_ERROR(
        Cuda("cudaMemcpyAsync", cudaMemcpyAsync(buffer_, data.data(), data.size_bytes(), cudaMemcpyHostToDevice, stream_)));
    MERIDIAN_RETURN_IF_ERROR(Check(
        "ncclAllReduce", LoadNccl().all_reduce(buffer_, buffer_, data.size(), ncclFloat32, ncclSum, comm_, stream_)));
    MERIDIAN_RETURN_IF_ERROR(
        Cuda("cudaMemcpyAsync", cudaMemcpyAsync(data.data(), buffer_, data.size_bytes(), cudaMemcpyDeviceToHost, stream_)));
    return Cuda("cudaStreamSynchronize", cudaStreamSynchronize(stream_));
  }

 private:
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* buffer_ = nullptr;  // on the device
  size_t capacity_ = 0;      // floats
};

}  // namespace

StatusOr<std::string> NcclUniqueId() {
  const Nccl& lib = LoadNccl();
  if (!lib.error.empty()) return UnavailableError(lib.error);
  ncclUniqueId id{};
  MERIDIAN_RETURN_IF_ERROR(Check("ncclGetUniqueId", lib.get_unique_id(&id)));
  return std::string(id.internal, sizeof(id.internal));
}

StatusOr<std::unique_ptr<NcclComm>> NcclJoin(const std::string& id, int ranks, int rank, int device) {
  const Nccl& lib = LoadNccl();
  if (!lib.error.empty()) return UnavailableError(lib.error);
  if (id.size() != kNcclIdBytes) return InvalidArgumentError(fmt::format("an NCCL id has {} bytes, not {}", kNcclIdBytes, id.size()));
  ncclUniqueId nid{};
  std::memcpy(nid.internal, id.data(), kNcclIdBytes);
  auto comm = std::make_unique<CudaNcclComm>();
  MERIDIAN_RETURN_IF_ERROR(comm->Join(nid, ranks, rank, device));
  return std::unique_ptr<NcclComm>(std::move(comm));
}

int CudaDevices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace meridian::kernels
