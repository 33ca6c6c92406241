#include "kernels/kernel.h"

#include "kernels/builtins.h"
#include "kernels/quantum.h"

namespace meridian::kernels {

const std::vector<KernelInfo>& AllKernels() {
  static const std::vector<KernelInfo> kernels = {
      {"noop", "does nothing; outputs nothing (for measuring the runtime itself)", builtin::Noop, false},
      {"sum", "adds integers: from the inputs and the range [from, to) or [index*range, (index+1)*range)", builtin::Sum, true},
      {"sort", "sorts integers from the inputs or `generate` random ones; outputs them or a summary", builtin::Sort, true},
      {"histogram", "bins values (inputs or `generate` normal samples) into `bins` over [min, max); merges histograms",
       builtin::Histogram, true},
      {"wordcount", "counts words of the inputs and `text`; merges word counts", builtin::WordCount, false},
      {"matmul", "multiplies two random n x n matrices (seeded), `repeat` times; outputs checksums of the product", builtin::MatMul, true},
      {"logstats",
       "summarises log lines (timestamp service status latency_ms bytes) per service and status; merges summaries",
       builtin::LogStats, false},
      {"chain-verify",
       "verifies blocks of signed transfers (signatures, Merkle roots, links; docs/chain.md); merges reports",
       builtin::ChainVerify, true},
      {"qsim", "simulates an OpenQASM 2.0 circuit (state vector); outputs probabilities, sampled counts or amplitudes",
       builtin::QSim, true},
      {"qaoa-evaluate", "QAOA for MaxCut: the expected cut at one point of the optimiser's grid (its copy index)",
       builtin::QaoaEvaluate, true},
      {"qaoa-optimize", "QAOA for MaxCut: the best point of a round, and the next, finer grid around it",
       builtin::QaoaOptimize, false},
  };
  return kernels;
}

const KernelInfo* FindKernel(std::string_view name) {
  for (const KernelInfo& k : AllKernels()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::vector<std::string> KernelNames() {
  std::vector<std::string> out;
  for (const KernelInfo& k : AllKernels()) out.emplace_back(k.name);
  return out;
}

}  // namespace meridian::kernels
