// Quantum circuits as tasks (docs/quantum.md): the `qsim` kernel simulates an OpenQASM
// 2.0 circuit (kernels/qasm.h) on the task's device and reports its outcome
// probabilities, sampled counts or amplitudes; `qaoa-evaluate` and `qaoa-optimize` are
// the two halves of a hybrid loop, QAOA for MaxCut with a shrinking grid search as its
// classical optimiser, one job round after round.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/qasm.h"

namespace meridian::kernels {

// The probability of each outcome of the circuit's measured bits (all its qubits, as
// bits 0..n-1, when it measures none), largest first, those within 1e-15 of each other
// by outcome; at most `top`, none below 1e-15 (rounding noise).
std::vector<std::pair<uint64_t, double>> TopOutcomes(const Circuit& c, const std::vector<double>& state, size_t top);
// `shots` outcomes drawn from that distribution with the counter-based generator
// (seeded, so the same on every machine); (outcome, count), most frequent first.
std::vector<std::pair<uint64_t, int64_t>> SampleOutcomes(const Circuit& c, const std::vector<double>& state,
                                                         int64_t shots, uint64_t seed);
// The width of an outcome: the circuit's classical bits, or its qubits if it measures none.
int32_t OutcomeBits(const Circuit& c);

// A graph for MaxCut: "0-1 1-2 2-0" (edges of nodes numbered from 0).
struct Graph {
  int32_t nodes = 0;
  std::vector<std::pair<int32_t, int32_t>> edges;
};
StatusOr<Graph> ParseGraph(std::string_view text);
// How many edges `assignment` (bit k: node k's side) cuts.
int32_t CutSize(const Graph& g, uint64_t assignment);
// The QAOA circuit of depth p = gammas.size() for MaxCut on g, as OpenQASM 2.0.
std::string QaoaCircuit(const Graph& g, const std::vector<double>& gammas, const std::vector<double>& betas);

// A circuit for measuring simulators (bench qsim, the tests): `layers` layers, each a
// seeded rx, ry, rz or h on every qubit, then CXs between neighbours (even pairs in
// even layers, odd pairs in odd ones). Only gates a plain numpy simulation also knows.
std::string LayeredCircuit(int32_t qubits, int32_t layers, uint64_t seed);

namespace builtin {
StatusOr<std::string> QSim(const KernelContext& ctx);
StatusOr<std::string> QaoaEvaluate(const KernelContext& ctx);
StatusOr<std::string> QaoaOptimize(const KernelContext& ctx);
}  // namespace builtin

}  // namespace meridian::kernels
