// CPU implementations of the built-in kernels (see kernels/kernel.h for the
// contract and docs/runtime.md for the formats). They are also the references GPU
// implementations are tested against. Deterministic: the same context gives the
// same output, bit for bit.
//
// Thread-safety: pure functions.
#pragma once

#include "kernels/kernel.h"

namespace meridian::kernels::cpu {

StatusOr<std::string> Noop(const KernelContext& ctx);
StatusOr<std::string> Sum(const KernelContext& ctx);
StatusOr<std::string> Sort(const KernelContext& ctx);
StatusOr<std::string> Histogram(const KernelContext& ctx);
StatusOr<std::string> WordCount(const KernelContext& ctx);
StatusOr<std::string> MatMul(const KernelContext& ctx);

}  // namespace meridian::kernels::cpu
