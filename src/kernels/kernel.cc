#include "kernels/kernel.h"

#include "kernels/cpu/cpu_kernels.h"

namespace meridian::kernels {

const std::vector<KernelInfo>& AllKernels() {
  static const std::vector<KernelInfo> kernels = {
      {"noop", "does nothing; outputs nothing (for measuring the runtime itself)", cpu::Noop},
      {"sum", "adds integers: from the inputs and the range [from, to) or [index*range, (index+1)*range)", cpu::Sum},
      {"sort", "sorts integers from the inputs or `generate` random ones; outputs them or a summary", cpu::Sort},
      {"histogram", "bins values (inputs or `generate` normal samples) into `bins` over [min, max); merges histograms",
       cpu::Histogram},
      {"wordcount", "counts words of the inputs and `text`; merges word counts", cpu::WordCount},
      {"matmul", "multiplies two random n x n matrices (seeded) and outputs checksums of the product", cpu::MatMul},
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
