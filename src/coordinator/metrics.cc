// Coordinator::WriteMetrics: the coordinator's figures for Prometheus. Every name is
// documented in docs/observability.md; keep the two together.
#include <map>

#include <fmt/format.h>

#include "common/units.h"
#include "coordinator/coordinator.h"

namespace meridian::coordinator {

using model::JobStatus;

void Coordinator::WriteMetrics(http::Exposition& out) {
  // Jobs and their tasks from the published heads (as stored), without the state's lock.
  std::map<std::string_view, int64_t> jobs_by_status;
  for (JobStatus s : {JobStatus::kQueued, JobStatus::kRunning, JobStatus::kSucceeded, JobStatus::kFailed,
                      JobStatus::kCancelled}) {
    jobs_by_status[model::JobStatusName(s)] = 0;
  }
  model::JobSummary tasks;
  {
    std::lock_guard<std::mutex> heads(heads_mu_);
    for (const auto& [id, head] : heads_) {
      const model::JobSummary& job = head->summary;
      ++jobs_by_status[model::JobStatusName(job.job.status)];
      tasks.waiting += job.waiting;
      tasks.running += job.running;
      tasks.succeeded += job.succeeded;
      tasks.failed += job.failed;
      tasks.cancelled += job.cancelled;
    }
  }
  std::lock_guard lock(mu_);
  const MonotonicTime now = env_.clock().Now();
  out.Family("meridian_jobs", "gauge", "Jobs the coordinator holds (unfinished and retained finished ones), by status.");
  for (const auto& [status, n] : jobs_by_status) out.Sample("meridian_jobs", {{"status", std::string(status)}}, n);
  out.Counter("meridian_jobs_submitted_total", "Jobs accepted and stored since the coordinator started.",
              static_cast<double>(jobs_submitted_));
  out.Family("meridian_tasks", "gauge", "Tasks of the jobs the coordinator holds, by state.");
  out.Sample("meridian_tasks", {{"state", "waiting"}}, tasks.waiting);
  out.Sample("meridian_tasks", {{"state", "running"}}, tasks.running);
  out.Sample("meridian_tasks", {{"state", "succeeded"}}, tasks.succeeded);
  out.Sample("meridian_tasks", {{"state", "failed"}}, tasks.failed);
  out.Sample("meridian_tasks", {{"state", "cancelled"}}, tasks.cancelled);
  out.Gauge("meridian_queue_depth", "Tasks ready to run and waiting for a placement.",
            static_cast<double>(ready_.size()));
  out.Gauge("meridian_tasks_awaiting_inputs", "Ready tasks held back until an input has a live replica.",
            static_cast<double>(awaiting_inputs_.size()));
  out.Counter("meridian_placements_total", "Tasks placed on a node since the coordinator started.",
              static_cast<double>(placements_));
  placement_latency_.Write(out, "meridian_placement_latency_seconds",
                           "Time from a task joining the queue to its placement.");
  schedule_pass_.Write(out, "meridian_schedule_pass_seconds", "Time of one scheduling call that had tasks to offer.");
  commit_latency_.Write(out, "meridian_store_commit_seconds", "Time of one state-store transaction.");
  out.Gauge("meridian_store_commit_queue", "Changes made and waiting for the state store's next transaction.",
            static_cast<double>(CommitsQueued()));
  out.Counter("meridian_store_commits_total", "State-store transactions since the coordinator started.",
              static_cast<double>(commit_transactions_.load(std::memory_order_relaxed)));
  out.Counter("meridian_store_commit_batches_total",
              "Changes stored since the coordinator started; several made while one transaction was written are "
              "stored together in the next.",
              static_cast<double>(commit_entries_.load(std::memory_order_relaxed)));
  out.Family("meridian_task_attempts_total", "counter", "Task attempts ended since the coordinator started, by outcome.");
  for (const auto& [outcome, n] : attempts_ended_) {
    out.Sample("meridian_task_attempts_total", {{"outcome", outcome}}, static_cast<double>(n));
  }

  // Nodes and their devices: what live nodes have, and what tasks hold of it.
  int64_t alive = 0;
  int64_t left = 0;
  int64_t heartbeat_age_max_us = 0;
  int64_t cpu_milli = 0;
  int64_t cpu_held_milli = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> devices;  // type -> (devices, held milli)
  // (from site, to site) -> what agents' transfer servers sent.
  std::map<std::pair<std::string, std::string>, model::LinkTraffic> links;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const NodeRt& rt = nodes_[i];
    for (const auto& [to, t] : rt.traffic) {
      model::LinkTraffic& l = links[{rt.site, to}];
      l.bytes += t.bytes;
      l.transfers += t.transfers;
      l.egress_micro_usd += t.egress_micro_usd;
    }
    if (!rt.alive) {
      left += rt.left ? 1 : 0;
      continue;
    }
    ++alive;
    heartbeat_age_max_us = std::max(heartbeat_age_max_us, now.us - rt.last_heartbeat.us);
    const model::Node& n = fleet_.nodes[i];
    const sched::NodeFree& f = ledger_.free(NodeId(static_cast<uint32_t>(i)));
    cpu_milli += n.cpu_milli;
    cpu_held_milli += n.cpu_milli - f.cpu_milli;
    for (size_t d = 0; d < n.devices.size(); ++d) {
      auto& [count, held] = devices[n.devices[d].type];
      ++count;
      if (d < f.device_free_milli.size()) held += 1000 - f.device_free_milli[d];
    }
  }
  out.Family("meridian_nodes", "gauge", "Nodes registered, by whether they are alive, dead, or left the pool when idle.");
  out.Sample("meridian_nodes", {{"state", "alive"}}, static_cast<double>(alive));
  out.Sample("meridian_nodes", {{"state", "dead"}}, static_cast<double>(nodes_.size() - alive - left));
  out.Sample("meridian_nodes", {{"state", "left"}}, static_cast<double>(left));
  out.Gauge("meridian_heartbeat_age_max_seconds", "The longest any live node has been silent.",
            static_cast<double>(heartbeat_age_max_us) / 1e6);
  out.Gauge("meridian_heartbeat_interval_seconds", "How often agents are told to heartbeat now.",
            static_cast<double>(HeartbeatIntervalUs()) / 1e6);
  out.Gauge("meridian_cpu_cores", "CPU cores of live nodes.", static_cast<double>(cpu_milli) / 1000);
  out.Gauge("meridian_cpu_allocated_cores", "CPU cores of live nodes that tasks hold.",
            static_cast<double>(cpu_held_milli) / 1000);
  out.Family("meridian_devices", "gauge", "Accelerators of live nodes, by type (CPU-only nodes have none).");
  for (const auto& [type, d] : devices) out.Sample("meridian_devices", {{"type", type}}, static_cast<double>(d.first));
  out.Family("meridian_devices_busy", "gauge",
             "Accelerators of live nodes that tasks hold, by type (a shared device counts its share).");
  for (const auto& [type, d] : devices) {
    out.Sample("meridian_devices_busy", {{"type", type}}, static_cast<double>(d.second) / 1000);
  }

  // The WAN: what the agents' transfer servers sent between sites (as their heartbeats
  // last reported; an agent's restart starts its own counts again).
  out.Family("meridian_link_sent_bytes_total", "counter", "Object bytes sent from one site to another (or within one).");
  for (const auto& [k, l] : links) {
    out.Sample("meridian_link_sent_bytes_total", {{"from_site", k.first}, {"to_site", k.second}},
               static_cast<double>(l.bytes));
  }
  out.Family("meridian_link_transfers_total", "counter", "Objects (or ranges of one) sent from one site to another.");
  for (const auto& [k, l] : links) {
    out.Sample("meridian_link_transfers_total", {{"from_site", k.first}, {"to_site", k.second}},
               static_cast<double>(l.transfers));
  }
  out.Family("meridian_link_egress_cost_dollars_total", "counter",
             "What the bytes sent from one site to another cost in egress, in US dollars.");
  for (const auto& [k, l] : links) {
    out.Sample("meridian_link_egress_cost_dollars_total", {{"from_site", k.first}, {"to_site", k.second}},
               static_cast<double>(l.egress_micro_usd) / 1e6);
  }

  int64_t object_bytes = 0;
  for (const auto& [id, o] : objects_) object_bytes += o.size;
  out.Gauge("meridian_objects", "Objects in the directory (with at least one replica known).",
            static_cast<double>(objects_.size()));
  out.Gauge("meridian_object_bytes", "Bytes of the objects in the directory, one replica each.",
            static_cast<double>(object_bytes));
  out.Family("meridian_tenant_spent_today_dollars", "gauge",
             "What each tenant's ended attempts cost today (UTC), in US dollars.");
  for (const auto& [tenant, micro] : spent_today_) {
    if (spend_day_ != WallUs() / kDayUs) break;  // yesterday's: nobody spent anything today yet
    out.Sample("meridian_tenant_spent_today_dollars", {{"tenant", tenant}}, static_cast<double>(micro) / 1e6);
  }
}

StatusOr<std::pair<std::string, std::string>> Coordinator::NodeMetricsUrl(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = node_by_name_.find(name);
  if (it == node_by_name_.end()) return NotFoundError(fmt::format("no node '{}'", name));
  const NodeRt& rt = nodes_[it->second];
  if (!rt.alive) return FailedPreconditionError(fmt::format("node '{}' is dead", name));
  if (rt.metrics_url.empty()) return FailedPreconditionError(fmt::format("node '{}' serves no metrics", name));
  return std::make_pair(rt.metrics_url, rt.site);
}

rpc::HttpEndpoints Coordinator::Endpoints() {
  std::lock_guard<std::mutex> lock(endpoints_mu_);
  return endpoints_;
}

void Coordinator::SetEndpoints(rpc::HttpEndpoints endpoints) {
  std::lock_guard<std::mutex> lock(endpoints_mu_);
  endpoints_ = std::move(endpoints);
}

model::Fleet Coordinator::SitesAndLinks() {
  std::lock_guard lock(mu_);
  model::Fleet out;
  out.sites = fleet_.sites;
  out.links = fleet_.links;
  return out;
}

std::vector<std::pair<std::string, std::string>> Coordinator::NodesWithMetrics() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].alive && !nodes_[i].metrics_url.empty()) out.emplace_back(fleet_.nodes[i].name, nodes_[i].site);
  }
  return out;
}

}  // namespace meridian::coordinator
