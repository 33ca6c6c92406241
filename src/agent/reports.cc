#include "agent/reports.h"

#include <algorithm>
#include <string>

namespace meridian::agent {

size_t ReportBytes(const model::TaskUpdate& u) {
  size_t n = 256 + u.reason.size() + u.output.size() + u.stdout_tail.size() + u.stderr_tail.size();
  n += u.transfers.size() * 128;
  for (const model::LostInput& l : u.lost_inputs) n += 64 + l.damaged_nodes.size() * 64;
  return n;
}

void Reports::Add(model::TaskUpdate update) {
  auto it = pending_.find(update.key);
  if (update.kind == model::UpdateKind::kRunning && it != pending_.end()) {
    const model::TaskUpdate& before = it->second.second;
    if (before.kind != model::UpdateKind::kRunning) return;  // it ended already
    auto merge = [&](std::string model::TaskUpdate::*tail, int64_t model::TaskUpdate::*bytes) {
      if (update.*bytes > before.*bytes) {
        update.*tail = before.*tail + update.*tail;
        model::KeepLogTail(update.*tail);
      } else {
        update.*tail = before.*tail;
        update.*bytes = before.*bytes;
      }
    };
    merge(&model::TaskUpdate::stdout_tail, &model::TaskUpdate::stdout_bytes);
    merge(&model::TaskUpdate::stderr_tail, &model::TaskUpdate::stderr_bytes);
  }
  pending_[update.key] = {++seq_, std::move(update)};
}

bool Reports::Ended(const model::TaskKey& key) const {
  auto it = pending_.find(key);
  return it != pending_.end() && it->second.second.kind != model::UpdateKind::kRunning;
}

bool Reports::AnyEnded() const {
  return std::any_of(pending_.begin(), pending_.end(),
                     [](const auto& e) { return e.second.second.kind != model::UpdateKind::kRunning; });
}

void Reports::ForRegistration(model::AgentRegistration& reg) const {
  size_t report_bytes = 0;
  for (const auto& [key, entry] : pending_) {
    if (entry.second.kind == model::UpdateKind::kRunning) continue;
    report_bytes += ReportBytes(entry.second);
    if (reg.unacked.empty() || report_bytes <= kMaxReportBytesPerMessage) {
      reg.unacked.push_back(entry.second);
    } else {
      reg.running.push_back(key);
    }
  }
}

void Reports::Registered(const model::AgentRegistration& reg) {
  for (const model::TaskUpdate& u : reg.unacked) pending_.erase(u.key);
  std::erase_if(pending_, [](const auto& e) { return e.second.second.kind == model::UpdateKind::kRunning; });
}

Reports::Sent Reports::ForHeartbeat(model::AgentHeartbeat& hb) const {
  Sent sent;
  size_t report_bytes = 0;
  // Ended attempts first: live logs never hold back a result.
  for (bool ended : {true, false}) {
    for (const auto& [key, entry] : pending_) {
      if ((entry.second.kind != model::UpdateKind::kRunning) != ended) continue;
      report_bytes += ReportBytes(entry.second);
      if (!hb.updates.empty() && report_bytes > kMaxReportBytesPerMessage) break;  // the next beat takes the rest
      hb.updates.push_back(entry.second);
      sent.emplace_back(key, entry.first);
    }
  }
  return sent;
}

void Reports::Acknowledged(const Sent& sent) {
  for (const auto& [key, seq] : sent) {
    auto it = pending_.find(key);
    if (it != pending_.end() && it->second.first == seq) pending_.erase(it);
  }
}

void NetObjectChanges(const std::deque<ObjectChange>& changes, size_t n, model::AgentHeartbeat& hb) {
  std::map<std::string, const ObjectChange*> last;
  for (size_t i = 0; i < n && i < changes.size(); ++i) last[changes[i].object.id] = &changes[i];
  for (const auto& [id, c] : last) {
    if (c->added) {
      hb.objects_added.push_back(c->object);
    } else {
      hb.objects_removed.push_back(id);
    }
  }
}

}  // namespace meridian::agent
