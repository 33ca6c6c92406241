// Quantum circuits from OpenQASM 2.0 (docs/quantum.md): the reader and what it makes.
//
// The reader takes the language of the OpenQASM 2.0 paper and qelib1.inc: `qreg`,
// `creg`, the built-in U and CX, qelib1's gates (id, u3/u, u2, u1/p, x, y, z, h, s, sdg,
// t, tdg, sx, sxdg, rx, ry, rz, cx, cy, cz, ch, swap, ccx, cswap, crx, cry, crz,
// cu1/cp, cu3, rzz), `gate` definitions of one's own, parameters as expressions (pi,
// + - * / ^, sin cos tan exp ln sqrt), a gate on whole registers applied to each
// qubit in turn, `barrier`, and `measure` at the end of a qubit's gates. It refuses,
// naming line and column: mid-circuit measurement, `reset`, `if`, `opaque`, and
// anything else. Rotations are the standard ones (rz(t) = diag(e^-it/2, e^it/2), as in
// Qiskit), not qelib1's u1 for rz, which differs by a global phase.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "kernels/qgate.h"

namespace meridian::kernels {

// Bounds on what a circuit may ask for, checked while reading, before any allocation.
inline constexpr int32_t kMaxQasmQubits = 40;
inline constexpr int64_t kMaxQasmGates = 10'000'000;  // after expansion
inline constexpr int32_t kMaxQasmDepth = 64;          // of gate definitions inside each other
inline constexpr int32_t kMaxQasmExpressionDepth = 256;  // of a parameter's parentheses, signs and powers

struct Circuit {
  int32_t qubits = 0;  // over every qreg, in declaration order
  int32_t clbits = 0;
  std::vector<QGate> gates;  // in order
  std::vector<std::pair<int32_t, int32_t>> measures;  // (qubit, clbit)
};

StatusOr<Circuit> ParseQasm(std::string_view text);

// The same circuit with fewer gates: consecutive gates on one qubit without controls
// are multiplied into one (gates on other qubits commute with them).
std::vector<QGate> FuseGates(std::span<const QGate> gates);

}  // namespace meridian::kernels
