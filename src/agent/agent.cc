#include "agent/agent.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "common/files.h"
#include "common/logging.h"
#include "common/parallel.h"
#include "common/units.h"
#include "kernels/devices.h"
#include "kernels/kernel.h"
#include "model/accelerators.h"

namespace meridian::agent {
namespace {

// Inputs this small that one holder has are fetched in one batch (one round trip on
// the link for all); larger ones one by one, several at once.
constexpr int64_t kBatchInputBytes = int64_t{1} << 20;
// Holders fetched from at once, a batch each.
constexpr size_t kMaxBatchSources = 8;

// How long one assignment stream stays open before it is renewed.
constexpr int64_t kStreamRenewUs = 60'000'000;

// "NVIDIA H200" -> "H200": the first known accelerator type named in the string.
std::string CanonicalGpuType(const std::string& name) {
  for (size_t start = 0; start < name.size();) {
    size_t end = name.find_first_of(" -_", start);
    if (end == std::string::npos) end = name.size();
    if (auto t = model::FindAcceleratorType(name.substr(start, end - start))) return std::string(t->name);
    start = end + 1;
  }
  return name;
}

}  // namespace

model::Node DescribeNode(const AgentOptions& options, std::string* note) {
  model::Node node = options.node;
  std::vector<kernels::GpuInfo> gpus;
  if (options.discover_gpus) gpus = kernels::DiscoverGpus(note);
  if (gpus.empty()) {
    // Nothing real: what the config declares runs on the CPU and says so.
    for (model::Device& d : node.devices) d.emulated = true;
    return node;
  }
  // Real GPUs replace the declared devices.
  node.devices.clear();
  for (const kernels::GpuInfo& g : gpus) {
    node.devices.push_back(model::Device{CanonicalGpuType(g.name), g.index, g.memory_bytes, false, 1.0});
  }
  return node;
}

Agent::Agent(AgentOptions options, Env& env)
    : options_(std::move(options)),
      env_(env),
      client_(std::make_unique<rpc::NodeClient>(options_.coordinator, options_.tls)) {
  std::string note;
  options_.node = DescribeNode(options_, &note);
  real_devices_ = !options_.node.devices.empty() && !options_.node.devices.front().emulated;
  MERIDIAN_LOG_INFO("node {} at {}: {} cores, {} devices ({}); {}", options_.node.name, options_.site,
                    options_.node.cpu_milli / 1000, options_.node.devices.size(),
                    real_devices_ ? "real" : "emulated", note);
  ExecutorOptions exec{options_.work_dir, options_.node.name, options_.site, real_devices_, options_.kernel_threads,
                       [this](const model::ObjectLocation& o, const std::atomic<bool>& stop,
                              std::vector<std::string>* damaged) { return FetchInput(o, stop, damaged); },
                       [this](const std::string& output) -> StatusOr<model::HeldObject> {
                         if (!objects_) return UnavailableError("the object store is not open");
                         MERIDIAN_ASSIGN_OR_RETURN(objects::ObjectId id, objects_->Put(output));
                         return model::HeldObject{id.Hex(), static_cast<int64_t>(output.size())};
                       }};
  exec.task_uid_base = options_.task_uid_base;
  exec.warm_python = options_.warm_python;
  exec.site_broker = options_.site_broker;
  exec.peer_brokers = options_.peer_brokers;
  exec.release_object = [this](const std::string& hex) {
    StatusOr<objects::ObjectId> id = objects::ObjectId::Parse(hex);
    if (id.ok() && objects_) objects_->Release(*id);
  };
  for (const model::Device& d : options_.node.devices) exec.device_memory_bytes[d.index] = d.memory_bytes;
  exec.fetch_together = [this](const std::vector<const model::ObjectLocation*>& objects, const std::atomic<bool>& stop) {
    return FetchTogether(objects, stop);
  };
  exec.pace_inline = [this](const std::map<std::string, int64_t>& bytes, const std::atomic<bool>& stop) {
    PaceInline(bytes, stop);
  };
  executor_ = std::make_unique<Executor>(std::move(exec), [this](model::TaskUpdate u) { OnUpdate(std::move(u)); });
}

Status Agent::StartObjects() {
  if (transfer_) return OkStatus();
  MERIDIAN_ASSIGN_OR_RETURN(
      objects_, objects::ObjectStore::Open(objects::StoreOptions{
                    options_.object_memory_bytes, (std::filesystem::path(options_.work_dir) / "objects").string()}));
  objects_->SetListener([this](const objects::ObjectId& id, int64_t size, bool added) {
    std::lock_guard<std::mutex> lock(mu_);
    object_changes_.push_back(ObjectChange{model::HeldObject{id.Hex(), size}, added});
    cv_.notify_all();
  });
  if (options_.tls.enabled()) {
    MERIDIAN_ASSIGN_OR_RETURN(std::shared_ptr<security::TlsContext> tls, security::TlsContext::Create(options_.tls));
    transfer_tls_ = std::move(tls);
  }
  objects::TransferServerOptions transfer;
  transfer.host = options_.transfer_host;
  transfer.port = options_.transfer_port;
  transfer.tls = transfer_tls_;
  transfer.insecure = options_.insecure_transfers;
  transfer.site = options_.site;
  MERIDIAN_ASSIGN_OR_RETURN(link_clocks_, objects::LinkClocks::Open(options_.link_clocks_file));
  transfer.clocks = link_clocks_;
  MERIDIAN_ASSIGN_OR_RETURN(transfer_, objects::TransferServer::Start(*objects_, std::move(transfer)));
  MERIDIAN_LOG_INFO("objects: {} in memory, then spilled to {}/objects; transfers at {}",
                    FormatBytes(options_.object_memory_bytes), options_.work_dir, transfer_->address());
  return OkStatus();
}

std::vector<const model::ObjectReplica*> Agent::ReplicasInOrder(const model::ObjectLocation& object) {
  std::vector<std::pair<int64_t, const model::ObjectReplica*>> order;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const model::ObjectReplica& r : object.replicas) {
      auto link = links_.find(r.site);
      int64_t bw = r.site == options_.site ? INT64_MAX
                   : link == links_.end() || link->second.bandwidth_bps == 0 ? 0
                                                                              : link->second.bandwidth_bps;
      order.emplace_back(bw, &r);
    }
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const model::ObjectReplica*> out;
  for (const auto& [bw, r] : order) out.push_back(r);
  return out;
}

StatusOr<FetchedInput> Agent::PinInput(const objects::ObjectId& id, bool fetched, model::InputTransfer transfer,
                                       std::vector<std::string>* damaged_nodes) {
  StatusOr<objects::Pinned> pinned = objects_->Pin(id);
  // A fetched copy lives as long as the task reads it: the pin holds it, the fetch's
  // reference goes now.
  if (fetched) objects_->Release(id);
  if (!pinned.ok()) {
    // The copy here was damaged (and is dropped): the cluster must not count on it.
    if (pinned.status().code() == StatusCode::kDataLoss && damaged_nodes) damaged_nodes->push_back(options_.node.name);
    return pinned.status();
  }
  auto keep = std::make_shared<objects::Pinned>(std::move(*pinned));
  std::string_view data = keep->data();
  return FetchedInput{keep, data, std::move(transfer)};
}

void Agent::PaceInline(const std::map<std::string, int64_t>& bytes_from_site, const std::atomic<bool>& stop) {
  if (!link_clocks_) return;
  int64_t until = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [from, bytes] : bytes_from_site) {
      auto link = links_.find(from);  // links are the same both ways
      if (link == links_.end() || link->second.bandwidth_bps <= 0) continue;
      until = std::max(until, link_clocks_->Book(from, options_.site, bytes, link->second.bandwidth_bps,
                                                 env_.clock().Now().us));
    }
  }
  for (int64_t left; !stop.load() && (left = until - env_.clock().Now().us) > 0;) {
    std::this_thread::sleep_for(std::chrono::microseconds(std::min<int64_t>(left, 50'000)));
  }
}

std::vector<std::optional<FetchedInput>> Agent::FetchTogether(const std::vector<const model::ObjectLocation*>& objects,
                                                              const std::atomic<bool>& stop) {
  std::vector<std::optional<FetchedInput>> out(objects.size());
  if (!objects_) return out;
  // Small objects not here, by the holder each would be fetched from first.
  struct Group {
    const model::ObjectReplica* from = nullptr;
    std::vector<size_t> members;
    std::vector<objects::ObjectId> ids;
  };
  std::map<std::string, Group> groups;
  for (size_t i = 0; i < objects.size(); ++i) {
    const model::ObjectLocation& o = *objects[i];
    StatusOr<objects::ObjectId> id = objects::ObjectId::Parse(o.id);
    if (!id.ok() || o.size > kBatchInputBytes || o.replicas.empty() || objects_->Contains(*id)) continue;
    const model::ObjectReplica* from = ReplicasInOrder(o).front();
    Group& g = groups[from->transfer_address];
    g.from = from;
    g.members.push_back(i);
    g.ids.push_back(*id);
  }
  std::vector<Group*> batches;
  for (auto& [address, g] : groups) {
    if (g.members.size() > 1) batches.push_back(&g);  // one alone gains nothing
  }
  ParallelFor(batches.size(), kMaxBatchSources, [&](size_t b) {
    const Group& g = *batches[b];
    objects::FetchOptions fo;
    fo.site = options_.site;
    fo.cancel = &stop;
    fo.tls = transfer_tls_;
    fo.ticket = objects[g.members.front()]->ticket;  // one for all of a task's inputs
    std::vector<StatusOr<objects::FetchStats>> got = objects::FetchBatch(g.from->transfer_address, g.ids, *objects_, fo);
    for (size_t k = 0; k < g.members.size(); ++k) {
      if (!got[k].ok()) continue;  // fetched alone next, which retries and reports damage
      const model::ObjectLocation& o = *objects[g.members[k]];
      StatusOr<FetchedInput> in = PinInput(g.ids[k], true,
                                           model::InputTransfer{o.id, got[k]->bytes > 0 ? g.from->site : options_.site,
                                                                options_.site, o.size, got[k]->seconds},
                                           nullptr);
      if (in.ok()) out[g.members[k]] = std::move(*in);
    }
  });
  return out;
}

StatusOr<FetchedInput> Agent::FetchInput(const model::ObjectLocation& object, const std::atomic<bool>& stop,
                                         std::vector<std::string>* damaged_nodes) {
  if (!objects_) return UnavailableError("the object store is not open");
  MERIDIAN_ASSIGN_OR_RETURN(objects::ObjectId id, objects::ObjectId::Parse(object.id));
  model::InputTransfer t{object.id, options_.site, options_.site, object.size, 0};
  bool fetched = false;
  if (!objects_->Contains(id)) {
    if (object.replicas.empty()) return NotFoundError(fmt::format("object {} has no live replica: it was lost", object.id));
    // A replica that cannot be read gives way to the next.
    Status last;
    for (const model::ObjectReplica* from : ReplicasInOrder(object)) {
      objects::FetchOptions fo;
      fo.site = options_.site;
      fo.cancel = &stop;
      fo.tls = transfer_tls_;
      fo.ticket = object.ticket;
      fo.expected_size = object.size;
      StatusOr<objects::FetchStats> f = objects::Fetch(from->transfer_address, id, *objects_, fo);
      if (f.ok()) {
        t.from_site = from->site;
        t.seconds = f->seconds;
        fetched = true;
        break;
      }
      last = f.status().WithPrefix(fmt::format("fetching it from {}@{}", from->node, from->site));
      if (f.status().code() == StatusCode::kCancelled) return last;
      if (f.status().code() == StatusCode::kNotFound || f.status().code() == StatusCode::kDataLoss) {
        damaged_nodes->push_back(from->node);
      }
      MERIDIAN_LOG_WARN("object {}: {}", object.id, last.message());
    }
    if (!fetched) return last;
  }
  return PinInput(id, fetched, std::move(t), damaged_nodes);
}

Agent::~Agent() {
  Stop();
  if (metrics_server_) metrics_server_->Shutdown();  // its handlers read what follows
  transfer_.reset();  // its connections may still store objects, which reports under mu_
  executor_.reset();  // reports land in reports_, which dies with us
  if (stream_thread_.joinable()) stream_thread_.join();
}

void Agent::Stop() {
  std::shared_ptr<rpc::NodeClient> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    stream = stream_client_;
  }
  if (stream) stream->CancelStream();
  cv_.notify_all();
}

bool Agent::Sleep(std::unique_lock<std::mutex>& lock, int64_t us) {
  cv_.wait_for(lock, std::chrono::microseconds(us), [this] { return stopping_; });
  return !stopping_;
}

void Agent::OnUpdate(model::TaskUpdate update) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (update.kind != model::UpdateKind::kRunning) {
      static constexpr std::string_view kOutcome[] = {"running", "succeeded", "failed", "cancelled"};
      ++attempts_ended_[std::string(kOutcome[static_cast<int>(update.kind)])];
      for (const model::InputTransfer& t : update.transfers) {
        auto& [bytes, seconds] = fetched_[t.from_site];
        bytes += t.bytes;
        seconds += t.seconds;
      }
    }
    reports_.Add(std::move(update));
  }
  cv_.notify_all();
}

void Agent::OnBatch(const model::AssignmentBatch& batch) {
  for (const model::TaskAssignment& a : batch.assignments) {
    {
      // Already finished here and waiting for acknowledgement: not again.
      std::lock_guard<std::mutex> lock(mu_);
      if (reports_.Ended(a.key)) continue;
    }
    executor_->Start(a);  // false for one it already runs: a resent assignment
  }
  for (const model::TaskKey& k : batch.cancel) executor_->Cancel(k);
  // Outputs of ended jobs: the reference each task's put took goes.
  for (const std::string& hex : batch.release_objects) {
    StatusOr<objects::ObjectId> id = objects::ObjectId::Parse(hex);
    if (id.ok() && objects_) objects_->Release(*id);
  }
}

void Agent::StreamLoop(uint32_t node_id, uint64_t session, std::shared_ptr<rpc::NodeClient> client) {
  int64_t backoff_us = 50'000;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ || session_ != session) return;
    }
    Status s = client->StreamAssignments(node_id, session, kStreamRenewUs,
                                         [this](model::AssignmentBatch b) { OnBatch(b); });
    if (s.ok()) {
      backoff_us = 50'000;
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_ || session_ != session) return;
    if (s.code() == StatusCode::kFailedPrecondition) {
      need_register_ = true;
      cv_.notify_all();
      return;
    }
    if (s.code() == StatusCode::kCancelled) return;
    MERIDIAN_LOG_DEBUG("assignment stream ended: {}; reconnecting", s.ToString());
    if (!Sleep(lock, backoff_us)) return;
    backoff_us = std::min<int64_t>(backoff_us * 2, 1'000'000);
  }
}

Status Agent::RegisterLocked(std::unique_lock<std::mutex>& lock) {
  model::AgentRegistration reg;
  reg.node = options_.node;
  reg.site = options_.site;
  reg.kernels = kernels::KernelNames();
  reg.transfer_address = transfer_ ? transfer_->address() : "";
  reg.metrics_url = metrics_server_ ? metrics_server_->url() : "";
  reg.previous_session = session_;
  if (objects_) {
    // The full list replaces what the coordinator knew; deltas before it are moot.
    for (const auto& [id, size] : objects_->List()) reg.objects.push_back(model::HeldObject{id.Hex(), size});
    object_changes_.clear();
  }
  // Running first, reports second: an attempt that ends in between is in one of them
  // (the executor reports before it forgets), so none looks lost.
  lock.unlock();
  reg.running = executor_->Running();
  lock.lock();
  reports_.ForRegistration(reg);
  lock.unlock();
  StatusOr<model::RegistrationReply> reply = client_->Register(reg, options_.rpc_timeout_us);
  lock.lock();
  connected_ = reply.ok();
  if (!reply.ok()) return reply.status();
  // The registration carried every finished attempt: they are acknowledged.
  reports_.Registered(reg);
  node_id_ = reply->node_id;
  session_ = reply->session;
  if (Status saved = WriteFileAtomically(SessionFile(), std::to_string(session_) + "\n"); !saved.ok()) {
    MERIDIAN_LOG_WARN("cannot keep the session in {}: {}", SessionFile(), saved.message());
  }
  if (transfer_) {
    std::map<std::string, objects::LinkShape> links;
    for (const model::EmulatedLink& l : reply->links) {
      links[l.to_site] = objects::LinkShape{l.rtt_us, l.bandwidth_bps, l.egress_micro_usd_per_gb, l.jitter_us};
    }
    if (!links.empty()) MERIDIAN_LOG_INFO("transfers emulate {} links from site {}", links.size(), options_.site);
    transfer_->SetLinks(std::move(links));
    transfer_->SetTicketKey(reply->ticket_key);
    links_.clear();
    for (const model::EmulatedLink& l : reply->links) links_[l.to_site] = l;
  }
  heartbeat_interval_us_ = reply->heartbeat_interval_us;  // bounded by rpc::FromProto
  need_register_ = false;
  for (const model::TaskKey& k : reply->cancel) executor_->Cancel(k);
  // A fresh stream for the new session.
  if (stream_client_) stream_client_->CancelStream();
  stream_client_ = std::make_shared<rpc::NodeClient>(options_.coordinator, options_.tls);
  std::thread previous = std::move(stream_thread_);
  stream_thread_ = std::thread([this, id = node_id_, s = session_, c = stream_client_] { StreamLoop(id, s, c); });
  if (previous.joinable()) {
    lock.unlock();
    previous.join();
    lock.lock();
  }
  MERIDIAN_LOG_INFO("registered as node {} (session {}) with {}; {} running, {} reported", node_id_, session_,
                    options_.coordinator, reg.running.size(), reg.unacked.size());
  return OkStatus();
}

bool Agent::Backoff(std::unique_lock<std::mutex>& lock, Retry& retry, const std::string& message) {
  // A fresh channel connects at once, where gRPC's own reconnect backoff can leave a
  // restarted coordinator unseen for seconds.
  client_ = std::make_unique<rpc::NodeClient>(options_.coordinator, options_.tls);
  if (!retry.warned) MERIDIAN_LOG_WARN("{}", message);
  retry.warned = true;
  if (!Sleep(lock, retry.delay_us)) return false;
  retry.delay_us = std::min<int64_t>(retry.delay_us * 2, 1'000'000);
  return true;
}

StatusOr<bool> Agent::Beat(std::unique_lock<std::mutex>& lock) {
  model::AgentHeartbeat hb;
  hb.node_id = node_id_;
  hb.session = session_;
  lock.unlock();
  hb.holding = executor_->Running();  // before the reports, as in RegisterLocked
  lock.lock();
  const Reports::Sent sent = reports_.ForHeartbeat(hb);
  const size_t changes = std::min(object_changes_.size(), kMaxObjectChangesPerMessage);
  NetObjectChanges(object_changes_, changes, hb);
  const std::shared_ptr<rpc::NodeClient> session = stream_client_;
  lock.unlock();
  if (transfer_) {
    for (const auto& [site, c] : transfer_->sent()) {
      hb.traffic.push_back(model::LinkTraffic{site, c.bytes, c.transfers, c.egress_micro_usd, c.requests, c.waited_us});
    }
  }
  hb.running = static_cast<int32_t>(hb.holding.size());
  holding_ = hb.running;  // Run's thread only, as LeaveIfIdle
  hb.cpu_used_milli = executor_->cpu_allocated_milli();
  double load[1] = {0};
  if (getloadavg(load, 1) == 1) hb.load_average = load[0];
  const MonotonicTime sent_at = env_.clock().Now();
  // On the node's session while it is open; else as a call, on the channel Backoff
  // renews (the session's may wait out gRPC's reconnect backoff after a restart).
  std::optional<StatusOr<rpc::NodeClient::HeartbeatAnswer>> reported =
      session ? session->Report(hb, options_.rpc_timeout_us) : std::nullopt;
  StatusOr<rpc::NodeClient::HeartbeatAnswer> answer =
      reported ? std::move(*reported) : client_->Heartbeat(hb, options_.rpc_timeout_us);
  heartbeat_latency_.ObserveUs(env_.clock().Now().us - sent_at.us);
  lock.lock();
  connected_ = answer.ok();
  if (!answer.ok()) return answer.status();
  ++heartbeats_[answer->on_session ? 1 : 0];
  // A larger fleet: the coordinator asks for fewer heartbeats.
  if (answer->interval_us > 0) heartbeat_interval_us_ = answer->interval_us;
  if (!answer->reregister) {
    // Acknowledged: the object changes sent (newer ones came after them)...
    object_changes_.erase(object_changes_.begin(),
                          object_changes_.begin() + static_cast<std::ptrdiff_t>(std::min(changes, object_changes_.size())));
    // ...and the reports, unless a newer report replaced one meanwhile.
    reports_.Acknowledged(sent);
  }
  return answer->reregister;
}

std::pair<bool, std::string> Agent::Ready() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return {false, "not ready: stopping"};
  if (need_register_ || !connected_) {
    return {false, fmt::format("not ready: not registered with a coordinator ({})", options_.coordinator)};
  }
  return {true, fmt::format("ready: node {} (id {}, session {}) at site {}", options_.node.name, node_id_, session_,
                            options_.site)};
}

std::string Agent::SessionFile() const { return (std::filesystem::path(options_.work_dir) / "session").string(); }

Status Agent::Run() {
  MERIDIAN_RETURN_IF_ERROR(StartObjects());
  if (!options_.metrics_listen.empty() && metrics_server_ == nullptr) {
    http::ServerOptions so;
    so.listen = options_.metrics_listen;
    so.tls = options_.tls;
    const bool open = !options_.tls.enabled();
    std::vector<http::Route> routes;
    // A monitoring certificate, or the coordinator's (which reads the metrics for
    // scrapers: coordinator/http_api.h).
    auto refuse = [open](const http::Request& r, std::string_view what) -> std::optional<http::Response> {
      if (open || r.peer_certificate.rfind("monitor:", 0) == 0 || r.peer_certificate == "coordinator") {
        return std::nullopt;
      }
      return http::Refused(r, r.peer_certificate.empty() ? 401 : 403,
                           fmt::format("an agent's {} need a monitoring certificate of the cluster's CA (meridian "
                                       "certs issue monitor --name NAME)",
                                       what),
                           false);
    };
    routes.push_back({"/metrics", [this, refuse](const http::Request& r) {
                        if (std::optional<http::Response> refused = refuse(r, "metrics")) return *refused;
                        http::Exposition e;
                        WriteMetrics(e);
                        return http::MetricsResponse(e.text());
                      }});
    routes.push_back({"/healthz", [refuse](const http::Request& r) {
                        if (std::optional<http::Response> refused = refuse(r, "health and readiness")) return *refused;
                        return http::TextResponse(200, "ok\n");
                      }});
    routes.push_back({"/readyz", [this, refuse](const http::Request& r) {
                        if (std::optional<http::Response> refused = refuse(r, "health and readiness")) return *refused;
                        auto [ready, why] = Ready();
                        return http::TextResponse(ready ? 200 : 503, why + "\n");
                      }});
    MERIDIAN_ASSIGN_OR_RETURN(metrics_server_, http::Server::Start(std::move(so), std::move(routes)));
    MERIDIAN_LOG_INFO("metrics at {}/metrics", metrics_server_->url());
  }
  std::unique_lock<std::mutex> lock(mu_);
  {
    std::ifstream in(SessionFile());
    uint64_t previous = 0;
    if (in >> previous) session_ = previous;
  }
  Retry retry;
  MonotonicTime last_beat{0};
  MonotonicTime last_taken{0};  // the last heartbeat the coordinator took (0: none since it refused one)
  while (!stopping_) {
    if (need_register_) {
      Status s = RegisterLocked(lock);
      // Our config is wrong, or our credentials: retrying cannot help.
      if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kPermissionDenied ||
          s.code() == StatusCode::kUnauthenticated) {
        return s;
      }
      if (!s.ok()) {
        if (!Backoff(lock, retry, s.message() + "; retrying")) break;
        continue;
      }
      retry = Retry{};
    }
    // Wait for a finished task to report or the next heartbeat.
    const int64_t due = last_beat.us + heartbeat_interval_us_;
    cv_.wait_for(lock, std::chrono::microseconds(std::max<int64_t>(0, due - env_.clock().Now().us)), [&] {
      return stopping_ || need_register_ || env_.clock().Now().us >= due || !object_changes_.empty() ||
             reports_.AnyEnded();
    });
    if (stopping_ || need_register_) continue;
    const MonotonicTime beat_at = env_.clock().Now();
    StatusOr<bool> reregister = Beat(lock);
    last_beat = env_.clock().Now();
    // A gap of many intervals since the last heartbeat the coordinator took may get the
    // node declared dead: say where the time went (this process starved or held up
    // before sending, or the coordinator slow to answer). It counts across a registration
    // in between: a node declared dead says so with its first heartbeat after it.
    const int64_t gap_us = last_beat.us - last_taken.us;
    if (last_taken.us > 0 && reregister.ok() && gap_us > std::max<int64_t>(5 * heartbeat_interval_us_, 1'000'000)) {
      MERIDIAN_LOG_WARN("{} between heartbeats (one every {} asked): this one was sent {} late and took {} to send and answer",
                        FormatDurationUs(gap_us), FormatDurationUs(heartbeat_interval_us_),
                        FormatDurationUs(std::max<int64_t>(0, beat_at.us - due)),
                        FormatDurationUs(last_beat.us - beat_at.us));
    }
    last_taken = reregister.ok() && !*reregister ? last_beat : MonotonicTime{0};
    if (!reregister.ok()) {
      // Cut off: tasks keep running here and their reports wait for the coordinator.
      std::string message = fmt::format("{}; keeping {} reports until it answers", reregister.status().message(),
                                        reports_.size());
      if (!Backoff(lock, retry, message)) break;
      continue;
    }
    retry = Retry{};
    if (*reregister) {
      need_register_ = true;
    } else if (LeaveIfIdle(lock)) {
      break;
    }
  }
  return OkStatus();
}

bool Agent::LeaveIfIdle(std::unique_lock<std::mutex>& lock) {
  if (options_.idle_exit_us <= 0) return false;
  const MonotonicTime now = env_.clock().Now();
  if (holding_ > 0 || reports_.size() > 0 || !object_changes_.empty() ||
      busy_at_.us == 0) {
    busy_at_ = now;
    return false;
  }
  if (now.us - busy_at_.us < options_.idle_exit_us) return false;
  const uint32_t node_id = node_id_;
  const uint64_t session = session_;
  lock.unlock();
  // The coordinator refuses while anything is placed here (an assignment on its way):
  // then the agent stays, and is idle again only once that is done.
  Status s = client_->Leave(node_id, session, options_.rpc_timeout_us);
  lock.lock();
  busy_at_ = env_.clock().Now();
  if (!s.ok()) {
    MERIDIAN_LOG_INFO("idle for {}, but stays: {}", FormatDurationUs(options_.idle_exit_us), s.message());
    return false;
  }
  MERIDIAN_LOG_INFO("node {} left the pool after {} idle", options_.node.name, FormatDurationUs(options_.idle_exit_us));
  left_ = true;
  stopping_ = true;
  std::error_code ignored;
  std::filesystem::remove(SessionFile(), ignored);  // the session ended with the leave
  return true;
}

void Agent::WriteMetrics(http::Exposition& out) {
  const std::vector<model::TaskKey> running = executor_ ? executor_->Running() : std::vector<model::TaskKey>{};
  const int64_t cpu_held_milli = executor_ ? executor_->cpu_allocated_milli() : 0;
  const objects::StoreStats store = objects_ ? objects_->stats() : objects::StoreStats{};
  const std::map<std::string, objects::LinkCounters> sent =
      transfer_ ? transfer_->sent() : std::map<std::string, objects::LinkCounters>{};
  const int64_t refused = transfer_ ? transfer_->refused() : 0;
  std::lock_guard<std::mutex> lock(mu_);
  // No node or site labels: a scraper's target carries them (the coordinator's
  // /sd/nodes names both).
  const http::Labels node;
  auto with = [](std::string_view k, std::string v) { return http::Labels{{k, std::move(v)}}; };
  out.Family("meridian_agent_connected", "gauge", "1 when the coordinator answered the agent's last call, else 0.");
  out.Sample("meridian_agent_connected", node, connected_ ? 1 : 0);
  out.Family("meridian_agent_tasks_running", "gauge", "Task attempts running on this node.");
  out.Sample("meridian_agent_tasks_running", node, static_cast<double>(running.size()));
  out.Family("meridian_agent_cpu_allocated_cores", "gauge", "CPU cores the running attempts hold.");
  out.Sample("meridian_agent_cpu_allocated_cores", node, static_cast<double>(cpu_held_milli) / 1000);
  out.Family("meridian_agent_devices", "gauge", "Accelerators of this node, by type and whether they are emulated.");
  std::map<std::pair<std::string, bool>, int> devices;
  for (const model::Device& d : options_.node.devices) ++devices[{d.type, d.emulated}];
  for (const auto& [k, n] : devices) {
    http::Labels l = with("type", k.first);
    l.emplace_back("emulated", k.second ? "true" : "false");
    out.Sample("meridian_agent_devices", l, n);
  }
  out.Family("meridian_agent_task_attempts_total", "counter", "Task attempts ended here, by outcome.");
  for (const auto& [outcome, n] : attempts_ended_) {
    out.Sample("meridian_agent_task_attempts_total", with("outcome", outcome), static_cast<double>(n));
  }
  out.Family("meridian_agent_pending_reports", "gauge", "Task reports not yet acknowledged by the coordinator.");
  out.Sample("meridian_agent_pending_reports", node, static_cast<double>(reports_.size()));
  heartbeat_latency_.Write(out, "meridian_agent_heartbeat_seconds", "Round trip of one heartbeat to the coordinator.");
  out.Family("meridian_agent_heartbeats_total", "counter",
             "Heartbeats the coordinator answered: on the node's session, or as calls of their own (no session open).");
  out.Sample("meridian_agent_heartbeats_total", with("over", "session"), static_cast<double>(heartbeats_[1]));
  out.Sample("meridian_agent_heartbeats_total", with("over", "call"), static_cast<double>(heartbeats_[0]));
  out.Family("meridian_agent_objects", "gauge", "Objects this node's store holds.");
  out.Sample("meridian_agent_objects", node, static_cast<double>(store.objects));
  out.Family("meridian_agent_object_bytes", "gauge", "Bytes of objects this node holds, in memory or only on disk.");
  out.Sample("meridian_agent_object_bytes", with("tier", "memory"), static_cast<double>(store.memory_bytes));
  out.Sample("meridian_agent_object_bytes", with("tier", "disk"), static_cast<double>(store.spilled_bytes));
  out.Family("meridian_agent_sent_bytes_total", "counter", "Object bytes this node's transfer server sent, by destination site.");
  for (const auto& [site, c] : sent) {
    out.Sample("meridian_agent_sent_bytes_total", with("to_site", site), static_cast<double>(c.bytes));
  }
  out.Family("meridian_agent_fetched_bytes_total", "counter", "Input bytes this node's tasks fetched, by source site.");
  for (const auto& [site, f] : fetched_) {
    out.Sample("meridian_agent_fetched_bytes_total", with("from_site", site), static_cast<double>(f.first));
  }
  out.Family("meridian_agent_fetch_seconds_total", "counter",
             "Time this node's tasks spent fetching inputs, by source site (bytes over seconds: throughput).");
  for (const auto& [site, f] : fetched_) {
    out.Sample("meridian_agent_fetch_seconds_total", with("from_site", site), f.second);
  }
  out.Family("meridian_agent_transfer_refused_total", "counter",
             "Transfer connections refused: no certificate of the CA, or a bad or missing ticket.");
  out.Sample("meridian_agent_transfer_refused_total", node, static_cast<double>(refused));
}

}  // namespace meridian::agent
