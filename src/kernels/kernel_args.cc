#include "kernels/kernel_args.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "common/units.h"

namespace meridian::kernels {

Status CheckArgs(const KernelContext& ctx, std::string_view kernel, std::initializer_list<std::string_view> known) {
  for (const auto& [name, value] : ctx.args) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return InvalidArgumentError(fmt::format("kernel {} has no argument '{}' (it takes: {})", kernel, name,
                                              list.empty() ? "none" : list));
    }
  }
  return OkStatus();
}

StatusOr<int64_t> ParseInt(std::string_view text, std::string_view what) {
  std::string s(text);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE) {
    return InvalidArgumentError(fmt::format("{}: expected an integer, got '{}'", what, text));
  }
  return static_cast<int64_t>(v);
}

StatusOr<double> ParseDouble(std::string_view text, std::string_view what) {
  std::string s(text);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    return InvalidArgumentError(fmt::format("{}: expected a number, got '{}'", what, text));
  }
  return v;
}

StatusOr<int64_t> ArgInt(const KernelContext& ctx, std::string_view name, int64_t def, int64_t min, int64_t max) {
  auto it = ctx.args.find(std::string(name));
  if (it == ctx.args.end()) return def;
  MERIDIAN_ASSIGN_OR_RETURN(int64_t v, ParseInt(it->second, fmt::format("argument '{}'", name)));
  if (v < min || v > max) {
    return InvalidArgumentError(fmt::format("argument '{}': {} is outside [{}, {}]", name, v, min, max));
  }
  return v;
}

StatusOr<double> ArgDouble(const KernelContext& ctx, std::string_view name, double def) {
  auto it = ctx.args.find(std::string(name));
  if (it == ctx.args.end()) return def;
  return ParseDouble(it->second, fmt::format("argument '{}'", name));
}

int64_t InputBytes(const KernelContext& ctx) {
  int64_t total = 0;
  for (const std::string& in : ctx.inputs) total += static_cast<int64_t>(in.size());
  return total;
}

Status CheckHostMemory(const KernelContext& ctx, int64_t need, std::string_view what, bool so_far) {
  if (ctx.host_memory_bytes < 0) return OkStatus();
  const int64_t inputs = InputBytes(ctx);
  if (need + inputs <= ctx.host_memory_bytes) return OkStatus();
  const std::string beside = inputs > 0 ? fmt::format(" beside its inputs' {}", FormatBytes(inputs)) : "";
  return HostMemoryError(fmt::format("{}{} need {}{}", what, so_far ? " so far" : "", FormatBytes(need), beside),
                         need + inputs, ctx.host_memory_bytes, so_far);
}

Status HostMemoryError(std::string_view need, int64_t total, int64_t may_hold, bool so_far) {
  const int64_t mib = (total + kMiB - 1) / kMiB;
  const std::string ask = so_far ? fmt::format("ask for more than {}MiB with resources: {{memory: ...}}", mib)
                                 : fmt::format("ask for it with resources: {{memory: {}MiB}}", mib);
  return ResourceExhaustedError(fmt::format("{}; this task may hold {} (its resources' memory, {} when it asks for none): {}",
                                            need, FormatBytes(may_hold), FormatBytes(kDefaultKernelMemoryBytes), ask));
}

StatusOr<const Ops*> OpsFor(const KernelContext& ctx) {
  if (ctx.gpu < 0) return &CpuOps();
  return GpuOps(ctx.gpu);
}

}  // namespace meridian::kernels
