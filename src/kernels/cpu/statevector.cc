#include "kernels/cpu/statevector.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "common/parallel.h"

namespace meridian::kernels {
namespace {

constexpr int32_t kLowQubits = 8;    // a segment: 2^8 amplitudes, 4 KiB, contiguous
constexpr int32_t kTileQubits = 14;  // a tile: 2^14 amplitudes, 256 KiB
constexpr int32_t kThreadedQubits = 14;  // below this a pass is too little work to share

// Calls fn(part, begin, end) over [0, count) cut into `parts` ranges, on up to `parts`
// threads.
void InParts(uint64_t count, unsigned parts, const std::function<void(unsigned, uint64_t, uint64_t)>& fn) {
  if (parts <= 1 || count < parts) {
    fn(0, 0, count);
    return;
  }
  ParallelFor(parts, parts, [&](size_t k) { fn(static_cast<unsigned>(k), count * k / parts, count * (k + 1) / parts); });
}

// v's bits placed, lowest first, at the set bits of mask (x86's PDEP).
uint64_t Deposit(uint64_t v, uint64_t mask) {
  uint64_t out = 0;
  for (uint64_t m = mask; m != 0 && v != 0; m &= m - 1, v >>= 1) {
    if (v & 1) out |= m & -m;
  }
  return out;
}

// g on n consecutive pairs whose |0> amplitudes start at a and |1> amplitudes at b: the
// same operations, in the same order, as qsim::ApplyPair on each, in loops the compiler
// vectorises (never with FMA, which would round differently from ApplyPair). A real
// matrix (H, RY, X) skips the products with its zero imaginary parts, which only ever
// add or subtract a zero: the same values (at most the sign of a zero amplitude differs).
[[gnu::always_inline]] inline void ContiguousBody(double* __restrict a, double* __restrict b, uint64_t n,
                                                  const QGate& g) {
  const double m0 = g.m[0], m1 = g.m[1], m2 = g.m[2], m3 = g.m[3], m4 = g.m[4], m5 = g.m[5], m6 = g.m[6], m7 = g.m[7];
  if (g.diagonal) {
    for (uint64_t k = 0; k < n; ++k) {
      const double ar = a[2 * k], ai = a[2 * k + 1], br = b[2 * k], bi = b[2 * k + 1];
      a[2 * k] = m0 * ar - m1 * ai;
      a[2 * k + 1] = m0 * ai + m1 * ar;
      b[2 * k] = m6 * br - m7 * bi;
      b[2 * k + 1] = m6 * bi + m7 * br;
    }
  } else if (m1 == 0 && m3 == 0 && m5 == 0 && m7 == 0) {
    for (uint64_t k = 0; k < n; ++k) {
      const double ar = a[2 * k], ai = a[2 * k + 1], br = b[2 * k], bi = b[2 * k + 1];
      a[2 * k] = m0 * ar + m2 * br;
      a[2 * k + 1] = m0 * ai + m2 * bi;
      b[2 * k] = m4 * ar + m6 * br;
      b[2 * k + 1] = m4 * ai + m6 * bi;
    }
  } else {
    for (uint64_t k = 0; k < n; ++k) {
      const double ar = a[2 * k], ai = a[2 * k + 1], br = b[2 * k], bi = b[2 * k + 1];
      a[2 * k] = (m0 * ar - m1 * ai) + (m2 * br - m3 * bi);
      a[2 * k + 1] = (m0 * ai + m1 * ar) + (m2 * bi + m3 * br);
      b[2 * k] = (m4 * ar - m5 * ai) + (m6 * br - m7 * bi);
      b[2 * k + 1] = (m4 * ai + m5 * ar) + (m6 * bi + m7 * br);
    }
  }
}

// The body compiled twice, for AVX2 and for any x86-64, chosen once at run time. (Not
// by target_clones: its ifunc resolver runs before ThreadSanitizer is set up.)
[[gnu::target("avx2")]] void ContiguousAvx2(double* __restrict a, double* __restrict b, uint64_t n, const QGate& g) {
  ContiguousBody(a, b, n, g);
}
void ContiguousPlain(double* __restrict a, double* __restrict b, uint64_t n, const QGate& g) {
  ContiguousBody(a, b, n, g);
}
void ApplyContiguous(double* a, double* b, uint64_t n, const QGate& g) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    ContiguousAvx2(a, b, n, g);
  } else {
    ContiguousPlain(a, b, n, g);
  }
}

// g on pairs [first, last) of the state s, in runs of consecutive pairs (2^target of
// them share one stride). Controls above the target are the same across a run, so the
// run is taken or skipped whole; controls below it select sub-runs of 2^(lowest one)
// pairs.
void ApplyRange(double* s, uint64_t first, uint64_t last, const QGate& g) {
  const uint32_t t = g.target;
  const uint64_t half = uint64_t{1} << t;
  const uint64_t low_controls = g.controls & (half - 1), high_controls = g.controls & ~(half - 1);
  const uint64_t step = low_controls == 0 ? half : low_controls & -low_controls;
  for (uint64_t p = first; p < last;) {
    const uint64_t lo = p & (half - 1);
    const uint64_t n = std::min(half - lo, last - p);
    const uint64_t i0 = ((p - lo) << 1) | lo;
    if ((i0 & high_controls) == high_controls) {
      for (uint64_t k = 0; k < n;) {
        const uint64_t index = i0 + k;
        const uint64_t span = std::min(n - k, step - (index & (step - 1)));
        if ((index & low_controls) == low_controls) ApplyContiguous(s + 2 * index, s + 2 * (index + half), span, g);
        k += span;
      }
    }
    p += n;
  }
}

uint64_t QubitsOf(const QGate& g) { return g.controls | (uint64_t{1} << g.target); }

// A run of gates [first, end) on tiles: the low qubits, and `high` (a mask) above them.
struct Run {
  size_t first = 0, end = 0;
  uint64_t high = 0;
};

// The longest run from `first` whose gates touch at most `max_high` qubits above the
// low ones.
Run NextRun(std::span<const QGate> gates, size_t first, int32_t max_high) {
  Run r{first, first, 0};
  const uint64_t low = (uint64_t{1} << kLowQubits) - 1;
  while (r.end < gates.size()) {
    const uint64_t high = r.high | (QubitsOf(gates[r.end]) & ~low);
    if (__builtin_popcountll(high) > max_high) break;
    r.high = high;
    ++r.end;
  }
  return r;
}

// The gate as it acts on a tile: qubit q below kLowQubits stays; the j-th qubit of
// `high` becomes kLowQubits + j.
QGate OnTile(const QGate& g, uint64_t high) {
  auto place = [&](uint32_t q) -> uint32_t {
    if (q < static_cast<uint32_t>(kLowQubits)) return q;
    return kLowQubits + static_cast<uint32_t>(__builtin_popcountll(high & ((uint64_t{1} << q) - 1)));
  };
  QGate t = g;
  t.target = place(g.target);
  t.controls = 0;
  for (uint64_t c = g.controls; c != 0; c &= c - 1) t.controls |= uint64_t{1} << place(__builtin_ctzll(c));
  return t;
}

// One tile's worth of amplitudes for each thread, kept for the whole simulation (a
// fresh 256 KiB a run would be mapped, zeroed and faulted in each time).
using Tiles = std::vector<std::vector<double>>;

void ApplyRunOnTiles(double* s, int32_t qubits, std::span<const QGate> gates, const Run& run, Tiles& buffers) {
  const unsigned threads = static_cast<unsigned>(buffers.size());
  const int32_t high_count = __builtin_popcountll(run.high);
  const uint64_t low = (uint64_t{1} << kLowQubits) - 1;
  const uint64_t all = qubits == 64 ? ~uint64_t{0} : (uint64_t{1} << qubits) - 1;
  const uint64_t outer = all & ~low & ~run.high;  // the qubits that choose a tile
  std::vector<QGate> mapped;
  for (size_t k = run.first; k < run.end; ++k) mapped.push_back(OnTile(gates[k], run.high));
  const uint64_t segments = uint64_t{1} << high_count, segment = uint64_t{1} << kLowQubits;
  const uint64_t tile_pairs = segments * segment / 2;
  const uint64_t tiles = uint64_t{1} << (qubits - kLowQubits - high_count);
  InParts(tiles, threads, [&](unsigned part, uint64_t first, uint64_t last) {
    std::vector<double>& tile = buffers[part];
    for (uint64_t t = first; t < last; ++t) {
      const uint64_t base = Deposit(t, outer);
      for (uint64_t h = 0; h < segments; ++h) {
        std::memcpy(&tile[2 * h * segment], s + 2 * (base | Deposit(h, run.high)), 2 * segment * sizeof(double));
      }
      for (const QGate& g : mapped) ApplyRange(tile.data(), 0, tile_pairs, g);
      for (uint64_t h = 0; h < segments; ++h) {
        std::memcpy(s + 2 * (base | Deposit(h, run.high)), &tile[2 * h * segment], 2 * segment * sizeof(double));
      }
    }
  });
}

}  // namespace

Status SimulateOnCpu(int32_t qubits, std::span<const QGate> gates, std::vector<double>& state,
                     const std::atomic<bool>& stop) {
  const uint64_t amplitudes = uint64_t{1} << qubits, pairs = amplitudes / 2;
  state.assign(2 * amplitudes, 0.0);
  state[0] = 1.0;
  double* s = state.data();
  if (qubits <= kTileQubits) {
    // The whole state is one tile's size: gate after gate, in cache.
    for (size_t k = 0; k < gates.size(); ++k) {
      if ((k & 255) == 0 && stop.load()) return Status(StatusCode::kCancelled, "stopped");
      ApplyRange(s, 0, pairs, gates[k]);
    }
    return OkStatus();
  }
  const unsigned threads = qubits >= kThreadedQubits ? std::max(1u, std::thread::hardware_concurrency()) : 1;
  Tiles buffers(threads, std::vector<double>(uint64_t{2} << kTileQubits));
  for (size_t g = 0; g < gates.size();) {
    if (stop.load()) return Status(StatusCode::kCancelled, "stopped");
    const Run run = NextRun(gates, g, kTileQubits - kLowQubits);
    if (run.end - run.first >= 2) {
      ApplyRunOnTiles(s, qubits, gates, run, buffers);
      g = run.end;
      continue;
    }
    // A lone gate: one pass over the whole state.
    const QGate& one = gates[g];
    InParts(pairs, threads, [&](unsigned, uint64_t first, uint64_t last) { ApplyRange(s, first, last, one); });
    ++g;
  }
  return OkStatus();
}

}  // namespace meridian::kernels
