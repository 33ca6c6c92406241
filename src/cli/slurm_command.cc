// Meridian under Slurm: agents started as Slurm jobs (`meridian slurm submit`), each
// describing its node from the job it runs in (`meridian agent --slurm`), and leaving
// the pool when idle so that the job ends and Slurm has the node back.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/logging.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "common/temp_dir.h"
#include "common/units.h"
#include "model/accelerators.h"
#include "model/fleet.h"
#include "spec/slurm.h"

namespace meridian::cli {
namespace {

namespace fs = std::filesystem;

// For /bin/sh: 'it'\''s'.
std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a Slurm command; its stdout, or an error naming it with what it printed.
StatusOr<std::string> RunSlurm(std::vector<std::string> argv, size_t max_bytes) {
  ProcessOptions p;
  p.argv = std::move(argv);
  p.env = CurrentEnvironment();
  p.timeout_us = 60'000'000;
  p.max_stdout_head = max_bytes + 1;
  const std::string command = p.argv[0];
  std::atomic<bool> stop{false};
  StatusOr<ProcessResult> r = RunProcess(p, stop);
  if (!r.ok()) return r.status().WithPrefix(fmt::format("{} (is Slurm installed here?)", p.argv[0]));
  // What it printed, on one line.
  std::string err;
  for (size_t start = 0; start < r->stderr_tail.size();) {
    size_t end = r->stderr_tail.find('\n', start);
    if (end == std::string::npos) end = r->stderr_tail.size();
    std::string_view line = std::string_view(r->stderr_tail).substr(start, end - start);
    if (!line.empty()) err += (err.empty() ? "" : "; ") + std::string(line);
    start = end + 1;
  }
  if (r->timed_out) return UnavailableError(fmt::format("{}: no answer within 60 s", command));
  if (r->signal != 0 || r->exit_code != 0) {
    return UnavailableError(fmt::format("{}: exit {}: {}", command, r->signal != 0 ? 128 + r->signal : r->exit_code,
                                        err.empty() ? "(nothing on stderr)" : err));
  }
  if (r->stdout_bytes > static_cast<int64_t>(max_bytes)) {
    return InvalidArgumentError(fmt::format("{}: {} bytes of output, more than the {} read", command, r->stdout_bytes,
                                            max_bytes));
  }
  return r->stdout_head;
}

// Characters sbatch's values here may hold; nothing a shell or Slurm would take apart.
Status CheckSlurmValue(const std::string& value, std::string_view flag) {
  if (value.size() > 256 || value.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                    ":_,.-=+[]") != std::string::npos) {
    return InvalidArgumentError(fmt::format("{}: '{}': expected at most 256 letters, digits and :_,.-=+[]", flag, value));
  }
  return OkStatus();
}

}  // namespace

StatusOr<spec::NodeConfig> SlurmNodeConfig(AgentCommandOptions& o) {
  const std::string job = Getenv("SLURM_JOB_ID");
  const std::string node = Getenv("SLURMD_NODENAME");
  if (job.empty() || node.empty()) {
    return FailedPreconditionError(
        "--slurm: SLURM_JOB_ID and SLURMD_NODENAME are not set: run the agent inside a Slurm job (meridian slurm "
        "submit, or srun in a batch script)");
  }
  MERIDIAN_RETURN_IF_ERROR(CheckSlurmValue(job, "SLURM_JOB_ID"));
  MERIDIAN_ASSIGN_OR_RETURN(std::string text, RunSlurm({"scontrol", "show", "job", "-d", job}, spec::kMaxSlurmJobText));
  MERIDIAN_ASSIGN_OR_RETURN(spec::SlurmAllocation allocation, spec::ParseSlurmJob(text, node));
  spec::SlurmNodeOptions so;
  so.site = o.site;
  so.untyped_gpu = o.gpu_type;
  if (!o.gpu_types.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(so.gpu_types, spec::ParseGpuTypeMap(o.gpu_types));
  }
  std::string note;
  MERIDIAN_ASSIGN_OR_RETURN(spec::NodeConfig config, spec::NodeFromSlurm(allocation, so, &note));
  // Other nodes fetch objects from its transfer server: it listens on the node's
  // address, not loopback, unless told otherwise.
  if (o.transfer_host.empty()) {
    StatusOr<std::string> address = ResolveNumeric(node, 0);
    if (address.ok()) {
      std::string host = address->substr(0, address->rfind(':'));
      if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
      config.agent.transfer_host = host;
    } else {
      MERIDIAN_LOG_WARN("{}: its transfer server listens on 127.0.0.1 (give --transfer-host)",
                        address.status().message());
    }
  }
  // Each node keeps its certificate under nodes/NAME, beside the cluster's ca.crt.
  if (!o.tls_dir.empty() && !o.insecure) {
    const fs::path own = fs::path(o.tls_dir) / "nodes" / config.node.name;
    std::error_code ec;
    fs::create_directories(own, ec);
    if (!ec && !fs::exists(own / "ca.crt")) fs::copy_file(fs::path(o.tls_dir) / "ca.crt", own / "ca.crt", ec);
    if (ec) return InvalidArgumentError(fmt::format("--tls-dir: cannot set up {}: {}", own.string(), ec.message()));
    o.tls_dir = own.string();
  }
  MERIDIAN_LOG_INFO("slurm job {} in partition {}: node {} with {} CPUs, {} of memory, {} devices{}", allocation.job_id,
                    allocation.partition, config.node.name, allocation.cpus, FormatBytes(config.node.memory_bytes),
                    config.node.devices.size(), note.empty() ? "" : "; " + note);
  return config;
}

Status RunSlurmSubmit(const SlurmSubmitOptions& given, std::ostream& out) {
  SlurmSubmitOptions o = given;
  if (o.partition.empty()) return InvalidArgumentError("--partition is required: the Slurm partition the agents run in");
  MERIDIAN_RETURN_IF_ERROR(CheckSlurmValue(o.partition, "--partition"));
  MERIDIAN_RETURN_IF_ERROR(model::CheckName(o.site.empty() ? o.partition : o.site,
                                            o.site.empty() ? "--partition (the site's name unless --site)" : "--site"));
  if (o.nodes < 1 || o.nodes > 10'000) return InvalidArgumentError("--nodes: expected 1 to 10000");
  for (auto [value, flag] : {std::pair{&o.gres, "--gres"}, {&o.mem, "--mem"}, {&o.time, "--time"},
                             {&o.job_name, "--job-name"}, {&o.gpu_types, "--gpu-types"}, {&o.gpu_type, "--gpu-type"}}) {
    if (!value->empty()) MERIDIAN_RETURN_IF_ERROR(CheckSlurmValue(*value, flag));
  }
  if (o.job_name.empty()) return InvalidArgumentError("--job-name: empty");
  if (o.cpus < 0) return InvalidArgumentError("--cpus: expected a positive number");
  if (!o.gpu_types.empty()) MERIDIAN_RETURN_IF_ERROR(spec::ParseGpuTypeMap(o.gpu_types).status());
  if (!o.gpu_type.empty() && !model::FindAcceleratorType(o.gpu_type)) {
    return InvalidArgumentError(fmt::format("--gpu-type: unknown accelerator type '{}' (known: {})", o.gpu_type,
                                            model::KnownAcceleratorTypeNames()));
  }
  StatusOr<int64_t> idle = ParseDurationUs(o.idle_exit);
  if (!idle.ok() || *idle < 0) {
    return InvalidArgumentError(
        fmt::format("--idle-exit: expected a duration such as 5m, or 0 for never; got '{}'", o.idle_exit));
  }
  if (o.coordinator.empty()) {
    return InvalidArgumentError("--coordinator HOST:PORT is required (or MERIDIAN_COORDINATOR): the agents join it");
  }
  // The agents read these paths on their nodes: absolute, as on a shared file system.
  auto absolute = [](std::string& path) {
    if (!path.empty()) path = fs::absolute(path).lexically_normal().string();
  };
  for (std::string* path : {&o.tls_dir, &o.join_token_file, &o.work_dir, &o.log_dir, &o.meridian}) absolute(*path);
  if (!o.insecure) {
    if (o.tls_dir.empty() || o.join_token_file.empty()) {
      return InvalidArgumentError(
          "--tls-dir (with the cluster's ca.crt) and --join-token-file (meridian token create --role agent) are "
          "required, on a file system the nodes share; or --insecure for a coordinator started with --insecure");
    }
    if (!fs::exists(fs::path(o.tls_dir) / "ca.crt")) {
      return InvalidArgumentError(fmt::format("--tls-dir: no ca.crt in {}", o.tls_dir));
    }
    if (!fs::exists(o.join_token_file)) {
      return InvalidArgumentError(fmt::format("--join-token-file: no file {}", o.join_token_file));
    }
  }
  if (o.meridian.empty()) o.meridian = SelfExecutable();

  // At info, as `meridian up` starts its agents: the job's output file is its log.
  std::vector<std::string> agent = {o.meridian,   "--log-level", "info",        "agent",      "--slurm",
                                    "--coordinator", o.coordinator, "--idle-exit", o.idle_exit};
  for (auto [value, flag] : {std::pair{&o.site, "--site"}, {&o.gpu_types, "--gpu-types"}, {&o.gpu_type, "--gpu-type"},
                             {&o.tls_dir, "--tls-dir"}, {&o.join_token_file, "--join-token-file"},
                             {&o.work_dir, "--work-dir"}}) {
    if (!value->empty()) agent.insert(agent.end(), {flag, *value});
  }
  if (o.insecure) agent.push_back("--insecure");
  std::string script = fmt::format(
      "#!/bin/sh\n"
      "# Written by meridian slurm submit: a Meridian agent on this job's node, joining {}.\n"
      "# It leaves the pool after {} idle; then the job ends and Slurm has the node back.\n"
      "exec srun --ntasks=1",
      o.coordinator, o.idle_exit);
  for (const std::string& a : agent) script += " " + ShellQuote(a);
  script += "\n";

  const bool array = o.nodes > 1;
  const std::string output =
      (fs::path(o.log_dir) / (o.job_name + (array ? "-%A_%a.out" : "-%j.out"))).string();
  std::vector<std::string> sbatch = {"sbatch", "--parsable", "--job-name", o.job_name, "--partition", o.partition,
                                     "--nodes", "1", "--ntasks", "1", "--output", output};
  // One job per node: each leaves when its own node is idle.
  if (array) sbatch.insert(sbatch.end(), {"--array", fmt::format("0-{}", o.nodes - 1)});
  if (!o.gres.empty()) sbatch.insert(sbatch.end(), {"--gres", o.gres});
  if (o.cpus > 0) sbatch.insert(sbatch.end(), {"--cpus-per-task", std::to_string(o.cpus)});
  if (!o.mem.empty()) sbatch.insert(sbatch.end(), {"--mem", o.mem});
  if (!o.time.empty()) sbatch.insert(sbatch.end(), {"--time", o.time});
  sbatch.insert(sbatch.end(), o.sbatch_args.begin(), o.sbatch_args.end());

  if (o.dry_run) {
    std::string command;
    for (const std::string& a : sbatch) command += (command.empty() ? "" : " ") + ShellQuote(a);
    out << "# " << command << " SCRIPT\n" << script;
    return OkStatus();
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TempDir> tmp, TempDir::Make("meridian-sbatch"));
  const fs::path script_file = fs::path(tmp->path()) / "meridian-agent.sh";
  MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(script_file, script));
  sbatch.push_back(script_file.string());  // sbatch keeps its own copy
  MERIDIAN_ASSIGN_OR_RETURN(std::string answer, RunSlurm(sbatch, 4096));
  std::string job_id = answer.substr(0, answer.find_first_of(";\n"));
  if (job_id.empty() || job_id.find_first_not_of("0123456789") != std::string::npos) {
    return UnavailableError(fmt::format("sbatch answered '{}', not a job id", answer));
  }
  const std::string site = o.site.empty() ? o.partition : o.site;
  const std::string logs = (fs::path(o.log_dir) / (o.job_name + (array ? "-" + job_id + "_*.out" : "-" + job_id + ".out"))).string();
  if (o.json) {
    out << nlohmann::json{{"job_id", job_id},  {"agents", o.nodes},        {"partition", o.partition},
                          {"site", site},      {"gres", o.gres},           {"idle_exit", o.idle_exit},
                          {"logs", logs},      {"coordinator", o.coordinator}}
               .dump(2)
        << '\n';
    return OkStatus();
  }
  out << fmt::format("submitted Slurm job {}: {} agent{} in partition {} (site {}){}; each leaves the pool after {} "
                     "idle\n",
                     job_id, o.nodes, o.nodes == 1 ? "" : "s", o.partition, site,
                     o.gres.empty() ? "" : ", gres " + o.gres, o.idle_exit);
  out << fmt::format("follow: squeue -j {}   logs: {}   stop: scancel {}\n", job_id, logs, job_id);
  return OkStatus();
}

}  // namespace meridian::cli
