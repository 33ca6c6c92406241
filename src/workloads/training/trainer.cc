#include "workloads/training/trainer.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "kernels/generate.h"

namespace meridian::training {
namespace {

constexpr std::string_view kMagic = "MRCK";
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 4 + 8 + 8 + 8;  // magic, version, hidden, step, loss, count

template <typename T>
void Append(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

template <typename T>
T Take(std::string_view& in) {
  T v;
  std::memcpy(&v, in.data(), sizeof(T));
  in.remove_prefix(sizeof(T));
  return v;
}

uint32_t Crc(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (!bytes.empty()) {
    const uInt n = static_cast<uInt>(std::min<size_t>(bytes.size(), 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), n);
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

std::string Fnv1a(const std::vector<float>& v, size_t count) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < count * sizeof(float); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

// Fisher-Yates over `ids` with the counter-based stream `seed`.
void Shuffle(std::vector<int64_t>& ids, uint64_t seed) {
  for (size_t i = ids.size(); i > 1; --i) {
    const auto j = static_cast<size_t>(kernels::gen::Int(seed, i, 0, i));
    std::swap(ids[i - 1], ids[j]);
  }
}

}  // namespace

Status CheckTrainOptions(const TrainOptions& o, int64_t images, int world) {
  if (o.hidden < 1 || o.hidden > 4096) return InvalidArgumentError(fmt::format("hidden {}: expected 1..4096", o.hidden));
  if (o.epochs < 1 || o.epochs > 100000) {
    return InvalidArgumentError(fmt::format("epochs {}: expected 1..100000", o.epochs));
  }
  if (o.test_images < 1 || o.test_images >= images) {
    return InvalidArgumentError(
        fmt::format("test images {}: expected 1..{} (the data holds {} images)", o.test_images, images - 1, images));
  }
  if (o.batch < world || o.batch > images - o.test_images) {
    return InvalidArgumentError(fmt::format("batch {}: expected {}..{} (at least one image a rank, at most the {} "
                                            "training images)",
                                            o.batch, world, images - o.test_images, images - o.test_images));
  }
  if (!(o.learning_rate > 0.0 && o.learning_rate <= 10.0)) {
    return InvalidArgumentError(fmt::format("learning rate {}: expected (0, 10]", o.learning_rate));
  }
  if (!(o.momentum >= 0.0 && o.momentum < 1.0)) {
    return InvalidArgumentError(fmt::format("momentum {}: expected [0, 1)", o.momentum));
  }
  if (o.checkpoint_every < 0) {
    return InvalidArgumentError(fmt::format("checkpoint every {} steps: expected 0 (none) or more", o.checkpoint_every));
  }
  return OkStatus();
}

std::string EncodeCheckpoint(const Checkpoint& c, int32_t hidden) {
  std::string out(kMagic);
  Append<uint32_t>(out, kVersion);
  Append<int32_t>(out, hidden);
  Append<int64_t>(out, c.step);
  Append<double>(out, c.epoch_loss);
  Append<uint64_t>(out, c.state.size());
  out.append(reinterpret_cast<const char*>(c.state.data()), c.state.size() * sizeof(float));
  Append<uint32_t>(out, Crc(out));
  return out;
}

int64_t ParameterCount(int32_t hidden) { return int64_t{kDigitPixels + 1 + kDigitClasses} * hidden + kDigitClasses; }

StatusOr<int32_t> CheckpointHidden(std::string_view bytes) {
  if (bytes.size() < kHeaderBytes || bytes.substr(0, 4) != kMagic) {
    return DataLossError("not a checkpoint of Meridian's trainer (no MRCK header)");
  }
  int32_t hidden;
  std::memcpy(&hidden, bytes.data() + 8, sizeof(hidden));
  if (hidden < 1 || hidden > kernels::kMaxMlpWidth) {
    return DataLossError(fmt::format("the checkpoint's hidden size {} is not in 1..{}", hidden, kernels::kMaxMlpWidth));
  }
  return hidden;
}

Checkpoint Trainer::Current() const {
  Checkpoint c;
  c.step = step_;
  c.epoch_loss = epoch_loss_;
  c.state = params_;
  c.state.insert(c.state.end(), velocity_.begin(), velocity_.end());
  return c;
}

int64_t CheckpointBytes(int32_t hidden) {
  return static_cast<int64_t>(kHeaderBytes + 2 * ParameterCount(hidden) * sizeof(float) + 4);
}

StatusOr<Checkpoint> DecodeCheckpoint(std::string_view bytes, int32_t hidden) {
  const uint64_t want = 2 * static_cast<uint64_t>(ParameterCount(hidden));
  const auto expected = static_cast<size_t>(CheckpointBytes(hidden));
  if (bytes.size() < kHeaderBytes || bytes.substr(0, 4) != kMagic) {
    return DataLossError("not a checkpoint of Meridian's trainer (no MRCK header)");
  }
  std::string_view in = bytes.substr(4);
  const auto version = Take<uint32_t>(in);
  const auto their_hidden = Take<int32_t>(in);
  Checkpoint c;
  c.step = Take<int64_t>(in);
  c.epoch_loss = Take<double>(in);
  const auto count = Take<uint64_t>(in);
  if (version != kVersion) return DataLossError(fmt::format("checkpoint version {}; this trainer reads {}", version, kVersion));
  if (their_hidden != hidden || count != want) {
    return DataLossError(fmt::format("the checkpoint is of a model with {} hidden units ({} values); this one has {}",
                                     their_hidden, count, hidden));
  }
  if (bytes.size() != expected) {
    return DataLossError(fmt::format("the checkpoint is {} bytes; a model with {} hidden units needs {}", bytes.size(),
                                     hidden, expected));
  }
  uint32_t crc;
  std::memcpy(&crc, bytes.data() + expected - 4, 4);
  if (crc != Crc(bytes.substr(0, expected - 4))) return DataLossError("the checkpoint's CRC-32 does not match its bytes");
  if (c.step < 0) return DataLossError(fmt::format("the checkpoint's step {} is negative", c.step));
  c.state.resize(count);
  std::memcpy(c.state.data(), in.data(), count * sizeof(float));
  return c;
}

Trainer::Trainer(const Digits& data, TrainOptions options, collective::Communicator* comm)
    : data_(data), options_(options), comm_(comm), ops_(options.ops != nullptr ? options.ops : &kernels::CpuOps()) {
  if (comm_ != nullptr) {
    rank_ = comm_->rank();
    world_ = comm_->size();
  }
  std::vector<int64_t> all(static_cast<size_t>(data.size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  Shuffle(all, kernels::gen::Bits(options_.seed, 0));
  // (Run refuses options that do not fit the data; this only keeps the split inside it.)
  const auto held = static_cast<ptrdiff_t>(std::clamp<int64_t>(options_.test_images, 0, data.size()));
  test_.assign(all.begin(), all.begin() + held);
  train_.assign(all.begin() + held, all.end());
  std::sort(train_.begin(), train_.end());  // each epoch shuffles it afresh

  Initialise();
}

void Trainer::Initialise() {
  const int64_t h = options_.hidden;
  params_.assign(static_cast<size_t>(ParameterCount(options_.hidden)), 0.0f);
  // Glorot-uniform weights, zero biases.
  const double a1 = std::sqrt(6.0 / static_cast<double>(kDigitPixels + h));
  const double a2 = std::sqrt(6.0 / static_cast<double>(h + kDigitClasses));
  const uint64_t init = kernels::gen::Bits(options_.seed, 1);
  for (int64_t i = 0; i < kDigitPixels * h; ++i) {
    params_[i] = static_cast<float>(a1 * kernels::gen::Signed(init, i));
  }
  const int64_t w2 = (kDigitPixels + 1) * h;
  for (int64_t i = 0; i < h * kDigitClasses; ++i) {
    params_[w2 + i] = static_cast<float>(a2 * kernels::gen::Signed(init, kDigitPixels * h + i));
  }
  velocity_.assign(params_.size(), 0.0f);
  grad_.assign(params_.size() + 1, 0.0f);
  step_ = 0;
  epoch_loss_ = 0.0;
}

Status Trainer::Agree() {
  // The newest step any rank can start from (one without a checkpoint: step 0): every
  // rank's checkpoint of a step is the same state, made after an update all ranks
  // made together...
  std::vector<double> step{static_cast<double>(step_)};
  MERIDIAN_RETURN_IF_ERROR(comm_->AllReduce(std::span<double>(step), collective::ReduceOp::kMax));
  // ...and the lowest rank that holds it.
  std::vector<double> root{static_cast<double>(static_cast<double>(step_) == step[0] ? rank_ : world_)};
  MERIDIAN_RETURN_IF_ERROR(comm_->AllReduce(std::span<double>(root), collective::ReduceOp::kMin));
  const auto start = static_cast<int64_t>(step[0]);
  if (start == 0) return OkStatus();  // everyone has the seed's weights
  // Its state, to every rank: parameters, momentum and the epoch's loss so far.
  std::vector<std::byte> state((2 * params_.size()) * sizeof(float) + sizeof(double));
  std::memcpy(state.data(), params_.data(), params_.size() * sizeof(float));
  std::memcpy(state.data() + params_.size() * sizeof(float), velocity_.data(), velocity_.size() * sizeof(float));
  std::memcpy(state.data() + 2 * params_.size() * sizeof(float), &epoch_loss_, sizeof(double));
  MERIDIAN_RETURN_IF_ERROR(comm_->Broadcast(std::span<std::byte>(state), static_cast<int>(root[0])));
  std::memcpy(params_.data(), state.data(), params_.size() * sizeof(float));
  std::memcpy(velocity_.data(), state.data() + params_.size() * sizeof(float), velocity_.size() * sizeof(float));
  std::memcpy(&epoch_loss_, state.data() + 2 * params_.size() * sizeof(float), sizeof(double));
  step_ = start;
  resumed_from_ = start;
  return OkStatus();
}

Status Trainer::Restore(const Checkpoint& c) {
  if (c.state.size() != 2 * params_.size()) {
    return InvalidArgumentError(
        fmt::format("the checkpoint holds {} values; this model needs {}", c.state.size(), 2 * params_.size()));
  }
  std::copy(c.state.begin(), c.state.begin() + params_.size(), params_.begin());
  std::copy(c.state.begin() + params_.size(), c.state.end(), velocity_.begin());
  step_ = c.step;
  epoch_loss_ = c.epoch_loss;
  resumed_from_ = c.step;
  last_checkpoint_ = c;
  return OkStatus();
}

void Trainer::RollBack() {
  if (!last_checkpoint_) {
    Initialise();
    return;
  }
  const Checkpoint c = *last_checkpoint_;
  (void)Restore(c);  // it fitted when it was made
}

std::vector<int64_t> Trainer::EpochOrder(int32_t epoch) const {
  std::vector<int64_t> order = train_;
  Shuffle(order, kernels::gen::Bits(options_.seed, 1'000'000 + static_cast<uint64_t>(epoch)));
  return order;
}

kernels::MlpShape Trainer::Shape() const {
  return kernels::MlpShape{kDigitPixels, options_.hidden, kDigitClasses};
}

Status Trainer::Gradient(std::span<const int64_t> ids) {
  batch_x_.resize(ids.size() * kDigitPixels);
  batch_labels_.resize(ids.size());
  for (size_t n = 0; n < ids.size(); ++n) {
    const auto id = static_cast<size_t>(ids[n]);
    std::copy_n(&data_.pixels[id * kDigitPixels], kDigitPixels, &batch_x_[n * kDigitPixels]);
    batch_labels_[n] = data_.labels[id];
  }
  double loss = 0.0;
  MERIDIAN_RETURN_IF_ERROR(ops_->MlpGradient(Shape(), params_, batch_x_, batch_labels_,
                                             std::span<float>(grad_.data(), params_.size()), &loss));
  grad_.back() = static_cast<float>(loss);
  return OkStatus();
}

double Trainer::Accuracy(const std::vector<int64_t>& ids) const {
  std::vector<float> hid(static_cast<size_t>(options_.hidden));
  int64_t right = 0;
  for (const int64_t id : ids) {
    float logits[kDigitClasses];
    kernels::MlpForward(Shape(), params_.data(), &data_.pixels[static_cast<size_t>(id) * kDigitPixels], hid.data(),
                        logits);
    if (std::max_element(logits, logits + kDigitClasses) - logits == data_.labels[static_cast<size_t>(id)]) ++right;
  }
  return static_cast<double>(right) / static_cast<double>(ids.size());
}

StatusOr<TrainResult> Trainer::Run(const std::function<Status(const Checkpoint&)>& on_checkpoint,
                                   const std::function<void(const EpochReport&)>& on_epoch) {
  MERIDIAN_RETURN_IF_ERROR(CheckTrainOptions(options_, data_.size(), world_));
  const auto n = static_cast<int64_t>(train_.size());
  const int64_t per_epoch = (n + options_.batch - 1) / options_.batch;
  const int64_t total = per_epoch * options_.epochs;
  if (step_ > total) {
    return InvalidArgumentError(fmt::format("the checkpoint is of step {}; this run has only {}", step_, total));
  }
  if (comm_ != nullptr && world_ > 1) MERIDIAN_RETURN_IF_ERROR(Agree());
  TrainResult result;
  std::vector<int64_t> order;
  int32_t order_epoch = -1;
  const std::span<float> reduced(grad_.data(), grad_.size());
  for (int64_t s = step_; s < total; ++s) {
    const auto epoch = static_cast<int32_t>(s / per_epoch);
    const int64_t k = s % per_epoch;
    if (epoch != order_epoch) {
      order = EpochOrder(epoch);
      order_epoch = epoch;
    }
    const int64_t begin = k * options_.batch;
    const int64_t len = std::min<int64_t>(options_.batch, n - begin);
    const auto [lo, hi] = collective::BlockRange(static_cast<size_t>(len), world_, rank_);
    MERIDIAN_RETURN_IF_ERROR(Gradient(std::span<const int64_t>(order).subspan(static_cast<size_t>(begin) + lo, hi - lo)));
    if (comm_ != nullptr && world_ > 1) {
      MERIDIAN_RETURN_IF_ERROR(comm_->AllReduce(reduced, collective::ReduceOp::kSum, options_.algorithm));
    }
    const auto scale = static_cast<float>(1.0 / static_cast<double>(len));
    const auto momentum = static_cast<float>(options_.momentum);
    const auto rate = static_cast<float>(options_.learning_rate);
    for (size_t i = 0; i < params_.size(); ++i) {
      velocity_[i] = momentum * velocity_[i] + grad_[i] * scale;
      params_[i] -= rate * velocity_[i];
    }
    epoch_loss_ += grad_.back();
    step_ = s + 1;
    if (k == per_epoch - 1) {
      result.final_loss = epoch_loss_ / static_cast<double>(n);
      if (on_epoch) on_epoch(EpochReport{epoch + 1, step_, result.final_loss});
      epoch_loss_ = 0.0;
    }
    if (options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0 && on_checkpoint) {
      Checkpoint c;
      c.step = step_;
      c.epoch_loss = epoch_loss_;
      c.state = params_;
      c.state.insert(c.state.end(), velocity_.begin(), velocity_.end());
      last_checkpoint_ = c;
      MERIDIAN_RETURN_IF_ERROR(on_checkpoint(c));
    }
  }
  result.test_accuracy = Accuracy(test_);
  result.steps = step_;
  result.parameters = static_cast<int64_t>(params_.size());
  result.resumed_from = resumed_from_;
  result.checksum = Fnv1a(params_, params_.size());
  return result;
}

}  // namespace meridian::training
