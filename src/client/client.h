// The C++ client of a Meridian coordinator: submit and follow jobs, read their
// results and logs, list nodes. What the `meridian` command uses; other programs may
// too. Every call has a deadline; errors name the coordinator and say what to do.
//
// Thread-safety: a Client may be used from several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/run_state.h"
#include "rpc/api.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace meridian::client {

class Client {
 public:
  // A plaintext client, for an insecure coordinator.
  explicit Client(std::string address, int64_t timeout_us = 10'000'000);
  // TLS with the cluster's CA and a client certificate, and a user's token.
  Client(std::string address, rpc::ChannelSecurity security, int64_t timeout_us = 10'000'000);
  ~Client();

  const std::string& address() const { return address_; }
  // TLS for the transfer plane with this client's certificate (objects put and read
  // from agents); null for a plaintext client.
  StatusOr<std::shared_ptr<const security::TlsContext>> TransferTls();

  StatusOr<rpc::SubmitResult> Submit(const std::string& spec_yaml, const std::string& spec_name);
  // Where the spec's tasks would run on the live nodes, when and at what cost (JobApi::Plan).
  StatusOr<model::PlanReport> Plan(const std::string& spec_yaml, const std::string& spec_name,
                                   const std::string& order, uint64_t seed);
  // The job; with include_tasks, every task too, fetched a page at a time (a job of
  // millions of tasks: use ForEachTaskPage instead, which holds one page at a time).
  StatusOr<model::JobView> GetJob(uint64_t id, bool include_tasks);
  // Up to `max_tasks` tasks from index `first_task`; JobView::next_task says where to
  // go on (the coordinator may return fewer, when outputs are large).
  StatusOr<model::JobView> GetJobPage(uint64_t id, uint32_t first_task, uint32_t max_tasks);
  // Calls on_page with each page of the job's tasks in order (the first call carries
  // the job's summary too); stops early with on_page's error.
  Status ForEachTaskPage(uint64_t id, uint32_t page_size, const std::function<Status(const model::JobView&)>& on_page);
  // The newest `limit` jobs (0: all) whose names start with `name_prefix`; with
  // `live_only`, only those not finished (the coordinator filters).
  StatusOr<std::vector<model::JobSummary>> ListJobs(int32_t limit, const std::string& name_prefix = "",
                                                    bool live_only = false);
  StatusOr<model::JobSummary> Cancel(uint64_t id);
  // The spec job `id` was submitted with, and its file name.
  StatusOr<std::pair<std::string, std::string>> JobSpec(uint64_t id);
  StatusOr<model::JobSummary> Delete(uint64_t id);
  // The job's logs (of the task called `task`, when set), every page of them: for a
  // job of many tasks, use ForEachLogPage instead, which holds one page at a time.
  StatusOr<std::vector<rpc::TaskLog>> Logs(uint64_t id, const std::string& task);
  // Calls on_page with each page of the job's logs in (task, attempt) order (at most
  // rpc::kMaxLogPageBytes of tails and one log more); stops early with on_page's error.
  Status ForEachLogPage(uint64_t id, const std::string& task,
                        const std::function<Status(std::vector<rpc::TaskLog>&)>& on_page);
  // Calls on_change with the job's summary now and after every change until it ends
  // (or on_change returns false); returns the last summary. When the coordinator
  // cannot be reached (it restarts, say) the watch keeps trying for up to
  // `reconnect_for_us`, calling on_lost once per outage, then follows the job again.
  StatusOr<model::JobSummary> Watch(uint64_t id, const std::function<bool(const model::JobSummary&)>& on_change,
                                    int64_t reconnect_for_us = 0,
                                    const std::function<void(const Status&)>& on_lost = nullptr);
  // Submit, then Watch, in one call (a round trip less): on_accepted is called once the
  // job is stored, before any summary; then as Watch. Lost after the job was accepted,
  // it follows the job as Watch does; lost before, it says so (the job may or may not
  // have been stored, as with Submit).
  StatusOr<model::JobSummary> SubmitAndWatch(const std::string& spec_yaml, const std::string& spec_name,
                                             const std::function<void(const rpc::SubmitResult&)>& on_accepted,
                                             const std::function<bool(const model::JobSummary&)>& on_change,
                                             int64_t reconnect_for_us = 0,
                                             const std::function<void(const Status&)>& on_lost = nullptr);
  StatusOr<std::vector<model::NodeView>> Nodes();
  // The tenants the caller may see (all, for an admin), with their use now.
  StatusOr<std::vector<model::TenantView>> Tenants();

  // Tokens (an admin's), and who this client's token says it is.
  StatusOr<rpc::NewToken> CreateToken(const std::string& user, const std::string& tenant, model::Role role,
                                      int64_t ttl_us);
  StatusOr<std::vector<model::TokenRecord>> Tokens();
  StatusOr<model::TokenRecord> RevokeToken(const std::string& id);
  // Who the coordinator takes this client for; and, when asked, where it serves HTTP.
  StatusOr<model::Caller> WhoAmI(rpc::HttpEndpoints* endpoints = nullptr);
  // Who the coordinator takes `token` for (WhoAmI, called with that token instead of
  // this client's): a gateway checking a tenant's token. Needs TLS, and a client made
  // without a token of its own (ConnectTokenChecker), whose token would go with it.
  StatusOr<model::Caller> WhoIs(const std::string& token);

  // The object directory (the bytes move over the transfer protocol, objects/).
  // An object of this client's tenant, with a read ticket for the transfer servers;
  // with `job_id`, an output of that job's task `task` (its object id as `ref`).
  StatusOr<model::ObjectLocation> Locate(const std::string& ref, uint64_t job_id = 0, const std::string& task = "");
  // Where to put an object, with the put ticket for that node.
  StatusOr<model::ObjectReplica> PlacePut(int64_t size, const std::string& site);
  // `receipt`: the transfer server's for the put (objects::Push gives it).
  StatusOr<model::ObjectLocation> CommitObject(const std::string& id, int64_t size, uint32_t node_id,
                                               const std::string& name, const std::string& receipt = "");
  // Undoes one put of object `id` by this client's tenant (ObjectApi::DeleteObject).
  StatusOr<model::ObjectLocation> DeleteObject(const std::string& id);
  StatusOr<std::vector<model::ObjectLocation>> Objects();
  StatusOr<model::DatasetView> DefineDataset(const std::string& name, const std::vector<model::HeldObject>& shards);
  StatusOr<model::DatasetView> GetDataset(const std::string& name);
  StatusOr<std::vector<model::DatasetView>> Datasets();

 private:
  template <typename Request, typename Method>
  StatusOr<model::JobSummary> OnJob(uint64_t id, Method method);
  Status Explain(const Status& s) const;
  // A unary call through the channel, with `timeout_us` (0: the client's timeout);
  // with `as_token`, the call presents that token (the channel's own, none: WhoIs).
  template <typename Stub, typename Request, typename Response>
  Status Unary(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*), const Request& request,
               Response* response, int64_t timeout_us = 0, const std::string& as_token = "");
  std::shared_ptr<grpc::Channel> Channel() const;

  std::string address_;
  rpc::ChannelSecurity security_;
  int64_t timeout_us_;
  std::mutex tls_mu_;
  std::shared_ptr<const security::TlsContext> transfer_tls_;  // GUARDED_BY(tls_mu_); made on first use
  mutable std::mutex channel_mu_;
  std::shared_ptr<grpc::Channel> channel_;  // GUARDED_BY(channel_mu_); a fresh one after an outage
};

// The credentials of the cluster `meridian up` made in `dir`: the CA and client
// certificate in dir/tls and the admin token in dir/admin.token. FailedPrecondition
// when dir/tls is missing (not a secured cluster).
StatusOr<rpc::ChannelSecurity> LoadClusterCredentials(const std::string& dir);

}  // namespace meridian::client
