// One stream window's figures (workloads/stream, kernels/ops.h WindowStats), computed
// the same way on the CPU and in a CUDA thread: its values in order, summed with IEEE
// double additions, then the mean, then the sum of squared deviations, then the
// population standard deviation. On the device each operation is the correctly
// rounded intrinsic (no fused multiply-add), so both give bit-identical figures.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/generate.h"  // MERIDIAN_HOST_DEVICE

namespace meridian::kernels {

struct WindowStat {
  double sum = 0;
  double min = 0;
  double max = 0;
  double mean = 0;
  double stddev = 0;
};

namespace window {

MERIDIAN_HOST_DEVICE double Add(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

MERIDIAN_HOST_DEVICE double Sub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

MERIDIAN_HOST_DEVICE double Mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

MERIDIAN_HOST_DEVICE double Div(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

MERIDIAN_HOST_DEVICE double Sqrt(double a) {
#ifdef __CUDA_ARCH__
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// values[0, n), n >= 1.
MERIDIAN_HOST_DEVICE WindowStat Compute(const double* values, int64_t n) {
  WindowStat s;
  s.min = values[0];
  s.max = values[0];
  for (int64_t i = 0; i < n; ++i) {
    s.sum = Add(s.sum, values[i]);
    s.min = values[i] < s.min ? values[i] : s.min;
    s.max = values[i] > s.max ? values[i] : s.max;
  }
  s.mean = Div(s.sum, static_cast<double>(n));
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = Sub(values[i], s.mean);
    squares = Add(squares, Mul(d, d));
  }
  s.stddev = Sqrt(Div(squares, static_cast<double>(n)));
  return s;
}

}  // namespace window
}  // namespace meridian::kernels
