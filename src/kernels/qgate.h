// One step of a state-vector simulation, and applying it, written once for the host and
// for CUDA threads (the quantum circuits of kernels/qasm.h run on either; docs/quantum.md).
//
// Every gate of a circuit is compiled to this one form: a 2x2 unitary on a target
// qubit, applied where every control qubit is 1 (CX is X with one control, CCX with
// two, CZ a diagonal with one; SWAP is three CXs). The state holds 2^n amplitudes as
// interleaved doubles (re, im), amplitude i being basis state i with qubit k as bit k.
//
// Included by host C++ and by CUDA sources alike; pure functions.
#pragma once

#include <cstdint>

#include "kernels/generate.h"  // MERIDIAN_HOST_DEVICE

namespace meridian::kernels {

struct QGate {
  // Row-major 2x2 complex matrix: m[0] + i m[1] is row 0 column 0, m[2] + i m[3] row 0
  // column 1, m[4] + i m[5] row 1 column 0, m[6] + i m[7] row 1 column 1.
  double m[8];
  uint64_t controls;  // bit k set: qubit k must be 1 (never the target)
  uint32_t target;
  uint32_t diagonal;  // 1 when m01 = m10 = 0: only phases change
};

namespace qsim {

// The amplitude index of pair p's |0> side: p with a zero bit inserted at `target`.
MERIDIAN_HOST_DEVICE uint64_t PairIndex(uint64_t p, uint32_t target) {
  const uint64_t low = p & ((uint64_t{1} << target) - 1);
  return ((p - low) << 1) | low;
}

// Applies g to pair p (amplitudes PairIndex(p) and PairIndex(p) | 1 << target).
// Products and sums are rounded one by one, never fused into multiply-adds, so the
// host and a GPU give the same bits.
MERIDIAN_HOST_DEVICE void ApplyPair(double* state, uint64_t p, const QGate& g) {
  const uint64_t i0 = PairIndex(p, g.target);
  if ((i0 & g.controls) != g.controls) return;
  const uint64_t i1 = i0 | (uint64_t{1} << g.target);
  double* a = state + 2 * i0;
  double* b = state + 2 * i1;
  const double ar = a[0], ai = a[1], br = b[0], bi = b[1];
#if defined(__CUDA_ARCH__)
#define MERIDIAN_MUL(x, y) __dmul_rn(x, y)
#define MERIDIAN_ADD(x, y) __dadd_rn(x, y)
#define MERIDIAN_SUB(x, y) __dsub_rn(x, y)
#else
#define MERIDIAN_MUL(x, y) ((x) * (y))
#define MERIDIAN_ADD(x, y) ((x) + (y))
#define MERIDIAN_SUB(x, y) ((x) - (y))
#endif
  const double* m = g.m;
  if (g.diagonal) {
    a[0] = MERIDIAN_SUB(MERIDIAN_MUL(m[0], ar), MERIDIAN_MUL(m[1], ai));
    a[1] = MERIDIAN_ADD(MERIDIAN_MUL(m[0], ai), MERIDIAN_MUL(m[1], ar));
    b[0] = MERIDIAN_SUB(MERIDIAN_MUL(m[6], br), MERIDIAN_MUL(m[7], bi));
    b[1] = MERIDIAN_ADD(MERIDIAN_MUL(m[6], bi), MERIDIAN_MUL(m[7], br));
    return;
  }
  // (m00 a + m01 b, m10 a + m11 b), each complex product written out.
  a[0] = MERIDIAN_ADD(MERIDIAN_SUB(MERIDIAN_MUL(m[0], ar), MERIDIAN_MUL(m[1], ai)),
                      MERIDIAN_SUB(MERIDIAN_MUL(m[2], br), MERIDIAN_MUL(m[3], bi)));
  a[1] = MERIDIAN_ADD(MERIDIAN_ADD(MERIDIAN_MUL(m[0], ai), MERIDIAN_MUL(m[1], ar)),
                      MERIDIAN_ADD(MERIDIAN_MUL(m[2], bi), MERIDIAN_MUL(m[3], br)));
  b[0] = MERIDIAN_ADD(MERIDIAN_SUB(MERIDIAN_MUL(m[4], ar), MERIDIAN_MUL(m[5], ai)),
                      MERIDIAN_SUB(MERIDIAN_MUL(m[6], br), MERIDIAN_MUL(m[7], bi)));
  b[1] = MERIDIAN_ADD(MERIDIAN_ADD(MERIDIAN_MUL(m[4], ai), MERIDIAN_MUL(m[5], ar)),
                      MERIDIAN_ADD(MERIDIAN_MUL(m[6], bi), MERIDIAN_MUL(m[7], br)));
#undef MERIDIAN_MUL
#undef MERIDIAN_ADD
#undef MERIDIAN_SUB
}

}  // namespace qsim
}  // namespace meridian::kernels
