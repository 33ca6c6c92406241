// meridian replica, meridian gateway and meridian bench serve (docs/serving.md).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/net.h"
#include "common/subprocess.h"
#include "common/temp_dir.h"
#include "kernels/ops.h"
#include "model/work.h"
#include "spec/fleet_spec.h"
#include "spec/service_spec.h"
#include "spec/yaml_reader.h"
#include "workloads/serving/autoscaler.h"
#include "workloads/serving/gateway.h"
#include "workloads/serving/replica.h"
#include "workloads/training/digits.h"

namespace meridian::cli {
namespace {

namespace fs = std::filesystem;
namespace sv = serving;

// A service's replicas that serve now, as a gateway addresses them.
struct ServiceEndpoints {
  spec::ServiceSpec spec;
  spec::ReplicaSecrets secrets;
  std::vector<sv::ReplicaEndpoint> endpoints;
  std::vector<ServiceReplica> live;  // its live replica jobs, serving or not
  // Its tenant: its first live replica job's (a service's jobs are all its tenant's).
  std::string Tenant() const { return live.empty() ? std::string() : live.front().tenant; }
};

// Reads the service's replica jobs: those running on a live node are its endpoints.
// Without `known` (the spec read before) the spec and the replicas' secrets are read
// too, from its first replica job.
StatusOr<ServiceEndpoints> ServiceReplicaSet(client::Client& c, const std::string& service,
                                             const spec::ServiceSpec* known) {
  ServiceEndpoints out;
  std::vector<ServiceReplica> live;
  if (known == nullptr) {
    auto found = FindService(c, service, true);
    if (!found.ok()) return Status(found.status().code(), fmt::format("--service: {}", found.status().message()));
    live = std::move(found->replicas);
    out.spec = std::move(found->service.spec);
    out.secrets = std::move(found->service.secrets);
  } else {
    MERIDIAN_ASSIGN_OR_RETURN(live, ListServiceReplicas(c, service, true));
    out.spec = *known;
  }
  for (const ServiceReplica& r : live) {
    if (r.Serving()) out.endpoints.push_back(sv::ReplicaEndpoint{r.host, out.spec.port + r.ordinal, r.region});
  }
  out.live = std::move(live);
  return out;
}

// How a gateway authenticates the service's replicas (plain HTTP for replica jobs of
// before TLS).
sv::ReplicaTls ReplicaTlsOf(const std::string& service, const spec::ReplicaSecrets& secrets) {
  if (!secrets.tls()) return {};
  return sv::ReplicaTls{secrets.tls_ca_pem, sv::ServiceTlsName(service)};
}

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A replica being drained: out of the gateway's set, stopped once nothing is in
// flight to it (or after kDrainTimeoutUs).
struct Draining {
  uint64_t job = 0;
  sv::ReplicaEndpoint endpoint;
  int64_t since_us = 0;
  bool cancelled = false;
};
constexpr int64_t kDrainTimeoutUs = 30'000'000;
constexpr int64_t kAutoscaleSampleUs = 100'000;

// Where a gateway stands to a service: the service's region whose replicas it sends
// to first ("": none, the nearest wins), and whether it autoscales that region.
struct Standing {
  std::string region;
  bool autoscale = false;
  // Brings the region's replicas that run in their fallback (the service's
  // fallback_after) home: a site's gateway that scales the region, which knows the
  // fleet's sites that the region's rule matches (`region_sites`).
  bool brings_home = false;
  std::vector<std::string> region_sites = {};
};
using StandingOf = std::function<Standing(const spec::ServiceSpec&)>;

// What a ServiceFollower follows and how.
struct FollowerConfig {
  std::string service;
  int64_t watch_interval_ms = 1000;
  StandingOf standing_of;
  // A site's gateway routes the service by its name (sv::GatewayOptions::by_service),
  // and stops routing it while it has no replica job; else the gateway is the service's alone.
  bool by_service = false;
};

// A gateway following its service (gateway --service): the replicas placed, lost,
// re-placed or scaled, read from the coordinator every watch interval; with
// autoscaling, its region's replicas scaled by the requests in flight to them and
// their answer time, sampled every 100 ms. While the coordinator cannot be reached,
// the gateway keeps the set it has (its probes still find dead replicas) and says so
// once.
class ServiceFollower {
 public:
  // `current`: the replicas the gateway has for it (by service: its route is there).
  ServiceFollower(FollowerConfig config, client::Client& coordinator, sv::Gateway& gateway, spec::ServiceSpec spec,
                  spec::ReplicaSecrets secrets, std::vector<sv::ReplicaEndpoint> current, std::ostream& out)
      : config_(std::move(config)), c_(coordinator), gateway_(gateway), spec_(std::move(spec)),
        secrets_(std::move(secrets)), current_(std::move(current)), out_(out) {
    route_ = config_.by_service ? config_.service : "";
    standing_ = config_.standing_of(spec_);
    if (standing_.autoscale) MakeAutoscaler();
  }

  // How often Tick wants calling: the autoscaler samples every 100 ms.
  int64_t TickUs() const { return autoscaler_ ? kAutoscaleSampleUs : config_.watch_interval_ms * 1000; }

  void Tick(int64_t now) {
    if (autoscaler_) Sample(now);
    if (now < next_read_us_) return;
    next_read_us_ = now + config_.watch_interval_ms * 1000;
    Follow(now);
  }

  // No scaling before `until_us` (a site's gateway finding a service `meridian serve`
  // is still submitting, region after region).
  void HoldScaling(int64_t until_us) { hold_until_us_ = std::max(hold_until_us_, until_us); }

  // Nothing left to follow: the service has no replica job, and none is being drained
  // or waits to be confirmed. A site's gateway forgets it (and finds it again if served).
  bool Idle() const { return gone_ && draining_.empty() && !unconfirmed_; }

  // A gateway of this service alone: until SIGTERM or SIGINT.
  void Run() {
    while (WaitForTerminationSignalFor(TickUs()) == 0) Tick(NowUs());
  }

 private:
  // The region's requests in flight and the mean answer time of its replicas that
  // answered since the last sample. A replica's load is what it reports to the health
  // probe when it does (every gateway's requests: another region's gateway fails
  // over to this region, and this region scales for it), else this gateway's own.
  void Sample(int64_t now) {
    const sv::GatewayView view = gateway_.Snapshot(route_);
    double inflight = 0;
    int64_t answer_sum = 0, answered = 0;
    std::map<std::string, int64_t> served;
    for (const sv::ReplicaView& r : view.replicas) {
      if (r.endpoint.region != standing_.region) continue;
      inflight += std::max<double>(r.inflight, static_cast<double>(r.reported_inflight));
      const std::string key = fmt::format("{}:{}", r.endpoint.host, r.endpoint.port);
      served[key] = r.served;
      auto before = served_.find(key);
      if (before != served_.end() && r.served > before->second) {
        answer_sum += r.service_us;
        ++answered;
      }
    }
    for (const Draining& d : draining_) inflight += gateway_.InflightTo(d.endpoint, route_);
    served_ = std::move(served);
    autoscaler_->Observe(now, inflight, answered == 0 ? 0 : answer_sum / answered);
  }

  void Follow(int64_t now) {
    // After the service had no replica job, it is read whole again: served again, it
    // has a new token for its replicas, and maybe another spec.
    auto service = ServiceReplicaSet(c_, config_.service, gone_ ? nullptr : &spec_);
    if (gone_ && !service.ok() && service.status().code() == StatusCode::kNotFound) return;  // still none
    if (service.ok() && gone_) ServedAgain(now, *service);
    if (service.ok()) gone_ = service->live.empty();
    if (gone_ && config_.by_service && routed_) {
      // Clients now hear that it is not served (404), not that its replicas are down.
      gateway_.RemoveService(route_);
      routed_ = false;
      current_.clear();
      out_ << fmt::format("gateway: service {} has no replica jobs: no longer routed\n", config_.service) << std::flush;
    }
    if (!service.ok()) {
      if (!lost_) {
        out_ << fmt::format("gateway: cannot read service {}: {}; keeping its {} replicas\n", config_.service,
                            service.status().message(), current_.size())
             << std::flush;
      }
      lost_ = true;
      return;
    }
    lost_ = false;
    // A scale-up not confirmed yet (the read after its submission failed): judged on
    // this read; undone, the rest of this read is stale.
    if (unconfirmed_ && UndoScaleUpIfServiceEnded(service->live)) return;
    std::set<uint64_t> live_jobs;
    for (const ServiceReplica& r : service->live) live_jobs.insert(r.job);
    if (autoscaler_) NoteCancelledByOthers(service->live, live_jobs);
    // A drained replica's job gone: forget it.
    std::erase_if(draining_, [&](const Draining& d) { return d.cancelled && live_jobs.count(d.job) == 0; });
    for (Draining& d : draining_) {
      if (d.cancelled) continue;
      const int32_t inflight = gateway_.InflightTo(d.endpoint, route_);
      if (inflight > 0 && now - d.since_us < kDrainTimeoutUs) continue;
      auto cancelled = c_.Cancel(d.job);
      d.cancelled = cancelled.ok() || cancelled.status().code() == StatusCode::kNotFound;
      out_ << fmt::format("gateway: replica {}:{} drained ({} requests in flight): job {} {}\n", d.endpoint.host,
                          d.endpoint.port, inflight, d.job,
                          cancelled.ok() ? "cancelled" : "not cancelled: " + std::string(cancelled.status().message()))
           << std::flush;
    }
    std::vector<sv::ReplicaEndpoint> endpoints;
    for (const sv::ReplicaEndpoint& e : service->endpoints) {
      if (std::none_of(draining_.begin(), draining_.end(), [&](const Draining& d) { return d.endpoint == e; })) {
        endpoints.push_back(e);
      }
    }
    if (endpoints != current_ && (routed_ || !config_.by_service)) {
      out_ << fmt::format("gateway: service {} now has {} replicas serving\n", config_.service, endpoints.size())
           << std::flush;
      current_ = endpoints;
      gateway_.SetReplicas(current_, route_);
    }
    if (autoscaler_) Autoscale(now, service->live);
    if (standing_.brings_home) BringHome(now, service->live);
  }

  // A replica of the region that `fallback_after` placed in another region is brought
  // home once the region has room, without dropping a request: a replica is started
  // in the region with no fallback (it waits there for room), and once it serves
  // there, the one away is drained (as a scale-in drains) and its job cancelled. One
  // at a time; the autoscaler does not count the one coming home until it has taken
  // the other's place.
  void BringHome(int64_t now, const std::vector<ServiceReplica>& live) {
    if (now < hold_until_us_ || stopped_below_job_ != 0 || unconfirmed_ || live.empty()) return;
    auto find = [&](uint64_t job) -> const ServiceReplica* {
      auto it = std::find_if(live.begin(), live.end(), [&](const ServiceReplica& r) { return r.job == job; });
      return it == live.end() ? nullptr : &*it;
    };
    auto at_home = [&](const ServiceReplica& r) {
      return std::count(standing_.region_sites.begin(), standing_.region_sites.end(), r.site) > 0;
    };
    if (homecoming_) {
      const ServiceReplica* home = find(homecoming_->job);
      const ServiceReplica* away = find(homecoming_->away);
      if (home == nullptr || away == nullptr || IsDraining(away->job)) {
        // The one started ended (cancelled, failed), or the one away did (lost, scaled
        // in): nothing to swap; one started stays a replica of the region.
        out_ << fmt::format("gateway: {}: replica job {} {}: not bringing replica job {} home with it\n",
                            standing_.region, homecoming_->job, home == nullptr ? "ended" : "stays",
                            homecoming_->away)
             << std::flush;
        homecoming_.reset();
        return;
      }
      if (!home->Serving() || !at_home(*home)) return;  // waits for room in the region
      // Running on a live node is not yet answering: its process may be starting, or
      // waiting for its port. The one away goes only once this gateway's probe finds
      // the one at home healthy; until then the region's requests stay with the one
      // away, where otherwise they would leave the region.
      if (!AnswersHere(sv::ReplicaEndpoint{home->host, spec_.port + home->ordinal, home->region})) return;
      const sv::ReplicaEndpoint endpoint = StartDraining(*away, now);
      out_ << fmt::format("gateway: {}: replica {} serves at home (site {}), {:.1f} s after this gateway began "
                          "waiting for it; draining replica {} at {} ({}:{}), which ran in its fallback\n",
                          standing_.region, home->ordinal, home->site, (now - homecoming_->since_us) / 1e6,
                          away->ordinal, away->site, endpoint.host, endpoint.port)
           << std::flush;
      homecoming_.reset();
      return;
    }
    for (const ServiceReplica& r : live) {
      if (r.region != standing_.region || !r.Serving() || at_home(r) || IsDraining(r.job)) continue;
      // One started for it before (by this region's gateway before it restarted) says
      // so in its job: it is the one to wait for.
      for (const ServiceReplica& w : live) {
        if (w.job <= r.job || w.region != standing_.region || IsDraining(w.job)) continue;
        auto of = ServiceOf(c_, w);
        if (!of.ok() || of->replaces != r.job) continue;
        out_ << fmt::format("gateway: {}: replica {} runs at {}, in its fallback: replica {} (job {}) was started to "
                            "take its place once it serves in {}\n",
                            standing_.region, r.ordinal, r.site, w.ordinal, w.job, standing_.region)
             << std::flush;
        homecoming_ = Homecoming{w.job, r.job, now};
        return;
      }
      auto added = AddReplicas(c_, spec_, secrets_, standing_.region, 1, live, /*replaces=*/r.job);
      out_ << fmt::format("gateway: {}: replica {} runs at {}, in its fallback: {}\n", standing_.region, r.ordinal,
                          r.site,
                          added.ok() ? fmt::format("started replica job {} in {} to take its place once it has room",
                                                   added->front(), standing_.region)
                                     : "cannot start one at home: " + std::string(added.status().message()))
           << std::flush;
      if (!added.ok()) return;
      homecoming_ = Homecoming{added->front(), r.job, now};
      ConfirmAdded(live, *added);
      return;
    }
  }

  bool IsDraining(uint64_t job) const {
    return std::any_of(draining_.begin(), draining_.end(), [&](const Draining& d) { return d.job == job; });
  }

  // Whether `endpoint` is in this gateway's set and its last health probe answered.
  bool AnswersHere(const sv::ReplicaEndpoint& endpoint) {
    const sv::GatewayView view = gateway_.Snapshot(route_);
    return std::any_of(view.replicas.begin(), view.replicas.end(),
                       [&](const sv::ReplicaView& r) { return r.endpoint == endpoint && r.healthy; });
  }

  // Takes a serving replica out of the gateway's set and drains it (Follow cancels
  // its job once it has nothing in flight); its endpoint.
  sv::ReplicaEndpoint StartDraining(const ServiceReplica& r, int64_t now) {
    const sv::ReplicaEndpoint endpoint{r.host, spec_.port + r.ordinal, r.region};
    draining_.push_back(Draining{r.job, endpoint, now, false});
    current_.erase(std::remove(current_.begin(), current_.end(), endpoint), current_.end());
    gateway_.SetReplicas(current_, route_);
    return endpoint;
  }

  // `service delete` may have ended the service between the read `added` rests on
  // (`live`) and their submission: read again (a failed read leaves it to the next).
  void ConfirmAdded(const std::vector<ServiceReplica>& live, std::vector<uint64_t> added) {
    UnconfirmedScaleUp pending;
    for (const ServiceReplica& r : live) pending.basis.push_back(r.job);
    pending.added = std::move(added);
    unconfirmed_ = std::move(pending);
    auto after = ListServiceReplicas(c_, config_.service, false);
    if (after.ok()) UndoScaleUpIfServiceEnded(*after);
  }

  // `meridian serve` submits a region's replicas after another's: for a few seconds
  // the regions not submitted yet would look below their min.
  static constexpr int64_t kServedAgainGraceUs = 5'000'000;

  void ServedAgain(int64_t now, const ServiceEndpoints& service) {
    spec_ = service.spec;
    standing_ = config_.standing_of(spec_);
    const bool scales = std::any_of(spec_.regions.begin(), spec_.regions.end(), [&](const spec::ServiceRegion& r) {
      return r.region == standing_.region;
    }) && spec_.autoscale.has_value();
    out_ << fmt::format("gateway: service {} is served again ({} replica jobs){}\n", config_.service,
                        service.live.size(),
                        !standing_.autoscale || scales
                            ? ""
                            : fmt::format("; its spec does not autoscale {}: not scaling it", standing_.region))
         << std::flush;
    const sv::ReplicaTls tls = ReplicaTlsOf(spec_.name, service.secrets);
    if (config_.by_service) {
      // Routed anew, with the new token, TLS and region (the replicas come with the read).
      gateway_.RemoveService(route_);
      Status added = gateway_.AddService(
          route_, sv::ServiceRoute{standing_.region, {}, service.secrets.token, tls, spec_.command.empty(),
                                   service.secrets.client_token, service.Tenant()});
      routed_ = added.ok();
      current_.clear();
      if (!added.ok()) {
        out_ << fmt::format("gateway: service {}: {}; not routed\n", config_.service, added.message()) << std::flush;
      }
    } else {
      gateway_.SetResendUnsafe(spec_.command.empty(), route_);  // a command's POST may act
      if (service.secrets.token != secrets_.token) gateway_.SetReplicaToken(service.secrets.token, route_);
      if (service.secrets.client_token != secrets_.client_token) {
        gateway_.SetServiceToken(service.secrets.client_token, route_);
      }
      gateway_.SetServiceTenant(service.Tenant(), route_);
      if (tls != ReplicaTlsOf(spec_.name, secrets_)) {
        Status set = gateway_.SetReplicaTls(tls, route_);
        if (!set.ok()) {
          out_ << fmt::format("gateway: service {}: its replicas' TLS credentials: {}; keeping the old ones\n",
                              config_.service, set.message())
               << std::flush;
        }
      }
    }
    secrets_ = service.secrets;
    autoscaler_.reset();
    if (standing_.autoscale) MakeAutoscaler();
    stopped_below_job_ = 0;
    said_deleted_ = false;
    hold_until_us_ = now + kServedAgainGraceUs;
  }

  // The autoscaler of the gateway's region, from the spec (none when the spec does not
  // autoscale it or lacks the region).
  void MakeAutoscaler() {
    autoscaler_.reset();
    if (!spec_.autoscale) return;
    for (const spec::ServiceRegion& r : spec_.regions) {
      if (r.region != standing_.region) continue;
      sv::AutoscalePolicy policy;
      policy.target_inflight = spec_.autoscale->target_inflight;
      policy.latency_target_us = spec_.autoscale->latency_target_us;
      policy.scale_in_after_us = spec_.autoscale->scale_in_after_us;
      policy.min = r.min;
      policy.max = r.max;
      autoscaler_.emplace(policy);
    }
  }

  // The region's replica jobs that ended since the last read, not cancelled by this
  // gateway: a cancelled one (or one deleted) was ended by an operator (`service
  // delete`, `service scale`, `job cancel`); a failed one is for the autoscaler to
  // replace. Remembers the region's live jobs for the next read.
  void NoteCancelledByOthers(const std::vector<ServiceReplica>& live, const std::set<uint64_t>& live_jobs) {
    cancelled_by_others_.clear();
    for (uint64_t job : here_before_) {
      if (live_jobs.count(job) != 0) continue;
      if (std::any_of(draining_.begin(), draining_.end(), [&](const Draining& d) { return d.job == job; })) continue;
      auto view = c_.GetJob(job, false);
      if (!view.ok() ? view.status().code() == StatusCode::kNotFound
                     : view->summary.job.status == model::JobStatus::kCancelled) {
        cancelled_by_others_.push_back(job);
      }
    }
    here_before_.clear();
    for (const ServiceReplica& r : live) {
      if (r.region == standing_.region) here_before_.push_back(r.job);
      max_job_seen_ = std::max(max_job_seen_, r.job);
    }
  }

  void Autoscale(int64_t now, const std::vector<ServiceReplica>& live) {
    // No replica job left anywhere: the service was deleted, not emptied by load.
    if (live.empty()) {
      if (!said_deleted_) {
        out_ << fmt::format("gateway: service {} has no replica jobs (deleted): not scaling it\n", config_.service)
             << std::flush;
      }
      said_deleted_ = true;
      stopped_below_job_ = max_job_seen_ + 1;
      return;
    }
    // Stopped: scaling resumes only once the region has a replica job newer than any
    // this gateway saw before it stopped (scaled by hand; a service served again after
    // its deletion is ServedAgain's). Another region's new replicas do not count: its
    // own gateway scales it.
    if (stopped_below_job_ != 0) {
      const bool served_again = std::any_of(live.begin(), live.end(), [&](const ServiceReplica& r) {
        return r.region == standing_.region && r.job >= stopped_below_job_;
      });
      if (!served_again) return;
      out_ << fmt::format("gateway: service {} has a new replica job in {}: scaling it again\n", config_.service,
                          standing_.region)
           << std::flush;
      stopped_below_job_ = 0;
      said_deleted_ = false;
    }
    if (now < hold_until_us_) return;
    std::vector<const ServiceReplica*> here;  // the region's, not draining, not coming home
    for (const ServiceReplica& r : live) {
      const bool coming_home = homecoming_ && homecoming_->job == r.job;
      if (r.region == standing_.region && !IsDraining(r.job) && !coming_home) here.push_back(&r);
    }
    const int32_t now_count = static_cast<int32_t>(here.size());
    // An operator's cancel that leaves the region below its min is not for the
    // autoscaler to undo: `service scale` never goes below min, so this is `service
    // delete` under way (it cancels the replicas one by one; the other regions' may
    // still run) or a `job cancel` by hand.
    if (!cancelled_by_others_.empty() && now_count < autoscaler_->policy().min) {
      out_ << fmt::format(
                  "gateway: service {}: replica job {} of {} was cancelled (not by this gateway), leaving {} "
                  "replicas, below its min {} (`service delete` under way, or a cancel by hand): not scaling it "
                  "until it is served again\n",
                  config_.service, cancelled_by_others_.front(), standing_.region, now_count, autoscaler_->policy().min)
           << std::flush;
      stopped_below_job_ = max_job_seen_ + 1;
      return;
    }
    const int32_t want = autoscaler_->Want(now, now_count);
    if (want == now_count) return;
    const std::string why = fmt::format("{:.1f} requests in flight on average, target {} a replica; answers in {} us",
                                        autoscaler_->MeanInflight(), spec_.autoscale->target_inflight,
                                        autoscaler_->MeanAnswerUs());
    if (want > now_count) {
      auto added = AddReplicas(c_, spec_, secrets_, standing_.region, want - now_count, live);
      out_ << fmt::format("gateway: autoscale {}: {} -> {} replicas ({}){}\n", standing_.region, now_count, want, why,
                          added.ok() ? "" : ": " + std::string(added.status().message()))
           << std::flush;
      if (!added.ok() || added->empty()) return;
      ConfirmAdded(live, *added);
      return;
    }
    // Down: a replica that does not serve yet goes at once; else the serving one with
    // the highest number drains first.
    std::vector<sv::ScaleInCandidate> candidates;
    for (const ServiceReplica* r : here) candidates.push_back({r->ordinal, r->Serving()});
    const int chosen = sv::ChooseScaleIn(candidates);
    if (chosen < 0) return;
    const ServiceReplica* victim = here[static_cast<size_t>(chosen)];
    if (!victim->Serving()) {
      auto cancelled = c_.Cancel(victim->job);
      // Kept among the drained (cancelled), so that its end is known as this gateway's.
      draining_.push_back(Draining{victim->job, {}, now, true});
      out_ << fmt::format("gateway: autoscale {}: {} -> {} replicas ({}); replica {} (job {}) does not serve yet: {}\n",
                          standing_.region, now_count, want, why, victim->ordinal, victim->job,
                          cancelled.ok() ? "cancelled" : "not cancelled: " + std::string(cancelled.status().message()))
           << std::flush;
      return;
    }
    const sv::ReplicaEndpoint endpoint = StartDraining(*victim, now);
    out_ << fmt::format("gateway: autoscale {}: {} -> {} replicas ({}); draining {}:{}\n", standing_.region, now_count, want,
                        why, endpoint.host, endpoint.port)
         << std::flush;
  }

  // Whether the service ended under the scale-up not confirmed yet (none of the jobs it
  // was decided on lives in `live`, a read made after its submission). If so, cancels
  // the replica jobs it added and stops scaling until the service is served again.
  // Confirmed (or all of them cancelled), it is forgotten.
  bool UndoScaleUpIfServiceEnded(const std::vector<ServiceReplica>& live) {
    std::vector<uint64_t> after;
    for (const ServiceReplica& r : live) after.push_back(r.job);
    if (!sv::ScaleUpOutlivedItsService(unconfirmed_->basis, after)) {
      unconfirmed_.reset();
      return false;
    }
    const size_t added = unconfirmed_->added.size();
    std::string failure;
    std::erase_if(unconfirmed_->added, [&](uint64_t job) {
      max_job_seen_ = std::max(max_job_seen_, job);
      auto cancelled = CancelReplicaJob(c_, job);
      if (!cancelled.ok()) failure = cancelled.status().message();
      return cancelled.ok();
    });
    out_ << fmt::format("gateway: service {} was deleted while this gateway added {} replica job{} to {}: {}; not "
                        "scaling it until it is served again\n",
                        config_.service, added, added == 1 ? "" : "s", standing_.region,
                        failure.empty() ? "cancelled" : fmt::format("{} left to cancel ({})", unconfirmed_->added.size(),
                                                                    failure))
         << std::flush;
    said_deleted_ = true;
    stopped_below_job_ = max_job_seen_ + 1;
    if (unconfirmed_->added.empty()) unconfirmed_.reset();
    return true;
  }

  // Replica jobs added on a read of the service's live jobs (`basis`), kept until a
  // later read shows the service still has one of them.
  struct UnconfirmedScaleUp {
    std::vector<uint64_t> basis, added;
  };
  // A replica started at home to take the place of one in its fallback (BringHome).
  struct Homecoming {
    uint64_t job = 0;   // the one started at home
    uint64_t away = 0;  // the one it replaces
    int64_t since_us = 0;
  };

  const FollowerConfig config_;
  client::Client& c_;
  sv::Gateway& gateway_;
  std::string route_;  // the service's route at the gateway ("": the gateway is the service's)
  bool routed_ = true;  // by service: whether the gateway routes it now
  Standing standing_;
  int64_t next_read_us_ = 0;
  spec::ServiceSpec spec_;
  spec::ReplicaSecrets secrets_;
  std::vector<sv::ReplicaEndpoint> current_;
  std::ostream& out_;
  bool lost_ = false;
  bool gone_ = false;  // the last read found no replica job of the service
  bool said_deleted_ = false;
  // Scaling stopped (the service deleted or being deleted) until a replica job with at
  // least this id appears; 0: scaling.
  uint64_t stopped_below_job_ = 0;
  uint64_t max_job_seen_ = 0;
  int64_t hold_until_us_ = 0;  // no scaling before (the service just served again)
  std::vector<uint64_t> here_before_;          // the region's live replica jobs at the last read
  std::vector<uint64_t> cancelled_by_others_;  // of those, the ones an operator ended since
  std::optional<sv::Autoscaler> autoscaler_;
  std::optional<UnconfirmedScaleUp> unconfirmed_;
  std::optional<Homecoming> homecoming_;
  std::map<std::string, int64_t> served_;  // per replica, at the last sample
  std::vector<Draining> draining_;
};

constexpr int64_t kTokenCheckTimeoutUs = 2'000'000;

// A site's gateway (gateway --site): every service that runs is routed at
// /v1/services/NAME/, each followed as a service's own gateway follows it. For each
// service the site stands in the first of its regions whose rule matches the site; with
// --autoscale it scales a region when it is the fleet's first site that the region's
// rule matches, so that one site's gateway scales each region.
class SiteGateway {
 public:
  SiteGateway(const GatewayCommandOptions& o, model::Site site, std::vector<model::Site> sites,
              client::Client& coordinator, sv::Gateway& gateway, std::ostream& out)
      : o_(o), site_(std::move(site)), sites_(std::move(sites)), c_(coordinator), gateway_(gateway), out_(out) {}

  void Run() {
    int64_t next_discovery_us = 0;
    const int64_t tick_us = o_.autoscale ? kAutoscaleSampleUs : o_.watch_interval_ms * 1000;
    do {
      const int64_t now = NowUs();
      if (now >= next_discovery_us) {
        next_discovery_us = now + o_.watch_interval_ms * 1000;
        Discover(now);
      }
      for (auto& [name, follower] : followers_) follower->Tick(now);
    } while (WaitForTerminationSignalFor(tick_us) == 0);
  }

  Standing StandingOf(const spec::ServiceSpec& spec) const {
    for (const spec::ServiceRegion& r : spec.regions) {
      if (!model::SiteMatchesRegionRule(site_, r.region)) continue;
      Standing standing{r.region};
      for (const model::Site& s : sites_) {
        if (model::SiteMatchesRegionRule(s, r.region)) standing.region_sites.push_back(s.name);
      }
      const bool scales = o_.autoscale && standing.region_sites.front() == site_.name;
      standing.autoscale = scales && spec.autoscale.has_value();
      standing.brings_home = scales && spec.fallback_after_us > 0;
      return standing;
    }
    return Standing{};
  }

 private:
  // The services that run now: those not followed yet are routed from now on; those
  // followed and idle (no replica job left) are forgotten.
  void Discover(int64_t now) {
    std::erase_if(followers_, [](const auto& f) { return f.second->Idle(); });
    auto live = ListServiceReplicas(c_, "", false);
    if (!live.ok()) {
      if (!lost_) out_ << fmt::format("gateway: cannot list the services: {}\n", live.status().message()) << std::flush;
      lost_ = true;
      return;
    }
    lost_ = false;
    std::set<std::string> names;
    for (const ServiceReplica& r : *live) names.insert(r.service);
    for (const std::string& name : names) {
      if (followers_.count(name) != 0 || refused_.count(name) != 0) continue;
      if (followers_.size() >= sv::kMaxServiceRoutes) {
        if (!said_full_) {
          out_ << fmt::format("gateway: routing {} services, its most: service {} and later ones are not routed\n",
                              followers_.size(), name)
               << std::flush;
        }
        said_full_ = true;
        break;
      }
      auto service = ServiceReplicaSet(c_, name, nullptr);
      if (!service.ok()) continue;  // ended since the list, or unreadable: the next discovery tries again
      const Standing standing = StandingOf(service->spec);
      Status added = gateway_.AddService(
          name, sv::ServiceRoute{standing.region, service->endpoints, service->secrets.token,
                                 ReplicaTlsOf(name, service->secrets), service->spec.command.empty(),
                                 service->secrets.client_token, service->Tenant()});
      if (!added.ok() && added.code() != StatusCode::kAlreadyExists) {
        out_ << fmt::format("gateway: service {}: {}; not routed\n", name, added.message()) << std::flush;
        refused_.insert(name);
        continue;
      }
      out_ << fmt::format("gateway: routing service {} at /v1/services/{}/ ({} replicas serving{}{})\n", name, name,
                          service->endpoints.size(),
                          standing.region.empty() ? "" : fmt::format("; region {} first", standing.region),
                          standing.autoscale ? ", autoscaling it" : "")
           << std::flush;
      FollowerConfig config{name, o_.watch_interval_ms, [this](const spec::ServiceSpec& s) { return StandingOf(s); },
                            true};
      auto follower = std::make_unique<ServiceFollower>(std::move(config), c_, gateway_, service->spec,
                                                        service->secrets, service->endpoints, out_);
      follower->HoldScaling(now + kNewServiceGraceUs);
      followers_.emplace(name, std::move(follower));
    }
  }

  // `meridian serve` submits a region's replicas after another's: a service just found
  // may not have all its regions yet.
  static constexpr int64_t kNewServiceGraceUs = 5'000'000;

  const GatewayCommandOptions& o_;
  const model::Site site_;
  const std::vector<model::Site> sites_;  // the fleet's, in its order
  client::Client& c_;
  sv::Gateway& gateway_;
  std::ostream& out_;
  std::map<std::string, std::unique_ptr<ServiceFollower>> followers_;
  std::set<std::string> refused_;  // names the gateway cannot route
  bool lost_ = false;
  bool said_full_ = false;
};

// The largest checkpoint a model of kMaxMlpWidth hidden units makes, with room.
constexpr int64_t kMaxModelFileBytes = int64_t{64} << 20;

StatusOr<std::string> RequiredToken(const std::string& file, std::string_view flag, std::string_view whose) {
  if (file.empty()) {
    return InvalidArgumentError(fmt::format("{}: a file holding {} (every listener authenticates its callers)", flag, whose));
  }
  MERIDIAN_ASSIGN_OR_RETURN(std::string token, ReadPasswordFile(file));
  if (token.size() < 16) {
    return InvalidArgumentError(fmt::format("{} '{}': the token is {} characters; at least 16", flag, file, token.size()));
  }
  return token;
}

StatusOr<sv::MlpModel> LoadModel(const std::string& path) {
  if (path.empty()) {
    return InvalidArgumentError(
        "--model: a checkpoint file of the trainer's (meridian gang train), or --command-env VARIABLE");
  }
  auto bytes = spec::ReadFileToString(path, kMaxModelFileBytes);
  if (!bytes.ok()) return Status(bytes.status().code(), fmt::format("--model: {}", bytes.status().message()));
  auto model = sv::MlpModel::FromCheckpoint(*bytes);
  if (!model.ok()) return InvalidArgumentError(fmt::format("--model '{}': {}", path, model.status().message()));
  return model;
}

// Where --device puts a model's batches (ChooseDevice); `who` says it on the CPU when
// `auto` finds no GPU.
StatusOr<const kernels::Ops*> ModelDevice(const std::string& device, std::string_view who) {
  StatusOr<const kernels::Ops*> chosen = ChooseDevice(device, who);
  if (!chosen.ok() && device == "gpu") {
    return Status(chosen.status().code(), fmt::format("--device gpu: {}", chosen.status().message()));
  }
  return chosen;
}

// Puts the model's batches on `ops`. A GPU that cannot hold the model is an error on
// --device gpu; on auto it leaves the model on the CPU, saying why.
Status PlaceModel(sv::MlpModel& model, const kernels::Ops& ops, const std::string& device, std::string_view who) {
  const Status placed = model.PlaceOn(ops);
  if (placed.ok()) return OkStatus();
  if (device == "gpu") return Status(placed.code(), fmt::format("--device gpu: {}", placed.message()));
  std::cerr << who << ": the model does not go on " << ops.name() << " (" << placed.message() << "); on the CPU\n";
  return model.PlaceOn(kernels::CpuOps());
}

// A replica's TLS certificate and key as PEM text, from --tls-cert-env/--tls-key-env
// (the files of --tls-cert/--tls-key are read by the server itself).
struct ReplicaPems {
  std::string cert_pem, key_pem;
  bool with = false;  // TLS, from either
};
StatusOr<ReplicaPems> ReplicaTlsPems(const ReplicaCommandOptions& o) {
  ReplicaPems out;
  out.with = !o.tls_cert.empty() || !o.tls_cert_env.empty();
  if (o.tls_cert_env.empty() && o.tls_key_env.empty()) return out;
  if (o.tls_cert_env.empty() || o.tls_key_env.empty() || !o.tls_cert.empty() || !o.tls_key.empty()) {
    return InvalidArgumentError("--tls-cert-env and --tls-key-env come together, without --tls-cert or --tls-key");
  }
  for (const auto& [flag, name, pem] : {std::tuple{"--tls-cert-env", &o.tls_cert_env, &out.cert_pem},
                                        std::tuple{"--tls-key-env", &o.tls_key_env, &out.key_pem}}) {
    const char* value = std::getenv(name->c_str());
    *pem = value == nullptr ? "" : value;
    if (!pem->starts_with("-----BEGIN ")) {
      return InvalidArgumentError(fmt::format("{} {}: the variable {}", flag, *name,
                                              pem->empty() ? "is empty or unset" : "does not hold PEM text"));
    }
  }
  return out;
}

// A replica stopped (its job cancelled: SIGTERM, and spec::kReplicaStopGraceUs before
// SIGKILL) drains: its health probe answers 503 already (the caller started draining),
// so the gateways send it nothing new within a probe interval and drop it when they
// read that its job ended; what still comes is served. It returns once nothing has
// been in flight for kDrainQuietUs, after spec::kReplicaDrainUs at most, or at a second
// termination signal.
constexpr int64_t kDrainQuietUs = 2'000'000;

void Drain(const std::function<int64_t()>& inflight, std::ostream& out) {
  const int64_t start = NowUs();
  out << fmt::format("replica: draining ({} requests in flight); ending once none has been for {} s\n", inflight(),
                     kDrainQuietUs / 1'000'000)
      << std::flush;
  int64_t quiet_since = -1;
  while (NowUs() - start < spec::kReplicaDrainUs) {
    if (WaitForTerminationSignalFor(50'000) != 0) {
      out << "replica: a second termination signal: ending now\n" << std::flush;
      return;
    }
    const int64_t now = NowUs();
    if (inflight() > 0) {
      quiet_since = -1;
    } else if (quiet_since < 0) {
      quiet_since = now;
    } else if (now - quiet_since >= kDrainQuietUs) {
      out << fmt::format("replica: drained in {:.1f} s\n", static_cast<double>(now - start) / 1e6) << std::flush;
      return;
    }
  }
  out << fmt::format("replica: still {} requests in flight after {} s of draining: ending\n", inflight(),
                     spec::kReplicaDrainUs / 1'000'000)
      << std::flush;
}

// This host's range of ports for outgoing connections (net.ipv4.ip_local_port_range),
// when it can be read.
std::optional<std::pair<int, int>> OutgoingPortRange() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (!(in >> low >> high) || low <= 0 || high < low) return std::nullopt;
  return std::make_pair(low, high);
}

// Starts a replica's listener on `port`; while it is in use, tries again every 200 ms,
// for the replica job's stop grace and 5 s more: the replica this one replaces (the
// same number, on the same node: a service scaled in and up again, or deleted and
// served again) may be draining on it. Failing at once would spend the job's attempts.
// A port in the range of outgoing connections may be held by one of them instead,
// for up to a minute after it closes (TIME_WAIT, which SO_REUSEADDR does not pass):
// the wait says so.
template <typename Start>
auto StartWhenThePortIsFree(const Start& start, int port, std::ostream& out) -> decltype(start()) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spec::kReplicaStopGraceUs) +
                        std::chrono::seconds(5);
  bool said = false;
  while (true) {
    auto started = start();
    const bool in_use = !started.ok() && started.status().message().find(std::strerror(EADDRINUSE)) != std::string::npos;
    if (!in_use || std::chrono::steady_clock::now() >= deadline) return started;
    if (!said) {
      const auto outgoing = OutgoingPortRange();
      out << fmt::format("replica: {}; waiting for it (the replica this one replaces may be draining){}\n",
                         started.status().message(),
                         outgoing && port >= outgoing->first && port <= outgoing->second
                             ? fmt::format("; port {} is in this host's range for outgoing connections ({}-{}), "
                                           "where a closed connection holds its port for up to 60 s: give the "
                                           "service a port outside it",
                                           port, outgoing->first, outgoing->second)
                             : "")
          << std::flush;
      said = true;
    }
    if (WaitForTerminationSignalFor(200'000) != 0) return started;
  }
}

// A free TCP port on 127.0.0.1, for a child to listen on. Another process may take it
// before the child does; the child then fails to start, and so does the replica.
StatusOr<int> FreeLoopbackPort() {
  MERIDIAN_ASSIGN_OR_RETURN(auto listener, TcpListener::Listen("127.0.0.1", 0));
  return listener->port();  // closed as it goes out of scope
}

// `meridian replica --command-env VAR`: the command runs by /bin/sh with PORT set to
// a free loopback port, and this process fronts it on --listen: callers need the
// replicas' token (the command never sees it: it is taken out of its environment),
// requests go to the command, and /healthz answers 200 only while the command's
// health path does. The replica ends when the command does, with its status, so the
// job's retries start it again; a termination signal stops the command's whole group.
Status RunCommandFront(const ReplicaCommandOptions& o, const std::pair<std::string, int>& address,
                       const std::string& token, const ReplicaPems& tls, std::ostream& out) {
  const char* value = std::getenv(o.command_env.c_str());
  const std::string command = value == nullptr ? "" : value;
  if (command.empty() || command.size() > spec::kMaxServiceCommandBytes) {
    return InvalidArgumentError(fmt::format("--command-env {}: the variable holds {} bytes; expected 1 to {}",
                                            o.command_env, command.size(), spec::kMaxServiceCommandBytes));
  }
  MERIDIAN_ASSIGN_OR_RETURN(const int inner, FreeLoopbackPort());
  sv::GatewayOptions front;
  front.host = address.first;
  front.port = address.second;
  front.token = token;
  front.tls_cert_file = o.tls_cert;
  front.tls_key_file = o.tls_key;
  front.tls_cert_pem = tls.cert_pem;
  front.tls_key_pem = tls.key_pem;
  front.replicas = {sv::ReplicaEndpoint{"127.0.0.1", inner, ""}};
  front.health_path = o.health_path;
  front.front = true;
  front.max_attempts = 1;  // one command: a failed request is not sent to it twice
  front.resend_unsafe = false;
  front.probe_interval_ms = 250;
  MERIDIAN_ASSIGN_OR_RETURN(auto gateway,
                            StartWhenThePortIsFree([&] { return sv::Gateway::Start(front); }, front.port, out));

  ProcessOptions p;
  p.argv = {"/bin/sh", "-c", command};
  for (std::string& kv : CurrentEnvironment()) {
    const std::string name = kv.substr(0, kv.find('='));
    // The replicas' secrets are the front's, not the command's.
    if (name == o.token_env || name == o.command_env || name == "PORT" || name == o.tls_cert_env ||
        name == o.tls_key_env || name.starts_with("REPLICA_TLS_") || name == spec::kServiceClientTokenEnv) {
      continue;
    }
    p.env.push_back(std::move(kv));
  }
  p.env.push_back(fmt::format("PORT={}", inner));
  p.max_tail = 4096;
  p.output_interval_us = 100'000;
  p.stop_grace_us = 3'000'000;
  // The command's output goes on to the replica's (the job's log), as it comes.
  int64_t out_bytes = 0, err_bytes = 0;
  p.on_output = [&](const OutputSoFar& so_far) {
    out << so_far.stdout_new << std::flush;
    std::cerr << so_far.stderr_new << std::flush;
    out_bytes = so_far.stdout_bytes;
    err_bytes = so_far.stderr_bytes;
  };
  std::atomic<bool> stop{false};
  std::atomic<bool> ended{false};
  StatusOr<ProcessResult> result = InternalError("not run");
  std::thread child([&] {
    result = RunProcess(p, stop);
    ended = true;
  });
  out << fmt::format("replica: listening on {}:{}{}, in front of its command on 127.0.0.1:{} (health {})\n",
                     address.first, gateway->port(), tls.with ? " with TLS" : "", inner, o.health_path)
      << std::flush;
  int signal = 0;
  while (!ended && (signal = WaitForTerminationSignalFor(100'000)) == 0) {
  }
  if (signal != 0) {
    gateway->StartDraining();
    Drain(
        [&] {
          int64_t n = 0;
          for (const sv::ReplicaView& r : gateway->Snapshot().replicas) n += r.inflight;
          return n;
        },
        out);
  }
  stop = true;  // the command's group: SIGTERM, then SIGKILL after p.stop_grace_us
  child.join();
  if (!result.ok()) return Status(result.status().code(), fmt::format("the command: {}", result.status().message()));
  // What it wrote after the last on_output call is in the result's tails only.
  auto rest = [](const std::string& tail, int64_t unseen) {
    return tail.substr(tail.size() - static_cast<size_t>(std::clamp<int64_t>(unseen, 0, static_cast<int64_t>(tail.size()))));
  };
  out << rest(result->stdout_tail, result->stdout_bytes - out_bytes) << std::flush;
  std::cerr << rest(result->stderr_tail, result->stderr_bytes - err_bytes) << std::flush;
  if (signal != 0) return OkStatus();
  return FailedPreconditionError(
      result->signal != 0 ? fmt::format("the command ended by signal {}", result->signal)
                          : fmt::format("the command exited with status {}", result->exit_code));
}

}  // namespace

Status RunReplicaCommand(const ReplicaCommandOptions& o, std::ostream& out) {
  // Before any thread starts, so that every thread inherits it and SIGTERM and Ctrl-C
  // are only taken where this command waits for them (a thread that left them unblocked
  // ended the process at once, without draining): a device's runtime starts threads of its own.
  BlockTerminationSignals();
  RaiseOpenFileLimit();  // a descriptor per connection
  MERIDIAN_ASSIGN_OR_RETURN(auto address, SplitListenAddress(o.listen, "--listen"));
  std::string token;
  if (!o.token_env.empty()) {
    const char* value = std::getenv(o.token_env.c_str());
    token = value == nullptr ? "" : value;
    if (token.size() < 16) {
      return InvalidArgumentError(fmt::format("--token-env {}: the variable holds {} characters; at least 16",
                                              o.token_env, token.size()));
    }
  } else if (o.token_file.empty()) {
    return InvalidArgumentError(
        "--token-file FILE or --token-env VARIABLE: the token callers present (every listener authenticates its callers)");
  } else {
    MERIDIAN_ASSIGN_OR_RETURN(token, RequiredToken(o.token_file, "--token-file", "the token callers present"));
  }
  MERIDIAN_ASSIGN_OR_RETURN(const ReplicaPems tls, ReplicaTlsPems(o));
  if (!o.command_env.empty()) return RunCommandFront(o, address, token, tls, out);
  MERIDIAN_ASSIGN_OR_RETURN(sv::MlpModel model, LoadModel(o.model));
  MERIDIAN_ASSIGN_OR_RETURN(const kernels::Ops* ops, ModelDevice(o.device, "replica"));
  MERIDIAN_RETURN_IF_ERROR(PlaceModel(model, *ops, o.device, "replica"));
  sv::ReplicaOptions options;
  options.host = address.first;
  options.port = address.second;
  options.token = token;
  options.tls_cert_file = o.tls_cert;
  options.tls_key_file = o.tls_key;
  options.tls_cert_pem = tls.cert_pem;
  options.tls_key_pem = tls.key_pem;
  options.batch = sv::BatchOptions{o.max_batch, o.max_wait_us, o.max_queued_images};
  const int32_t hidden = model.hidden();
  const int64_t step = model.step();
  MERIDIAN_ASSIGN_OR_RETURN(
      auto replica, StartWhenThePortIsFree([&] { return sv::Replica::Start(model, options); }, options.port, out));
  out << fmt::format("replica: listening on {}:{}{} (the digits MLP, {} hidden units, step {}, on {}; batches of "
                     "up to {} images, waiting up to {} us)\n",
                     address.first, replica->port(), tls.with ? " with TLS" : "", hidden, step, model.device(),
                     o.max_batch, o.max_wait_us)
      << std::flush;
  WaitForTerminationSignal();
  replica->StartDraining();
  Drain([&] { return replica->inflight(); }, out);
  return OkStatus();
}

// How a service's gateway learns whose a client's API token is: the coordinator's
// WhoAmI, called with that token over the cluster's TLS (2 s at most). None on an
// insecure cluster, which has no tokens: its gateways take their own tokens alone.
sv::TenantTokens::Identify TenantTokenCheck(const ClusterTarget& target) {
  auto checker = client::ConnectTokenChecker(target, kTokenCheckTimeoutUs);
  if (!checker.ok()) return nullptr;
  std::shared_ptr<client::Client> c = std::move(*checker);
  return [c](const std::string& token) -> sv::TokenAnswer {
    auto who = c->WhoIs(token);
    if (!who.ok()) return who.status();
    return sv::TokenOwner{who->user, who->tenant, who->role == model::Role::kAdmin};
  };
}

// How long a service's gateway asks again for its service when the coordinator cannot
// be reached at its start, and how often.
constexpr int64_t kGatewayStartWaitUs = 15'000'000;
constexpr int64_t kGatewayStartRetryUs = 250'000;

Status RunGatewayCommand(const GatewayCommandOptions& o, std::ostream& out) {
  // Before any thread starts, so that every thread inherits it and SIGTERM and Ctrl-C
  // are only taken where this command waits for them (a thread that left them unblocked
  // ended the process at once, without draining): the coordinator's client starts gRPC's.
  BlockTerminationSignals();
  RaiseOpenFileLimit();  // a descriptor per connection
  MERIDIAN_ASSIGN_OR_RETURN(auto address, SplitListenAddress(o.listen, "--listen"));
  sv::GatewayOptions options;
  options.host = address.first;
  options.port = address.second;
  options.region = o.region;
  MERIDIAN_ASSIGN_OR_RETURN(options.token, RequiredToken(o.token_file, "--token-file", "the token clients present"));
  std::unique_ptr<client::Client> coordinator;
  spec::ServiceSpec service_spec;
  spec::ReplicaSecrets secrets;
  std::optional<spec::FleetSpec> fleet;  // a site's gateway's
  std::vector<std::string> region_sites;  // a service's autoscaling gateway's, with --fleet
  if (!o.site.empty()) {
    if (!o.service.empty() || !o.region.empty() || !o.replicas.empty() || !o.replica_token_file.empty() ||
        !o.replica_ca.empty() || !o.replica_tls_name.empty()) {
      return InvalidArgumentError("--site: a site's gateway routes every service, as the coordinator places their "
                                  "replicas (no --service, --region, --replica, --replica-token-file, --replica-ca or "
                                  "--replica-tls-name)");
    }
    if (o.fleet.empty()) return InvalidArgumentError("--site: give --fleet FILE, the fleet the site is of");
    MERIDIAN_ASSIGN_OR_RETURN(fleet, spec::LoadFleet(o.fleet));
    const auto& sites = fleet->fleet.sites;
    if (std::none_of(sites.begin(), sites.end(), [&](const model::Site& s) { return s.name == o.site; })) {
      std::string names;
      for (const model::Site& s : sites) names += (names.empty() ? "" : ", ") + s.name;
      return InvalidArgumentError(fmt::format("--site '{}': {} has no such site (its sites: {})", o.site, o.fleet, names));
    }
    options.by_service = true;
    options.region = o.site;
  } else if (!o.fleet.empty() && (o.service.empty() || !o.autoscale)) {
    return InvalidArgumentError("--fleet: a site's gateway (--site SITE) reads the fleet, or a service's autoscaling "
                                "gateway (--service NAME --region R --autoscale), to know its region's sites");
  }
  if (!o.site.empty() || !o.service.empty()) {
    if (o.watch_interval_ms < 100 || o.watch_interval_ms > 60'000) {
      return InvalidArgumentError(fmt::format("--watch-interval-ms {}: expected 100..60000", o.watch_interval_ms));
    }
  }
  if (!o.site.empty()) {
    MERIDIAN_ASSIGN_OR_RETURN(coordinator, ConnectClient(o.target));
  } else if (!o.service.empty()) {
    if (!o.replicas.empty() || !o.replica_token_file.empty() || !o.replica_ca.empty() || !o.replica_tls_name.empty()) {
      return InvalidArgumentError("--service: the coordinator names the replicas, their token and their TLS "
                                  "credentials (no --replica, --replica-token-file, --replica-ca or --replica-tls-name)");
    }
    MERIDIAN_ASSIGN_OR_RETURN(coordinator, ConnectClient(o.target));
    // A gateway is a daemon: a coordinator that cannot be reached at its start (still
    // starting, or one that reset a first connection under load, as under TSan in CI)
    // is asked again for a while rather than ending it.
    StatusOr<ServiceEndpoints> found = ServiceReplicaSet(*coordinator, o.service, nullptr);
    for (int64_t waited_us = 0; !found.ok() && found.status().code() == StatusCode::kUnavailable &&
                                waited_us < kGatewayStartWaitUs;
         waited_us += kGatewayStartRetryUs) {
      if (waited_us == 0) {
        out << fmt::format("gateway: {}; asking again for up to {} s\n", found.status().message(),
                           kGatewayStartWaitUs / 1'000'000)
            << std::flush;
      }
      if (WaitForTerminationSignalFor(kGatewayStartRetryUs) != 0) return OkStatus();
      // A new channel each time: one whose connections failed waits out gRPC's backoff,
      // and its attempt once the coordinator was there stalled in the handshake.
      MERIDIAN_ASSIGN_OR_RETURN(coordinator, ConnectClient(o.target));
      found = ServiceReplicaSet(*coordinator, o.service, nullptr);
    }
    MERIDIAN_ASSIGN_OR_RETURN(auto service, std::move(found));
    service_spec = service.spec;
    secrets = service.secrets;
    options.service_token = service.secrets.client_token;
    options.tenant = service.Tenant();
    options.replica_token = service.secrets.token;
    options.replica_tls = ReplicaTlsOf(service.spec.name, service.secrets);
    // A command's POST may act: one that reached a replica is not sent to another.
    options.resend_unsafe = service.spec.command.empty();
    options.replicas = std::move(service.endpoints);
    if (!o.region.empty() &&
        std::none_of(service.spec.regions.begin(), service.spec.regions.end(),
                     [&](const spec::ServiceRegion& r) { return r.region == o.region; })) {
      return InvalidArgumentError(fmt::format("--region '{}': service '{}' has no such region", o.region, o.service));
    }
    if (!o.fleet.empty() && !o.region.empty()) {
      // The sites the region's rule matches: a replica of the region running at none
      // of them runs in its fallback, and is brought home (as a site's gateway does).
      MERIDIAN_ASSIGN_OR_RETURN(spec::FleetSpec f, spec::LoadFleet(o.fleet));
      for (const model::Site& site : f.fleet.sites) {
        if (model::SiteMatchesRegionRule(site, o.region)) region_sites.push_back(site.name);
      }
      if (region_sites.empty()) {
        return InvalidArgumentError(fmt::format("--fleet: no site of {} is in region '{}'", o.fleet, o.region));
      }
    }
    const bool brings_home = !region_sites.empty() && service.spec.fallback_after_us > 0;
    if (o.autoscale && (o.region.empty() || (!service.spec.autoscale && !brings_home))) {
      return InvalidArgumentError(fmt::format(
          "--autoscale: {}",
          o.region.empty() ? "a gateway scales its own region's replicas: give --region"
          : o.fleet.empty()
              ? fmt::format("service '{}' has no 'autoscale' in its spec", o.service)
              : fmt::format("service '{}' has no 'autoscale' in its spec, nor a 'fallback_after' whose replicas "
                            "it would bring home",
                            o.service)));
    }
  } else {
    if (o.autoscale) {
      return InvalidArgumentError("--autoscale: only a service's gateway (--service NAME) or a site's (--site SITE) "
                                  "scales replicas");
    }
    MERIDIAN_ASSIGN_OR_RETURN(options.replica_token, RequiredToken(o.replica_token_file, "--replica-token-file",
                                                                   "the token the replicas ask for"));
    if (o.replicas.empty()) return InvalidArgumentError("--replica HOST:PORT[@REGION] (at least one), or --service NAME");
    if (o.replica_ca.empty() != o.replica_tls_name.empty()) {
      return InvalidArgumentError("--replica-ca and --replica-tls-name come together (the CA the replicas' "
                                  "certificate is of, and the name it carries)");
    }
    if (!o.replica_ca.empty()) {
      auto ca = spec::ReadFileToString(o.replica_ca, 1 << 20);
      if (!ca.ok()) return Status(ca.status().code(), fmt::format("--replica-ca: {}", ca.status().message()));
      options.replica_tls = sv::ReplicaTls{*ca, o.replica_tls_name};
    }
  }
  for (const std::string& r : o.replicas) {  // (none with --service)
    MERIDIAN_ASSIGN_OR_RETURN(sv::ReplicaEndpoint e, sv::ParseReplicaEndpoint(r));
    options.replicas.push_back(e);
  }
  options.tls_cert_file = o.tls_cert;
  options.tls_key_file = o.tls_key;
  options.max_inflight = o.max_inflight;
  options.max_attempts = o.max_attempts;
  options.probe_interval_ms = o.probe_interval_ms;
  if (coordinator != nullptr) options.identify_tokens = TenantTokenCheck(o.target);
  MERIDIAN_ASSIGN_OR_RETURN(auto gateway, sv::Gateway::Start(options));
  if (fleet) {
    out << fmt::format("gateway: listening on {}:{}{} for the services of site {}{}\n", address.first, gateway->port(),
                       o.tls_cert.empty() ? "" : " with TLS", o.site,
                       o.autoscale ? " (autoscaling the regions it is first to match)" : "")
        << std::flush;
    model::Site site = *std::find_if(fleet->fleet.sites.begin(), fleet->fleet.sites.end(),
                                     [&](const model::Site& s) { return s.name == o.site; });
    SiteGateway(o, std::move(site), fleet->fleet.sites, *coordinator, *gateway, out).Run();
    return OkStatus();
  }
  out << fmt::format("gateway: listening on {}:{}{} ({} replicas{}{})\n", address.first, gateway->port(),
                     o.tls_cert.empty() ? "" : " with TLS", options.replicas.size(),
                     o.service.empty() ? "" : " of service " + o.service, o.region.empty() ? "" : ", region " + o.region)
      << std::flush;
  if (coordinator == nullptr) {
    WaitForTerminationSignal();
    return OkStatus();
  }
  FollowerConfig config{o.service, o.watch_interval_ms,
                        [&o, region_sites](const spec::ServiceSpec& spec) {
                          Standing standing{o.region, o.autoscale && spec.autoscale.has_value()};
                          standing.brings_home = o.autoscale && !region_sites.empty() && spec.fallback_after_us > 0;
                          standing.region_sites = region_sites;
                          return standing;
                        },
                        false};
  ServiceFollower(std::move(config), *coordinator, *gateway, std::move(service_spec), std::move(secrets),
                  options.replicas, out)
      .Run();
  return OkStatus();
}

namespace {

struct LoadRun {
  std::string name;
  int32_t connections = 0;
  int64_t requests = 0;
  int64_t errors = 0;  // non-2xx answers and socket errors
  double requests_per_second = 0.0;
  double p50_ms = 0.0;
  double p99_ms = 0.0;
};

// wrk's Lua: POST `body` with the token, and print the figures as one JSON line.
std::string WrkScript(const std::string& body, const std::string& token) {
  return fmt::format(R"(wrk.method = "POST"
wrk.body = [==[{}]==]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {}"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('\nRESULT {{"requests":%d,"duration_us":%d,"errors":%d,"p50_us":%d,"p99_us":%d}}\n',
    summary.requests, summary.duration, e.status + e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
)",
                     body, token);
}

StatusOr<LoadRun> RunWrk(const std::string& wrk, const std::string& script, const std::string& name, int port,
                         const std::string& path, int32_t connections, int64_t seconds) {
  ProcessOptions p;
  p.argv = {wrk, "-t1", fmt::format("-c{}", connections), fmt::format("-d{}s", seconds), "--timeout", "10s",
            "-s", script, fmt::format("http://127.0.0.1:{}{}", port, path)};
  std::atomic<bool> stop{false};
  MERIDIAN_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(p, stop));
  const size_t at = r.stdout_head.rfind("RESULT ");
  if (r.exit_code != 0 || at == std::string::npos) {
    return InternalError(fmt::format("wrk ({}) exited {}: {}{}", name, r.exit_code, r.stdout_tail, r.stderr_tail));
  }
  const auto j = nlohmann::json::parse(r.stdout_head.substr(at + 7), nullptr, false);
  if (j.is_discarded()) return InternalError(fmt::format("wrk ({}): unreadable figures: {}", name, r.stdout_head));
  LoadRun run;
  run.name = name;
  run.connections = connections;
  run.requests = j["requests"].get<int64_t>();
  run.errors = j["errors"].get<int64_t>();
  run.requests_per_second = static_cast<double>(run.requests) / (j["duration_us"].get<double>() / 1e6);
  run.p50_ms = j["p50_us"].get<double>() / 1000.0;
  run.p99_ms = j["p99_us"].get<double>() / 1000.0;
  return run;
}

// The digits MLP trained here for three epochs: a real model, from a real checkpoint.
StatusOr<std::pair<std::string, training::TrainResult>> TrainModel(const training::Digits& digits, int32_t hidden) {
  training::TrainOptions t;
  t.hidden = hidden;
  t.epochs = 3;
  MERIDIAN_RETURN_IF_ERROR(training::CheckTrainOptions(t, digits.size(), 1));
  training::Trainer trainer(digits, t, nullptr);
  MERIDIAN_ASSIGN_OR_RETURN(training::TrainResult result, trainer.Run([](const training::Checkpoint&) { return OkStatus(); },
                                                                      [](const training::EpochReport&) {}));
  return std::pair{training::EncodeCheckpoint(trainer.Current(), hidden), result};
}

}  // namespace

Status RunBenchServe(const BenchServeOptions& o, std::ostream& out) {
  const std::string wrk = FindProgram("wrk");
  if (wrk.empty()) return FailedPreconditionError("bench serve needs wrk (scripts/install-deps.sh installs it)");
  if (o.connections < 2 || o.connections > 1024) return InvalidArgumentError("--connections: 2..1024");
  if (o.seconds < 1 || o.seconds > 600) return InvalidArgumentError("--seconds: 1..600");
  // Before the training: a GPU that is not there is said at once.
  MERIDIAN_ASSIGN_OR_RETURN(const kernels::Ops* ops, ModelDevice(o.device, "bench serve"));
  MERIDIAN_ASSIGN_OR_RETURN(std::string digits_path, training::DebianDigitsPath());
  MERIDIAN_ASSIGN_OR_RETURN(training::Digits digits, training::LoadDigits(digits_path));
  MERIDIAN_ASSIGN_OR_RETURN(auto trained, TrainModel(digits, o.hidden));

  MERIDIAN_ASSIGN_OR_RETURN(auto dir, TempDir::Make("meridian-bench-serve"));
  const std::string replica_token = "bench-replica-token-0123456789";
  const std::string client_token = "bench-client-token-0123456789";
  // A service's credentials, as `meridian serve` makes them, for the TLS hop.
  MERIDIAN_ASSIGN_OR_RETURN(sv::ServiceCredentials tls,
                            sv::MakeServiceCredentials("bench", int64_t{3600} * 1'000'000));
  auto start_replica = [&](sv::BatchOptions batch, bool with_tls) -> StatusOr<std::unique_ptr<sv::Replica>> {
    MERIDIAN_ASSIGN_OR_RETURN(sv::MlpModel model, sv::MlpModel::FromCheckpoint(trained.first));
    MERIDIAN_RETURN_IF_ERROR(PlaceModel(model, *ops, o.device, "bench serve"));
    sv::ReplicaOptions r;
    r.token = replica_token;
    r.batch = batch;
    if (with_tls) {
      r.tls_cert_pem = tls.cert_pem;
      r.tls_key_pem = tls.key_pem;
    }
    return sv::Replica::Start(std::move(model), r);
  };
  auto start_gateway = [&](int replica_port, bool with_tls) {
    sv::GatewayOptions g;
    g.token = client_token;
    g.replica_token = replica_token;
    g.replicas = {{"127.0.0.1", replica_port, "local"}};
    g.max_inflight = 4 * o.connections;
    if (with_tls) g.replica_tls = sv::ReplicaTls{tls.ca_pem, sv::ServiceTlsName("bench")};
    return sv::Gateway::Start(g);
  };
  const int64_t queue = std::max<int64_t>(4096, o.max_batch);
  MERIDIAN_ASSIGN_OR_RETURN(auto unbatched, start_replica(sv::BatchOptions{1, 0, queue}, false));
  MERIDIAN_ASSIGN_OR_RETURN(auto unbatched_tls, start_replica(sv::BatchOptions{1, 0, queue}, true));
  MERIDIAN_ASSIGN_OR_RETURN(auto batched, start_replica(sv::BatchOptions{o.max_batch, o.max_wait_us, queue}, false));
  MERIDIAN_ASSIGN_OR_RETURN(auto gateway_unbatched, start_gateway(unbatched->port(), false));
  MERIDIAN_ASSIGN_OR_RETURN(auto gateway_tls, start_gateway(unbatched_tls->port(), true));
  MERIDIAN_ASSIGN_OR_RETURN(auto gateway_batched, start_gateway(batched->port(), false));
  // As `meridian up`'s site gateways route: the service by its name, at /v1/services/bench/.
  sv::GatewayOptions by_service;
  by_service.token = client_token;
  by_service.max_inflight = 4 * o.connections;
  by_service.by_service = true;
  MERIDIAN_ASSIGN_OR_RETURN(auto site_gateway, sv::Gateway::Start(by_service));
  MERIDIAN_RETURN_IF_ERROR(site_gateway->AddService(
      "bench", sv::ServiceRoute{"local", {{"127.0.0.1", unbatched->port(), "local"}}, replica_token, {}, true, ""}));

  // One real test image a request (the last of the file: never trained on).
  const auto last = digits.pixels.end() - training::kDigitPixels;
  const std::string body =
      nlohmann::json{{"instances", {std::vector<float>(last, digits.pixels.end())}}}.dump();
  const std::string direct_script = (fs::path(dir->path()) / "direct.lua").string();
  const std::string gateway_script = (fs::path(dir->path()) / "gateway.lua").string();
  MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(direct_script, WrkScript(body, replica_token)));
  MERIDIAN_RETURN_IF_ERROR(WriteFileAtomically(gateway_script, WrkScript(body, client_token)));

  std::vector<LoadRun> runs;
  auto run = [&](const std::string& name, const std::string& script, int port, int32_t connections,
                 const std::string& path = "/v1/predict") -> Status {
    MERIDIAN_ASSIGN_OR_RETURN(LoadRun r, RunWrk(wrk, script, name, port, path, connections, o.seconds));
    runs.push_back(r);
    return OkStatus();
  };
  // Alternated so that a slow minute of the machine falls on both sides.
  MERIDIAN_RETURN_IF_ERROR(run("direct, 1 connection", direct_script, unbatched->port(), 1));
  MERIDIAN_RETURN_IF_ERROR(run("gateway, 1 connection", gateway_script, gateway_unbatched->port(), 1));
  MERIDIAN_RETURN_IF_ERROR(run("batching off", direct_script, unbatched->port(), o.connections));
  MERIDIAN_RETURN_IF_ERROR(run("batching on", direct_script, batched->port(), o.connections));
  MERIDIAN_RETURN_IF_ERROR(run("batching on, through the gateway", gateway_script, gateway_batched->port(),
                               o.connections));
  // As a service's gateways call its replicas: HTTPS, the certificate checked.
  MERIDIAN_RETURN_IF_ERROR(run("gateway, TLS to the replica, 1 conn", gateway_script, gateway_tls->port(), 1));
  MERIDIAN_RETURN_IF_ERROR(
      run("site gateway, 1 connection", gateway_script, site_gateway->port(), 1, "/v1/services/bench/v1/predict"));
  const double overhead_ms = runs[1].p50_ms - runs[0].p50_ms;
  const double tls_overhead_ms = runs[5].p50_ms - runs[0].p50_ms;
  const double site_overhead_ms = runs[6].p50_ms - runs[0].p50_ms;
  const double batching_ratio = runs[3].requests_per_second / std::max(1.0, runs[2].requests_per_second);
  const sv::BatcherStats batches = batched->stats();
  const std::string device = batched->device();
  const double mean_batch = batches.batches == 0 ? 0.0 : static_cast<double>(batches.images) / batches.batches;

  if (o.json) {
    nlohmann::json j;
    j["gateway_overhead_p50_ms"] = overhead_ms;
    j["gateway_tls_overhead_p50_ms"] = tls_overhead_ms;
    j["site_gateway_overhead_p50_ms"] = site_overhead_ms;
    j["batching_ratio"] = batching_ratio;
    j["device"] = device;
    j["model"] = {{"hidden", o.hidden}, {"test_accuracy", trained.second.test_accuracy}};
    j["connections"] = o.connections;
    j["seconds"] = o.seconds;
    j["max_batch"] = o.max_batch;
    j["max_wait_us"] = o.max_wait_us;
    j["mean_batch_images"] = mean_batch;
    for (const LoadRun& r : runs) {
      j["runs"].push_back({{"name", r.name},
                           {"connections", r.connections},
                           {"requests", r.requests},
                           {"errors", r.errors},
                           {"requests_per_second", r.requests_per_second},
                           {"p50_ms", r.p50_ms},
                           {"p99_ms", r.p99_ms}});
    }
    out << j.dump(2) << "\n";
    return OkStatus();
  }
  out << fmt::format("the digits MLP ({} hidden units, test accuracy {:.1f}%) on {}, one image a request, wrk for {} s "
                     "a run\n",
                     o.hidden, 100.0 * trained.second.test_accuracy, device, o.seconds);
  out << fmt::format("  {:<36} {:>5} {:>12} {:>9} {:>9} {:>7}\n", "run", "conns", "requests/s", "p50 ms", "p99 ms",
                     "errors");
  for (const LoadRun& r : runs) {
    out << fmt::format("  {:<36} {:>5} {:>12.0f} {:>9.3f} {:>9.3f} {:>7}\n", r.name, r.connections,
                       r.requests_per_second, r.p50_ms, r.p99_ms, r.errors);
  }
  out << fmt::format("  gateway overhead at p50: {:.3f} ms (gateway {:.3f} - direct {:.3f})\n", overhead_ms,
                     runs[1].p50_ms, runs[0].p50_ms);
  out << fmt::format("  gateway overhead at p50, TLS to the replica: {:.3f} ms (gateway {:.3f} - direct {:.3f})\n",
                     tls_overhead_ms, runs[5].p50_ms, runs[0].p50_ms);
  out << fmt::format("  gateway overhead at p50, a site's gateway (/v1/services/NAME/): {:.3f} ms (gateway {:.3f} - direct "
                     "{:.3f})\n",
                     site_overhead_ms, runs[6].p50_ms, runs[0].p50_ms);
  out << fmt::format("  batching: {:.2f}x the requests/s (batches of {:.1f} images on average, up to {}, waiting up to "
                     "{} us)\n",
                     batching_ratio, mean_batch, o.max_batch, o.max_wait_us);
  return OkStatus();
}

}  // namespace meridian::cli
