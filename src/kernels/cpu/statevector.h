// The CPU's state-vector simulation (kernels/ops.h's Simulate on CpuOps()).
//
// Gates are applied in runs: consecutive gates whose qubits all lie among the 8 lowest
// and at most 6 others are applied together on tiles of 2^14 amplitudes (256 KiB, in a
// core's cache), each tile the 2^8-amplitude segments that those 6 qubits select, copied
// in, passed over by every gate of the run, and copied back, on every core. A lone gate
// passes over the whole state. Either way each amplitude sees the same operations in
// the same order as one gate at a time (qsim::ApplyPair): the same values.
//
// Thread-safety: any number of calls at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "kernels/qgate.h"

namespace meridian::kernels {

// `state` becomes the 2^qubits amplitudes after `gates` from |0...0>; the gates are
// already checked (CheckGates).
Status SimulateOnCpu(int32_t qubits, std::span<const QGate> gates, std::vector<double>& state,
                     const std::atomic<bool>& stop);

}  // namespace meridian::kernels
