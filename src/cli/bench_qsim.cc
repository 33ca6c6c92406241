// meridian bench qsim: gates per second of Meridian's state-vector simulator on this
// machine's CPU (and its GPU, when it has one), beside a plain numpy simulation of the
// same circuit in the same run, at each size asked for.
//
// The circuit is kernels::LayeredCircuit: layers of seeded rx/ry/rz/h on every qubit
// and CXs between neighbours, written as OpenQASM. Meridian reads it and simulates it
// as the qsim kernel does (fused, blocked, threaded); numpy applies the same gates one
// at a time the way a numpy user writes it (tensordot for one-qubit gates, a slice
// flip for CX) on Debian's python3-numpy. Both report a checksum of the final
// probabilities, which must agree: a fast wrong answer fails the bench.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/subprocess.h"
#include "common/temp_dir.h"
#include "kernels/ops.h"
#include "kernels/qasm.h"
#include "kernels/quantum.h"

namespace meridian::cli {
namespace {
using Clock = std::chrono::steady_clock;

constexpr const char* kNumpySimulator = R"PY(
import json, re, sys, time
import numpy as np

text = open(sys.argv[1]).read()
n = int(re.search(r"qreg q\[(\d+)\]", text).group(1))
gates = re.findall(r"^(h|rx|ry|rz|cx)(?:\(([^)]*)\))? q\[(\d+)\](?:,q\[(\d+)\])?;", text, re.M)

def matrix(name, t):
    c, s = np.cos(t / 2), np.sin(t / 2)
    if name == "h":
        return np.array([[1, 1], [1, -1]], dtype=complex) / np.sqrt(2)
    if name == "rx":
        return np.array([[c, -1j * s], [-1j * s, c]])
    if name == "ry":
        return np.array([[c, -s], [s, c]], dtype=complex)
    if name == "rz":
        return np.array([[np.exp(-1j * t / 2), 0], [0, np.exp(1j * t / 2)]])
    raise SystemExit("unknown gate " + name)

# Axis j of the tensor is qubit n-1-j, so the flat index is the basis state.
psi = np.zeros(2 ** n, dtype=np.complex128)
psi[0] = 1
psi = psi.reshape([2] * n)
start = time.perf_counter()
for name, param, a, b in gates:
    if name == "cx":
        c, t = n - 1 - int(a), n - 1 - int(b)
        index = [slice(None)] * n
        index[c] = 1
        index = tuple(index)
        psi[index] = np.flip(psi[index], axis=t if t < c else t - 1)
    else:
        axis = n - 1 - int(a)
        psi = np.moveaxis(np.tensordot(matrix(name, float(param or 0)), psi, axes=([1], [axis])), 0, axis)
seconds = time.perf_counter() - start
p = np.abs(np.ascontiguousarray(psi).reshape(-1)) ** 2
print(json.dumps({"seconds": seconds, "gates": len(gates), "checksum": float(np.dot(p, np.arange(p.size) % 1009))}))
)PY";

// sum over i of p_i * (i mod 1009): a figure that any misplaced amplitude moves.
double Checksum(const std::vector<double>& state) {
  double sum = 0;
  for (size_t i = 0; i < state.size() / 2; ++i) {
    sum += (state[2 * i] * state[2 * i] + state[2 * i + 1] * state[2 * i + 1]) * static_cast<double>(i % 1009);
  }
  return sum;
}

// A rate with the digits that matter: 1.3, 41.2, 2406.
std::string Rate(double per_second) {
  return per_second < 100 ? fmt::format("{:.1f}", per_second) : fmt::format("{:.0f}", per_second);
}

std::string Python() {
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";  // Debian's, with its numpy
}

struct Timed {
  double seconds = 0;
  double checksum = 0;
  size_t fused = 0;
};

// The best of `repeat` runs after an untimed one: on a virtual machine the first touch
// of fresh memory can cost seconds per GiB at the hypervisor (0.28 s for 22 qubits'
// 64 MiB here), which says nothing about the simulator; the runs reuse one state.
StatusOr<Timed> RunOps(const kernels::Ops& ops, const kernels::Circuit& c, int repeat) {
  Timed best;
  std::atomic<bool> stop{false};
  std::vector<double> state;
  MERIDIAN_RETURN_IF_ERROR(ops.Simulate(c.qubits, kernels::FuseGates(c.gates), state, stop));
  for (int r = 0; r < repeat; ++r) {
    Clock::time_point t0 = Clock::now();
    std::vector<kernels::QGate> fused = kernels::FuseGates(c.gates);
    MERIDIAN_RETURN_IF_ERROR(ops.Simulate(c.qubits, fused, state, stop));
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r == 0 || s < best.seconds) best.seconds = s;
    best.checksum = Checksum(state);
    best.fused = fused.size();
  }
  return best;
}

StatusOr<Timed> RunNumpy(const std::string& qasm_path) {
  ProcessOptions p;
  p.argv = {Python(), "-c", kNumpySimulator, qasm_path};
  p.env = CurrentEnvironment();
  p.timeout_us = 3'600'000'000;
  std::atomic<bool> stop{false};
  MERIDIAN_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(p, stop));
  if (r.exit_code != 0) {
    return FailedPreconditionError(fmt::format("the numpy simulation failed (is python3-numpy installed?): {}",
                                               r.stderr_tail.substr(0, 400)));
  }
  nlohmann::json j = nlohmann::json::parse(r.stdout_head, nullptr, false);
  if (j.is_discarded() || !j.contains("seconds")) return InternalError("the numpy simulation printed no figures");
  return Timed{j["seconds"].get<double>(), j["checksum"].get<double>(), 0};
}

}  // namespace

Status RunBenchQsim(const BenchQsimOptions& o, std::ostream& out) {
  if (o.qubits.empty()) return InvalidArgumentError("--qubits: give at least one size");
  for (int q : o.qubits) {
    if (q < 2 || q > kernels::kMaxCpuQubits) {
      return InvalidArgumentError(fmt::format("--qubits: {} is outside [2, {}]", q, kernels::kMaxCpuQubits));
    }
  }
  if (o.layers < 1 || o.layers > 100) return InvalidArgumentError("--layers: expected 1 to 100");
  if (o.repeat < 1 || o.repeat > 10) return InvalidArgumentError("--repeat: expected 1 to 10");
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TempDir> dir, TempDir::Make("meridian-bench-qsim"));
  StatusOr<const kernels::Ops*> gpu = kernels::GpuOps(0);
  nlohmann::json sizes = nlohmann::json::array();
  double worst_ratio = 0;
  if (!o.json) {
    out << fmt::format("meridian bench qsim: {} layers of rx/ry/rz/h on every qubit and CXs between neighbours\n",
                       o.layers);
    out << fmt::format("  {:>6}  {:>6}  {:>14}  {:>14}  {:>7}  {}\n", "qubits", "gates", "Meridian CPU", "numpy",
                       "ratio", gpu.ok() ? "Meridian GPU" : "");
  }
  for (int q : o.qubits) {
    const std::string qasm = kernels::LayeredCircuit(q, o.layers, 20261201);
    MERIDIAN_ASSIGN_OR_RETURN(kernels::Circuit c, kernels::ParseQasm(qasm));
    const std::string path = fmt::format("{}/layered-{}.qasm", dir->path(), q);
    std::ofstream(path) << qasm;
    MERIDIAN_ASSIGN_OR_RETURN(Timed cpu, RunOps(kernels::CpuOps(), c, o.repeat));
    MERIDIAN_ASSIGN_OR_RETURN(Timed numpy, RunNumpy(path));
    const double scale = std::max(1.0, std::abs(numpy.checksum));
    if (std::abs(cpu.checksum - numpy.checksum) > 1e-9 * scale) {
      return InternalError(fmt::format("{} qubits: Meridian's checksum {:.15g} differs from numpy's {:.15g}", q,
                                       cpu.checksum, numpy.checksum));
    }
    const double gates = static_cast<double>(c.gates.size());
    const double ratio = numpy.seconds / cpu.seconds;
    worst_ratio = worst_ratio == 0 ? ratio : std::min(worst_ratio, ratio);
    nlohmann::json row = {{"qubits", q},
                          {"gates", c.gates.size()},
                          {"fused_gates", cpu.fused},
                          {"cpu", {{"seconds", cpu.seconds}, {"gates_per_second", gates / cpu.seconds}}},
                          {"numpy", {{"seconds", numpy.seconds}, {"gates_per_second", gates / numpy.seconds}}},
                          {"ratio", ratio},
                          {"checksum", cpu.checksum}};
    std::string gpu_text;
    if (gpu.ok() && q <= kernels::kMaxGpuQubits) {
      MERIDIAN_ASSIGN_OR_RETURN(Timed g, RunOps(**gpu, c, o.repeat));
      row["gpu"] = {{"device", (*gpu)->name()}, {"seconds", g.seconds}, {"gates_per_second", gates / g.seconds},
                    {"checksum_matches", std::abs(g.checksum - cpu.checksum) <= 1e-9 * scale}};
      gpu_text = fmt::format("{:>10} /s", Rate(gates / g.seconds));
    }
    sizes.push_back(row);
    if (!o.json) {
      out << fmt::format("  {:>6}  {:>6}  {:>11} /s  {:>11} /s  {:>6.1f}x  {}\n", q, c.gates.size(), Rate(gates / cpu.seconds),
                         Rate(gates / numpy.seconds), ratio, gpu_text);
    }
  }
  if (o.json) {
    nlohmann::json j = {{"benchmark", "qsim"}, {"layers", o.layers}, {"sizes", sizes}, {"ratio", worst_ratio},
                        {"gpu", gpu.ok() ? (*gpu)->name() : std::string(gpu.status().message())}};
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("  ratio (the smallest over the sizes): {:.1f}x; checksums of the final probabilities agree\n",
                     worst_ratio);
  if (!gpu.ok()) out << fmt::format("  no GPU figures: {}\n", gpu.status().message());
  return OkStatus();
}

}  // namespace meridian::cli
