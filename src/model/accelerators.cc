#include "model/accelerators.h"

#include <array>
#include <cctype>

#include "common/units.h"

namespace meridian::model {
namespace {

constexpr std::array kTypes = {
    AcceleratorType{"H200", AcceleratorClass::kGpu, 141 * kGiB},
    AcceleratorType{"H100", AcceleratorClass::kGpu, 80 * kGiB},
    AcceleratorType{"A100-80GB", AcceleratorClass::kGpu, 80 * kGiB},
    AcceleratorType{"A100", AcceleratorClass::kGpu, 40 * kGiB},
    AcceleratorType{"L40S", AcceleratorClass::kGpu, 48 * kGiB},
    AcceleratorType{"L4", AcceleratorClass::kGpu, 24 * kGiB},
    AcceleratorType{"A10G", AcceleratorClass::kGpu, 24 * kGiB},
    AcceleratorType{"A10", AcceleratorClass::kGpu, 24 * kGiB},
    AcceleratorType{"V100-32GB", AcceleratorClass::kGpu, 32 * kGiB},
    AcceleratorType{"V100", AcceleratorClass::kGpu, 16 * kGiB},
    AcceleratorType{"T4", AcceleratorClass::kGpu, 16 * kGiB},
    AcceleratorType{"P100", AcceleratorClass::kGpu, 16 * kGiB},
    AcceleratorType{"K80", AcceleratorClass::kGpu, 12 * kGiB},
    // Types named in the Alibaba GPU 2023 trace (G2, G3 are anonymised models).
    AcceleratorType{"V100M16", AcceleratorClass::kGpu, 16 * kGiB},
    AcceleratorType{"V100M32", AcceleratorClass::kGpu, 32 * kGiB},
    AcceleratorType{"G2", AcceleratorClass::kGpu, 16 * kGiB},
    AcceleratorType{"G3", AcceleratorClass::kGpu, 16 * kGiB},
    AcceleratorType{"Jetson-Orin", AcceleratorClass::kGpu, 32 * kGiB},
    AcceleratorType{"TPU-v5e", AcceleratorClass::kTpu, 16 * kGiB},
    AcceleratorType{"TPU-v5p", AcceleratorClass::kTpu, 95 * kGiB},
    AcceleratorType{"TPU-v6e", AcceleratorClass::kTpu, 32 * kGiB},
    AcceleratorType{"FPGA-U250", AcceleratorClass::kFpga, 64 * kGiB},
    AcceleratorType{"QPU-SIM", AcceleratorClass::kQpuSim, 0},
    AcceleratorType{"CPU", AcceleratorClass::kCpu, 0},
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<AcceleratorType> FindAcceleratorType(std::string_view name) {
  for (const AcceleratorType& t : kTypes) {
    if (EqualsIgnoreCase(t.name, name)) return t;
  }
  return std::nullopt;
}

std::span<const AcceleratorType> AllAcceleratorTypes() { return kTypes; }

std::string KnownAcceleratorTypeNames() {
  std::string out;
  for (const AcceleratorType& t : kTypes) {
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

}  // namespace meridian::model
