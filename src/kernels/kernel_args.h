// The argument handling every built-in kernel shares: unknown arguments refused by
// name, integers and numbers parsed and bounded, and the device a task was given.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "common/status.h"
#include "kernels/kernel.h"
#include "kernels/ops.h"

namespace meridian::kernels {

// An error naming the first argument not in `known`, and the ones the kernel takes.
Status CheckArgs(const KernelContext& ctx, std::string_view kernel, std::initializer_list<std::string_view> known);
StatusOr<int64_t> ParseInt(std::string_view text, std::string_view what);
StatusOr<double> ParseDouble(std::string_view text, std::string_view what);
// Argument `name` as an integer in [min, max], or `def` when absent.
StatusOr<int64_t> ArgInt(const KernelContext& ctx, std::string_view name, int64_t def, int64_t min, int64_t max);
StatusOr<double> ArgDouble(const KernelContext& ctx, std::string_view name, double def);
// The bytes of the task's inputs: the kernel holds them whole while it runs.
int64_t InputBytes(const KernelContext& ctx);
// Refuses a working set of `need` bytes, before any of it is allocated, where it and
// the task's inputs are more than the task may hold in its agent's memory
// (ctx.host_memory_bytes); `what` says what needs it ("5000000 values to sort").
// `so_far`: what the kernel counted until now, before it has seen all it will need.
Status CheckHostMemory(const KernelContext& ctx, int64_t need, std::string_view what, bool so_far = false);
// The error for a task that would hold `total` bytes where it may hold `may_hold`,
// with the memory to ask for; `need` says what needs them ("its inputs need 2 MiB").
// `so_far`: `total` is what a kernel counted before it stopped, so it needs more.
Status HostMemoryError(std::string_view need, int64_t total, int64_t may_hold, bool so_far = false);
// The device the task was given: its GPU when it has one, else the CPU.
StatusOr<const Ops*> OpsFor(const KernelContext& ctx);

}  // namespace meridian::kernels
