// Meridian's built-in data-parallel trainer: a two-layer perceptron (64 -> hidden ->
// 10, ReLU, softmax cross-entropy, SGD with momentum) on the digits, one replica per
// rank of a gang, gradients all-reduced by Meridian's collectives (src/collective/).
//
// Every step takes the next `batch` images of the epoch's order (a shuffle that is a
// pure function of the seed and the epoch); rank r computes the summed gradient of its
// block of them (collective::BlockRange), the ranks all-reduce the sums, and every
// replica applies the same update. So the model after step s depends only on the
// options and s (and, to rounding, on how the sum is split), whichever ranks computed
// it and however often the run was interrupted: a run resumed from a checkpoint of
// step s continues the very loss curve the undisturbed run would have drawn.
//
// Checkpoints are the replica's whole state (parameters and momentum) at a step,
// encoded by EncodeCheckpoint; every replica holds the same one, so they are the same
// bytes (the same object id) on every rank.
//
// Thread-safety: one Trainer per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "common/status.h"
#include "kernels/ops.h"
#include "workloads/training/digits.h"

namespace meridian::training {

struct TrainOptions {
  int32_t hidden = 128;   // 1..4096
  int32_t epochs = 30;    // 1..100000
  int32_t batch = 64;     // images a step, over all ranks (at least one a rank)
  double learning_rate = 0.05;
  double momentum = 0.9;
  uint64_t seed = 1;
  int32_t test_images = 360;       // held out, never trained on
  int64_t checkpoint_every = 0;    // steps; 0: no checkpoints
  collective::Algorithm algorithm = collective::Algorithm::kAuto;
  // Where gradients are computed: kernels::CpuOps() when null, or a GPU's.
  const kernels::Ops* ops = nullptr;
};

struct Checkpoint {
  int64_t step = 0;          // steps done
  double epoch_loss = 0.0;   // the loss summed over the epoch's images so far
  std::vector<float> state;  // parameters, then momentum
};

struct EpochReport {
  int32_t epoch = 0;  // 1-based
  int64_t step = 0;   // steps done at its end
  double loss = 0.0;  // mean training loss over the epoch's images (all ranks)
};

struct TrainResult {
  double test_accuracy = 0.0;  // fraction of the held-out images right
  double final_loss = 0.0;     // the last epoch's mean training loss
  int64_t steps = 0;
  int64_t parameters = 0;
  int64_t resumed_from = -1;   // the checkpoint's step, -1 when it started afresh
  std::string checksum;        // of the parameters' bytes (hex), the same on every rank
};

// Checks the options against the data: an error names the first one out of range.
Status CheckTrainOptions(const TrainOptions& options, int64_t images, int world);

// "MRCK" magic, a version, hidden size, step, element count, the floats (little
// endian), and a CRC-32 of all before it.
std::string EncodeCheckpoint(const Checkpoint& c, int32_t hidden);
// The model's parameters (w1, b1, w2, b2: kernels::MlpShape's layout), which a
// checkpoint's state begins with.
int64_t ParameterCount(int32_t hidden);
// The hidden size an encoded checkpoint's header names (kDataLoss when it is not one,
// or the size is out of range); DecodeCheckpoint then checks the rest.
StatusOr<int32_t> CheckpointHidden(std::string_view bytes);
// The size of an encoded checkpoint of a model with `hidden` hidden units.
int64_t CheckpointBytes(int32_t hidden);
// Refuses (kDataLoss, naming what) bytes that are not a checkpoint of a model with
// this hidden size, are cut, or whose checksum does not match.
StatusOr<Checkpoint> DecodeCheckpoint(std::string_view bytes, int32_t hidden);

class Trainer {
 public:
  // `comm` may be null when world == 1; otherwise its rank and size are this rank's.
  Trainer(const Digits& data, TrainOptions options, collective::Communicator* comm);

  // Starts from `c` instead of the seed's initial weights.
  Status Restore(const Checkpoint& c);
  // Back to the newest checkpoint this trainer made or was restored from (the seed's
  // weights when none): what a rank of a gang that lost a rank resumes from.
  void RollBack();

  // Trains to the last epoch. With several ranks it first agrees with the others where
  // to start: from the newest step any rank holds (a rank restored from a checkpoint,
  // or step 0: the seed's weights), in the state of the lowest rank holding it, which
  // it broadcasts. So ranks restarted with checkpoints of different ages (or none)
  // continue one model, losing the least work. `on_checkpoint` gets every checkpoint_every'th step's
  // state; `on_epoch` every epoch's loss. An error from either, or from a collective,
  // ends the run with it.
  StatusOr<TrainResult> Run(const std::function<Status(const Checkpoint&)>& on_checkpoint,
                            const std::function<void(const EpochReport&)>& on_epoch);

  int64_t parameter_count() const { return static_cast<int64_t>(params_.size()); }
  // The state now (after Run: the trained model), as a checkpoint holds it.
  Checkpoint Current() const;
  int64_t step() const { return step_; }  // steps done

 private:
  void Initialise();  // the seed's weights, zero momentum, step 0
  Status Agree();
  // The gradient of the summed loss over images `ids` into grad_ (the loss sum last),
  // on ops_.
  Status Gradient(std::span<const int64_t> ids);
  kernels::MlpShape Shape() const;
  double Accuracy(const std::vector<int64_t>& ids) const;
  std::vector<int64_t> EpochOrder(int32_t epoch) const;

  const Digits& data_;
  TrainOptions options_;
  collective::Communicator* comm_;
  int rank_ = 0;
  int world_ = 1;
  std::vector<int64_t> train_, test_;
  std::vector<float> params_, velocity_, grad_;
  int64_t step_ = 0;
  int64_t resumed_from_ = -1;
  std::optional<Checkpoint> last_checkpoint_;
  double epoch_loss_ = 0.0;
  const kernels::Ops* ops_;
  // A step's images and labels, laid out for ops_.
  std::vector<float> batch_x_;
  std::vector<int32_t> batch_labels_;
};

}  // namespace meridian::training
