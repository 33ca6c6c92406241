// Counter-based random numbers for the built-in kernels: value i of a stream is a
// pure function of (seed, i), so a GPU thread computes element i on its own and CPU
// and GPU produce the same numbers, bit for bit. The arithmetic is exact or rounds
// the same everywhere (integer mixing, then sums and products of doubles in a fixed
// order, never fused), with no transcendental functions whose last bit differs
// between libm and CUDA.
//
// Included by host C++ and by CUDA sources alike.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MERIDIAN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MERIDIAN_HOST_DEVICE inline
#endif

namespace meridian::kernels::gen {

// SplitMix64's finaliser over (seed, i).
MERIDIAN_HOST_DEVICE uint64_t Bits(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + (i + 1) * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1): the top 53 bits, exactly representable.
MERIDIAN_HOST_DEVICE double Unit(uint64_t seed, uint64_t i) {
  return static_cast<double>(Bits(seed, i) >> 11) * (1.0 / 9007199254740992.0);
}

// Uniform in [-1, 1): 2u - 1 is exact for u = k * 2^-53.
MERIDIAN_HOST_DEVICE double Signed(uint64_t seed, uint64_t i) { return Unit(seed, i) * 2.0 - 1.0; }

// Integer in [lo, lo + span), span > 0 (the modulo bias is at most span / 2^64).
MERIDIAN_HOST_DEVICE int64_t Int(uint64_t seed, uint64_t i, int64_t lo, uint64_t span) {
  return lo + static_cast<int64_t>(Bits(seed, i) % span);
}

// Approximately standard normal: the sum of 12 uniforms minus 6 (Irwin-Hall), in
// (-6, 6), mean 0, variance 1. Sample i uses counters 12i .. 12i+11, added in order.
MERIDIAN_HOST_DEVICE double Normal(uint64_t seed, uint64_t i) {
  double s = 0.0;
  for (uint64_t k = 0; k < 12; ++k) s += Unit(seed, i * 12 + k);
  return s - 6.0;
}

// mean + sd * z, rounded twice: never fused into one multiply-add, which CUDA would
// otherwise do and the CPU does not.
MERIDIAN_HOST_DEVICE double Affine(double mean, double sd, double z) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(mean, __dmul_rn(sd, z));
#else
  return mean + sd * z;
#endif
}

// The bin of v in [lo, lo + bins * width), or -1 when v is outside [lo, hi).
MERIDIAN_HOST_DEVICE int64_t Bin(double v, double lo, double hi, double width, int64_t bins) {
  if (v < lo || v >= hi) return -1;
  int64_t b = static_cast<int64_t>((v - lo) / width);
  return b < bins - 1 ? b : bins - 1;
}

}  // namespace meridian::kernels::gen
