// `meridian gang train`: the built-in data-parallel trainer (workloads/training) as one
// rank of a gang. Each member listens for its peers on MASTER_PORT + 1 + WORLD_SIZE +
// RANK (above `gang mpirun`'s launch ports) and proves the gang's secret on every
// connection (collective/communicator.h). See docs/training.md.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "collective/communicator.h"
#include "kernels/ops.h"
#include "common/logging.h"
#include "spec/yaml_reader.h"
#include "workloads/training/trainer.h"

namespace meridian::cli {
namespace {

namespace fs = std::filesystem;

StatusOr<collective::Algorithm> ParseAlgorithm(const std::string& name) {
  if (name == "auto") return collective::Algorithm::kAuto;
  if (name == "ring") return collective::Algorithm::kRing;
  if (name == "hierarchical") return collective::Algorithm::kHierarchical;
  return InvalidArgumentError(fmt::format("--algorithm {}: expected auto, ring or hierarchical", name));
}

}  // namespace

StatusOr<const kernels::Ops*> ChooseDevice(const std::string& device, std::string_view who) {
  if (device == "cpu") return &kernels::CpuOps();
  if (device != "gpu" && device != "auto") {
    return InvalidArgumentError(fmt::format("--device {}: expected auto, cpu or gpu", device));
  }
  if (device == "auto" && Getenv("CUDA_VISIBLE_DEVICES").empty()) return &kernels::CpuOps();
  StatusOr<const kernels::Ops*> gpu = kernels::GpuOps(0);
  if (gpu.ok() || device == "gpu") return gpu;
  std::cerr << who << ": no GPU answers (" << gpu.status().message() << "); on the CPU\n";
  return &kernels::CpuOps();
}

namespace {

// Writes the checkpoint where the agent collects it: a new file renamed over the old,
// so the agent never reads half of one.
Status WriteCheckpoint(const std::string& dir, const std::string& bytes) {
  const std::string tmp = dir + "/.checkpoint.partial";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) return UnavailableError(fmt::format("cannot write {}", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, dir + "/checkpoint", ec);
  if (ec) return UnavailableError(fmt::format("cannot write {}/checkpoint: {}", dir, ec.message()));
  return OkStatus();
}

}  // namespace

Status RunGangTrain(const GangTrainOptions& options, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(collective::Algorithm algorithm, ParseAlgorithm(options.algorithm));
  MERIDIAN_ASSIGN_OR_RETURN(const kernels::Ops* ops, ChooseDevice(options.device, "gang train"));
  MERIDIAN_ASSIGN_OR_RETURN(GangMember m, ReadGangMember());
  if (options.data.empty()) return InvalidArgumentError("--data: the digits file is required");
  MERIDIAN_ASSIGN_OR_RETURN(training::Digits digits, training::LoadDigits(options.data));
  training::TrainOptions t = options.train;
  t.algorithm = algorithm;
  t.ops = ops;
  MERIDIAN_RETURN_IF_ERROR(training::CheckTrainOptions(t, digits.size(), static_cast<int>(m.world)));

  const int64_t first_port = int64_t{m.master_port} + 1 + m.world;
  if (first_port + m.world > 65535) {
    return FailedPreconditionError(
        fmt::format("MASTER_PORT {} leaves no collective port for {} ranks", m.master_port, m.world));
  }
  collective::CommunicatorOptions co;
  co.rank = static_cast<int>(m.rank);
  co.secret = m.secret;
  co.timeout_us = options.timeout_us;
  for (uint32_t r = 0; r < m.world; ++r) {
    const std::string& h = m.hosts[r];
    const std::string host = h.find(':') == std::string::npos ? h : "[" + h + "]";
    co.ranks.push_back({fmt::format("{}:{}", host, first_port + r), m.sites[r]});
  }
  const std::string& own_host = m.hosts[m.rank];
  MERIDIAN_ASSIGN_OR_RETURN(
      std::unique_ptr<TcpListener> listener,
      TcpListener::Listen(own_host.find(':') == std::string::npos ? "0.0.0.0" : "::",
                          static_cast<int>(first_port + m.rank)));
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<collective::Communicator> comm,
                            collective::Communicator::Create(std::move(listener), co));

  training::Trainer trainer(digits, t, comm.get());
  // A checkpoint to resume from: the one the coordinator gave this member's attempt.
  if (const std::string from = Getenv("MERIDIAN_CHECKPOINT"); !from.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(std::string bytes, spec::ReadFileToString(from, training::CheckpointBytes(t.hidden)));
    StatusOr<training::Checkpoint> c = training::DecodeCheckpoint(bytes, t.hidden);
    if (!c.ok()) return DataLossError(fmt::format("{}: {}", from, c.status().message()));
    MERIDIAN_RETURN_IF_ERROR(trainer.Restore(*c));
    std::cerr << fmt::format("rank {}: resuming from the checkpoint of step {}\n", m.rank, c->step);
  }
  const std::string checkpoint_dir = Getenv("MERIDIAN_CHECKPOINT_DIR");
  if (t.checkpoint_every > 0 && checkpoint_dir.empty()) {
    return FailedPreconditionError(
        "--checkpoint-every: MERIDIAN_CHECKPOINT_DIR is not set (the agent sets it for a task with checkpoints)");
  }
  // An elastic gang (gang_failure: elastic) goes on when a rank is lost: the others
  // roll back to their last checkpoint and rejoin, in the communicator's next
  // generation, with the rank's replacement, which resumes from that checkpoint (the
  // coordinator hands it over). Every rank first tells the others where it listens.
  const bool elastic = Getenv("MERIDIAN_GANG_FAILURE") == "elastic";
  constexpr int64_t kAnnounceUs = 2'000'000;
  if (elastic) comm->Announce(kAnnounceUs);
  // Rejoining gives up after rejoin_us of failures with no step done in between.
  auto give_up = std::chrono::steady_clock::time_point::max();
  int64_t failed_at = -1;
  int rejoins = 0;
  StatusOr<training::TrainResult> result = InternalError("not trained");
  for (;;) {
    result = trainer.Run(
        [&](const training::Checkpoint& c) {
          return WriteCheckpoint(checkpoint_dir, training::EncodeCheckpoint(c, t.hidden));
        },
        [&](const training::EpochReport& e) {
          std::cerr << fmt::format("epoch {}/{} step {} loss {:.6f}\n", e.epoch, t.epochs, e.step, e.loss);
        });
    if (result.ok() || !elastic) break;
    const StatusCode code = result.status().code();
    if (code == StatusCode::kInvalidArgument || code == StatusCode::kFailedPrecondition) break;
    if (trainer.step() > failed_at) {
      give_up = std::chrono::steady_clock::now() + std::chrono::microseconds(options.rejoin_us);
    } else if (std::chrono::steady_clock::now() > give_up) {
      break;
    }
    failed_at = trainer.step();
    std::cerr << fmt::format("rank {}: {}; rejoining the gang from the last checkpoint\n", m.rank,
                             result.status().message());
    trainer.RollBack();
    comm->Rejoin();
    comm->Announce(kAnnounceUs);
    ++rejoins;
  }
  if (!result.ok()) return result.status();
  if (!options.save_model.empty() && m.rank == 0) {
    // The trained model, for meridian replica --model (docs/serving.md).
    MERIDIAN_RETURN_IF_ERROR(
        WriteOutputFile(options.save_model, training::EncodeCheckpoint(trainer.Current(), t.hidden)));
  }
  nlohmann::json j;
  j["rank"] = m.rank;
  j["world_size"] = m.world;
  j["node"] = Getenv("MERIDIAN_NODE");
  j["site"] = m.sites[m.rank];
  j["device"] = ops->name();
  j["accuracy"] = result->test_accuracy;
  j["final_loss"] = result->final_loss;
  j["steps"] = result->steps;
  j["parameters"] = result->parameters;
  j["resumed_from"] = result->resumed_from;
  j["checksum"] = result->checksum;
  j["bytes_sent"] = comm->bytes_sent();
  j["rejoins"] = rejoins;
  j["shared_memory_connections"] = comm->shared_memory_connections();
  j["generation"] = comm->generation();
  out << j.dump() << '\n';
  return OkStatus();
}

}  // namespace meridian::cli
