// meridian bench gemm: what running a GEMM as a Meridian task costs against calling
// cuBLAS directly. Three timings of the same work (n x n DGEMM, `repeat` products):
//   cuBLAS alone  the products, timed with CUDA events around the cuBLAS calls;
//   direct call   the same kernels/ops.h call in this process, wall clock (allocate,
//                 generate, products, checksums);
//   Meridian task the matmul kernel as a task on a one-node local cluster using this
//                 machine's GPU, from submission until the client sees it finished.
#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_cluster.h"
#include "cli/commands.h"
#include "client/client.h"
#include "kernels/ops.h"

namespace meridian::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string MatMulJob(const std::string& name, int64_t n, int64_t repeat) {
  return fmt::format(
      "name: {}\ntasks:\n  - name: gemm\n    kernel: matmul\n    args: {{n: {}, repeat: {}, seed: 7}}\n"
      "    resources: {{count: 1, cpu: 1}}\n",
      name, n, repeat);
}

// Runs one matmul task; the wall time from submission to the client seeing it done.
StatusOr<double> RunTask(client::Client& c, const std::string& spec, std::string* output) {
  Clock::time_point t0 = Clock::now();
  MERIDIAN_ASSIGN_OR_RETURN(rpc::SubmitResult r, c.Submit(spec, "gemm.yaml"));
  MERIDIAN_ASSIGN_OR_RETURN(model::JobSummary done, c.Watch(r.job_id, [](const model::JobSummary&) { return true; }));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (done.job.status != model::JobStatus::kSucceeded) {
    return InternalError(fmt::format("the GEMM task {}: {}", model::JobStatusName(done.job.status), done.job.reason));
  }
  MERIDIAN_ASSIGN_OR_RETURN(model::JobView v, c.GetJob(r.job_id, true));
  if (output != nullptr && !v.tasks.empty()) *output = v.tasks.front().record.output;
  return seconds;
}

}  // namespace

Status RunBenchGemm(const BenchGemmOptions& o, std::ostream& out) {
  if (o.n < 64 || o.n > kernels::kMaxGpuMatMulN) {
    return InvalidArgumentError(fmt::format("--n: expected 64 to {}", kernels::kMaxGpuMatMulN));
  }
  if (o.repeat < 1 || o.repeat > 10'000) return InvalidArgumentError("--repeat: expected 1 to 10000");
  StatusOr<const kernels::Ops*> gpu = kernels::GpuOps(0);
  if (!gpu.ok()) return FailedPreconditionError(fmt::format("bench gemm needs a CUDA GPU: {}", gpu.status().message()));
  const double flops = 2.0 * static_cast<double>(o.n) * static_cast<double>(o.n) * static_cast<double>(o.n) *
                       static_cast<double>(o.repeat);
  std::atomic<bool> stop{false};

  // Direct: warm up (context, cuBLAS handle, kernels), then the timed call.
  MERIDIAN_RETURN_IF_ERROR((*gpu)->MatMul(std::min<int64_t>(o.n, 1024), 1, 2, stop).status());
  Clock::time_point t0 = Clock::now();
  MERIDIAN_ASSIGN_OR_RETURN(kernels::MatMulResult direct, (*gpu)->MatMul(o.n, 7, o.repeat, stop));
  const double direct_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // As a task: a one-node cluster whose agent uses the GPU (the declared device is
  // replaced by what the agent finds).
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string fleet = fmt::format(
      "sites:\n  - {{name: local, kind: dc, provider: onprem, region: local}}\n"
      "nodes:\n  - {{name: gpu, site: local, cpu: {}, memory: 8GiB, devices: {{type: H100, count: 1}}}}\n",
      cores);
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<BenchCluster> cluster, BenchCluster::Start(fleet, true));
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> connected, cluster->Connect(600'000'000));
  client::Client& c = *connected;
  MERIDIAN_RETURN_IF_ERROR(RunTask(c, MatMulJob("gemm-warmup", std::min<int64_t>(o.n, 1024), 2), nullptr).status());
  std::string output;
  MERIDIAN_ASSIGN_OR_RETURN(double task_s, RunTask(c, MatMulJob("gemm", o.n, o.repeat), &output));

  const double cublas_tflops = flops / direct.gemm_seconds / 1e12;
  const double direct_tflops = flops / direct_s / 1e12;
  const double task_tflops = flops / task_s / 1e12;
  nlohmann::json j = {{"device", (*gpu)->name()},
                      {"n", o.n},
                      {"repeat", o.repeat},
                      {"cublas_only", {{"seconds", direct.gemm_seconds}, {"tflops", cublas_tflops}}},
                      {"direct_call", {{"seconds", direct_s}, {"tflops", direct_tflops}}},
                      {"meridian_task", {{"seconds", task_s}, {"tflops", task_tflops}, {"output", output}}},
                      {"task_vs_cublas", task_tflops / cublas_tflops},
                      {"task_vs_direct_call", task_tflops / direct_tflops}};
  if (o.json) {
    out << j.dump(2) << '\n';
    return OkStatus();
  }
  out << fmt::format("meridian bench gemm: {} x {} DGEMM x {} on {}\n", o.n, o.n, o.repeat, (*gpu)->name());
  out << fmt::format("  cuBLAS alone    {:>8.3f} s  {:>7.2f} TFLOP/s   (CUDA events around the cuBLAS calls)\n",
                     direct.gemm_seconds, cublas_tflops);
  out << fmt::format("  direct call     {:>8.3f} s  {:>7.2f} TFLOP/s   (allocate, generate, multiply, checksum)\n",
                     direct_s, direct_tflops);
  out << fmt::format("  Meridian task   {:>8.3f} s  {:>7.2f} TFLOP/s   (submit -> client sees it done)\n", task_s,
                     task_tflops);
  out << fmt::format("  the task reaches {:.1f}% of cuBLAS alone and {:.1f}% of the direct call\n",
                     100 * task_tflops / cublas_tflops, 100 * task_tflops / direct_tflops);
  out << fmt::format("  task output: {}\n", output);
  return OkStatus();
}

}  // namespace meridian::cli
