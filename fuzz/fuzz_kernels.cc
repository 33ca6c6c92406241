// The built-in kernels as a hostile tenant drives them: a kernel runs inside its node's
// agent, so whatever a task's args and inputs hold must come back as an output or an
// error, never end the agent. The input is
//   KERNEL \0 NAME=VALUE \1 NAME=VALUE ... \0 INPUT \0 INPUT ...
// with the copy index in the first byte of the kernel's name part (its low 2 bits).
// Work is kept small (the args that choose how much to compute are capped, the task's
// memory is 1 MiB), so each input runs in milliseconds. Kernels whose outputs merge
// must take their own output back as their one input and give it again.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kernels/kernel.h"

namespace kernels = meridian::kernels;

namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

// The args that set how much a kernel computes, and the most digits each may have.
const std::map<std::string, size_t>& WorkArgs() {
  static const std::map<std::string, size_t> caps = {
      {"generate", 4}, {"range", 4}, {"from", 5}, {"to", 5},   {"repeat", 1},
      {"n", 2},        {"shots", 4}, {"top", 3},  {"grid", 1}, {"layers", 1}};
  return caps;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> parts = Split(bytes, '\0');
  if (parts.size() < 2 || parts[0].empty()) return 0;
  const uint32_t index = static_cast<uint8_t>(parts[0][0]) & 3;
  const kernels::KernelInfo* kernel = kernels::FindKernel(parts[0].substr(1));
  if (kernel == nullptr) return 0;
  std::map<std::string, std::string> args;
  if (!parts[1].empty()) {
    for (std::string_view kv : Split(parts[1], '\1')) {
      const size_t eq = kv.find('=');
      if (eq == std::string_view::npos) return 0;
      std::string name(kv.substr(0, eq));
      std::string_view value = kv.substr(eq + 1);
      if (auto cap = WorkArgs().find(name); cap != WorkArgs().end() && value.size() > cap->second) return 0;
      args[std::move(name)] = std::string(value);
    }
  }
  // qaoa-optimize's graph is solved classically by trying every cut (2^26 at most):
  // a real task's work, too slow for a fuzzer's input.
  if (kernel->name == "qaoa-optimize") args.erase("graph");
  const std::vector<std::string> inputs(parts.begin() + 2, parts.end());
  static std::atomic<bool> no_stop{false};
  constexpr int64_t kMemory = 1 << 20;
  meridian::StatusOr<std::string> out =
      kernel->run(kernels::KernelContext{args, inputs, index, no_stop, -1, kMemory});
  if (!out.ok()) {
    MERIDIAN_CHECK_MSG(!out.status().message().empty(), "a kernel's refusal without a message");
    return 0;
  }
  // Outputs that merge: a kernel's output, given back alone, is itself.
  static const std::set<std::string_view> merging = {"sum", "histogram", "wordcount", "logstats"};
  if (!merging.count(kernel->name)) return 0;
  std::map<std::string, std::string> merge_args;
  if (kernel->name == "histogram") {
    for (const char* k : {"bins", "min", "max"}) {
      if (auto it = args.find(k); it != args.end()) merge_args[k] = it->second;
    }
  }
  const std::vector<std::string> again_inputs = {*out};
  meridian::StatusOr<std::string> again =
      kernel->run(kernels::KernelContext{merge_args, again_inputs, 0, no_stop, -1, kMemory});
  MERIDIAN_CHECK_MSG(again.ok(), "a kernel refuses its own output as its input");
  MERIDIAN_CHECK_MSG(*again == *out, "a kernel's output, merged alone, is not itself");
  return 0;
}
