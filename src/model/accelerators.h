// The accelerator types Meridian knows, with their memory and a canonical spelling.
// A fleet or job naming an unknown type is an error (a typo like "A10O" must not
// silently match nothing).
//
// Thread-safety: immutable after static initialisation.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace meridian::model {

enum class AcceleratorClass { kCpu, kGpu, kTpu, kFpga, kQpuSim, kOther };

struct AcceleratorType {
  std::string_view name;           // canonical: "A100", "T4", "TPU-v5e", "CPU"
  AcceleratorClass klass;
  int64_t default_memory_bytes;    // per device, when the fleet does not say
};

// The canonical type for `name`, matched case-insensitively ("a100" -> "A100").
std::optional<AcceleratorType> FindAcceleratorType(std::string_view name);
std::span<const AcceleratorType> AllAcceleratorTypes();
// "H100, A100, ..." for error messages.
std::string KnownAcceleratorTypeNames();

inline constexpr std::string_view kCpuType = "CPU";

}  // namespace meridian::model
