// The built-in kernels (see kernels/kernel.h for the contract and docs/runtime.md for
// the formats). Each parses its arguments and inputs, runs its compute through the
// task's device (kernels/ops.h: the CPU reference, or CUDA when the task was given a
// real GPU), and formats its output. Deterministic: the same context gives the same
// output; on a GPU too, except matmul's checksums, which agree to rounding.
//
// Thread-safety: pure functions.
#pragma once

#include "kernels/kernel.h"

namespace meridian::kernels::builtin {

StatusOr<std::string> Noop(const KernelContext& ctx);
StatusOr<std::string> Sum(const KernelContext& ctx);
StatusOr<std::string> Sort(const KernelContext& ctx);
StatusOr<std::string> Histogram(const KernelContext& ctx);
StatusOr<std::string> WordCount(const KernelContext& ctx);
StatusOr<std::string> MatMul(const KernelContext& ctx);
StatusOr<std::string> LogStats(const KernelContext& ctx);
StatusOr<std::string> ChainVerify(const KernelContext& ctx);

}  // namespace meridian::kernels::builtin
