// Built-in kernels: work an agent runs in-process, without starting a program. Each
// takes its parameters (the task's `args`), the outputs of the tasks it depends on
// (`inputs`, in order) and its copy index, and returns its output as text. The
// formats are documented in docs/runtime.md; outputs of one kernel feed another
// (histograms merge, word counts merge, sums add up).
//
// The kernels are written once (builtins.cc); their compute runs on the task's device
// through kernels/ops.h: the CPU reference (cpu/) or CUDA (cuda/), checked against it.
//
// Thread-safety: kernels are pure functions of their context; run any number at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace meridian::kernels {

struct KernelContext {
  const std::map<std::string, std::string>& args;
  const std::vector<std::string>& inputs;
  uint32_t index = 0;
  // Set when the task is cancelled or times out; long kernels check it and stop.
  const std::atomic<bool>& stop;
  // The CUDA device the task was given, or -1 for the CPU (no GPU, or an emulated one).
  int32_t gpu = -1;
  // What the task may hold for its data: the memory of the device it was given (its
  // share of it), else its own memory request. Kernels whose working set the task
  // chooses (qsim's state vector) refuse more. -1: no bound (a caller in this process).
  int64_t memory_bytes = -1;
  // What the task may hold in the agent's own memory (kernels run inside the agent):
  // its memory request, else kDefaultKernelMemoryBytes. Kernels whose working set the
  // task chooses (sort's generated values, a matmul on the CPU) refuse more before
  // allocating it. -1: no bound (a caller in this process).
  int64_t host_memory_bytes = -1;
};

// What a kernel task that asks for no memory (resources: memory) may hold in its
// agent's memory: kernels share the agent's process, so a task left unbounded could
// take the memory of every task beside it, and the agent with them.
inline constexpr int64_t kDefaultKernelMemoryBytes = int64_t{1} << 30;

using KernelFn = StatusOr<std::string> (*)(const KernelContext&);

struct KernelInfo {
  std::string_view name;
  std::string_view summary;
  KernelFn run;
  bool gpu = false;  // runs its compute on a GPU when the task has one
};

// nullptr when there is no such kernel.
const KernelInfo* FindKernel(std::string_view name);
const std::vector<KernelInfo>& AllKernels();
std::vector<std::string> KernelNames();

}  // namespace meridian::kernels
