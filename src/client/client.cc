#include "client/client.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include <fmt/format.h>

#include "common/strings.h"
#include "common/units.h"
#include "meridian/v1/meridian.grpc.pb.h"
#include "rpc/convert.h"

namespace meridian::client {

std::shared_ptr<grpc::Channel> Client::Channel() const {
  std::lock_guard<std::mutex> lock(channel_mu_);
  return channel_;
}

Client::Client(std::string address, int64_t timeout_us)
    : address_(std::move(address)), timeout_us_(timeout_us), channel_(rpc::MakeChannel(address_)) {}
Client::Client(std::string address, rpc::ChannelSecurity security, int64_t timeout_us)
    : address_(std::move(address)),
      security_(std::move(security)),
      timeout_us_(timeout_us),
      channel_(rpc::MakeChannel(address_, security_)) {}

StatusOr<std::shared_ptr<const security::TlsContext>> Client::TransferTls() {
  if (!security_.tls.enabled()) return std::shared_ptr<const security::TlsContext>();
  std::lock_guard<std::mutex> lock(tls_mu_);
  if (!transfer_tls_) {
    MERIDIAN_ASSIGN_OR_RETURN(std::shared_ptr<security::TlsContext> t, security::TlsContext::Create(security_.tls));
    transfer_tls_ = std::move(t);
  }
  return transfer_tls_;
}

StatusOr<rpc::ChannelSecurity> LoadClusterCredentials(const std::string& dir) {
  const std::filesystem::path tls = std::filesystem::path(dir) / "tls";
  if (!std::filesystem::exists(tls / "ca.crt")) {
    return FailedPreconditionError(fmt::format("{} holds no cluster certificates (tls/ca.crt)", dir));
  }
  rpc::ChannelSecurity out;
  MERIDIAN_ASSIGN_OR_RETURN(out.tls, security::LoadCredentials(tls.string(), "client"));
  std::ifstream in(std::filesystem::path(dir) / "admin.token");
  std::getline(in, out.token);
  return out;
}
Client::~Client() = default;

// One unary call with a deadline, its error explained. gRPC's generated client class
// is its "stub"; creating one per call is cheap (it only holds the shared channel).
template <typename Stub, typename Request, typename Response>
Status Client::Unary(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                     const Request& request, Response* response, int64_t timeout_us,
                     const std::string& as_token) {
  grpc::ClientContext ctx;
  rpc::SetDeadline(ctx, timeout_us > 0 ? timeout_us : timeout_us_);
  if (!as_token.empty()) ctx.set_credentials(grpc::AccessTokenCredentials(as_token));
  Stub stub(Channel());
  grpc::Status s = (stub.*method)(&ctx, request, response);
  return s.ok() ? OkStatus() : Explain(rpc::FromGrpc(s));
}

Status Client::Explain(const Status& s) const {
  switch (s.code()) {
    case StatusCode::kUnavailable:
      if (s.message().find("andshake") != std::string::npos || s.message().find("SSL") != std::string::npos) {
        return UnavailableError(fmt::format(
            "the TLS handshake with the coordinator at {} failed: its certificate or ours is not of the cluster's CA "
            "(or names another host); check --tls-dir ({})",
            address_, s.message()));
      }
      return UnavailableError(fmt::format(
          "cannot reach the coordinator at {} ({}); is it running? Start a local cluster with 'meridian up'",
          address_, s.message()));
    case StatusCode::kDeadlineExceeded:
      return DeadlineExceededError(fmt::format("the coordinator at {} did not answer in time", address_));
    default:
      return s;
  }
}

namespace {

// Calls that read a whole spec (parse, expand, store or plan up to 100,000 tasks) get
// this many times the client's timeout.
constexpr int64_t kSpecCallTimeoutFactor = 3;

StatusOr<v1::SubmitJobRequest> SubmitRequest(const std::string& spec_yaml, const std::string& spec_name) {
  // The server would refuse it too; say so before sending it.
  if (spec_yaml.size() + spec_name.size() + 64 > static_cast<size_t>(rpc::kMaxRequestBytes)) {
    return ResourceExhaustedError(fmt::format("{} is {}; the coordinator accepts specs of at most {}", spec_name,
                                              FormatBytes(static_cast<int64_t>(spec_yaml.size())),
                                              FormatBytes(rpc::kMaxRequestBytes)));
  }
  // Protobuf would send it, and the coordinator refuse the message as a whole.
  if (const size_t bad = FirstNonUtf8(spec_yaml); bad != std::string::npos) {
    return InvalidArgumentError(fmt::format("{}:{}: byte {} (0x{:02x}) is not UTF-8; a spec is UTF-8 text", spec_name,
                                            1 + std::count(spec_yaml.begin(), spec_yaml.begin() + bad, '\n'), bad + 1,
                                            static_cast<uint8_t>(spec_yaml[bad])));
  }
  if (!IsUtf8(spec_name)) return InvalidArgumentError("a spec's file name must be UTF-8");
  v1::SubmitJobRequest req;
  req.set_spec_yaml(spec_yaml);
  req.set_spec_name(spec_name);
  return req;
}

rpc::SubmitResult FromProto(const v1::SubmitJobResponse& resp) {
  return rpc::SubmitResult{resp.job_id(), resp.name(), resp.tasks(), {resp.warnings().begin(), resp.warnings().end()}};
}

// Reads a stream of a job's summaries (Watch's, SubmitAndWatch's) to its end: `take`
// sees each message and returns the summary it carries, if any; on_change gets each
// one, until it says stop (the stream is then cancelled). `last` is the newest.
// Returns the stream's status, or nullopt when on_change stopped it.
template <typename Message>
std::optional<grpc::Status> FollowSummaries(
    grpc::ClientContext& ctx, grpc::ClientReader<Message>& reader,
    const std::function<const v1::JobInfo*(const Message&)>& take,
    const std::function<bool(const model::JobSummary&)>& on_change, std::optional<model::JobSummary>& last) {
  Message m;
  while (reader.Read(&m)) {
    const v1::JobInfo* info = take(m);
    if (!info) continue;
    last = rpc::FromProto(*info).summary;
    if (!on_change(*last)) {
      ctx.TryCancel();
      reader.Finish().IgnoreError();
      return std::nullopt;
    }
  }
  return reader.Finish();
}

}  // namespace

StatusOr<rpc::SubmitResult> Client::Submit(const std::string& spec_yaml, const std::string& spec_name) {
  MERIDIAN_ASSIGN_OR_RETURN(v1::SubmitJobRequest req, SubmitRequest(spec_yaml, spec_name));
  v1::SubmitJobResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::JobService::Stub::Submit, req, &resp, timeout_us_ * kSpecCallTimeoutFactor));
  return FromProto(resp);
}

StatusOr<model::PlanReport> Client::Plan(const std::string& spec_yaml, const std::string& spec_name,
                                         const std::string& order, uint64_t seed) {
  v1::PlanJobRequest req;
  MERIDIAN_ASSIGN_OR_RETURN(*req.mutable_job(), SubmitRequest(spec_yaml, spec_name));
  req.set_order(order);
  req.set_seed(seed);
  v1::PlanJobResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::JobService::Stub::Plan, req, &resp, timeout_us_ * kSpecCallTimeoutFactor));
  return rpc::FromProto(resp);
}

StatusOr<model::JobSummary> Client::SubmitAndWatch(const std::string& spec_yaml, const std::string& spec_name,
                                                   const std::function<void(const rpc::SubmitResult&)>& on_accepted,
                                                   const std::function<bool(const model::JobSummary&)>& on_change,
                                                   int64_t reconnect_for_us,
                                                   const std::function<void(const Status&)>& on_lost) {
  MERIDIAN_ASSIGN_OR_RETURN(v1::SubmitJobRequest req, SubmitRequest(spec_yaml, spec_name));
  std::optional<uint64_t> id;  // once accepted
  std::optional<model::JobSummary> last;
  {
    grpc::ClientContext ctx;
    // A stream lasts a minute at most, as a watch's; Watch follows a longer job.
    rpc::SetDeadline(ctx, 60'000'000);
    auto reader = v1::JobService::NewStub(Channel())->SubmitAndWatch(&ctx, req);
    std::optional<grpc::Status> ended = FollowSummaries<v1::SubmitProgress>(
        ctx, *reader,
        [&](const v1::SubmitProgress& p) -> const v1::JobInfo* {
          if (p.has_accepted() && !id) {
            id = p.accepted().job_id();
            if (on_accepted) on_accepted(FromProto(p.accepted()));
          }
          return p.has_job() && id ? &p.job() : nullptr;
        },
        on_change, last);
    if (!ended) return *last;
    const grpc::Status& st = *ended;
    if (!id) {
      if (st.ok()) return UnavailableError("the coordinator ended the submission without accepting the job");
      return Explain(rpc::FromGrpc(st));
    }
    if (last && model::IsTerminal(last->job.status)) return *last;
  }
  // The job is stored and goes on, whatever ended this stream (its minute passed, the
  // coordinator restarts): follow it as Watch does, from its summary now, and with
  // Watch's answer to what went wrong.
  return Watch(*id, on_change, reconnect_for_us, on_lost);
}

StatusOr<model::JobView> Client::GetJobPage(uint64_t id, uint32_t first_task, uint32_t max_tasks) {
  v1::GetJobRequest req;
  req.set_job_id(id);
  req.set_include_tasks(max_tasks > 0);
  req.set_first_task(first_task);
  req.set_max_tasks(max_tasks);
  v1::JobInfo resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::JobService::Stub::Get, req, &resp));
  return rpc::FromProto(resp);
}

Status Client::ForEachTaskPage(uint64_t id, uint32_t page_size,
                               const std::function<Status(const model::JobView&)>& on_page) {
  for (uint32_t first = 0;;) {
    MERIDIAN_ASSIGN_OR_RETURN(model::JobView page, GetJobPage(id, first, page_size));
    MERIDIAN_RETURN_IF_ERROR(on_page(page));
    if (page.tasks.empty() || page.next_task <= first) return OkStatus();
    first = page.next_task;
  }
}

StatusOr<model::JobView> Client::GetJob(uint64_t id, bool include_tasks) {
  if (!include_tasks) return GetJobPage(id, 0, 0);
  model::JobView all;
  bool first_page = true;
  MERIDIAN_RETURN_IF_ERROR(ForEachTaskPage(id, rpc::kMaxTasksPerPage, [&](const model::JobView& page) {
    if (first_page) {
      all = page;
      first_page = false;
    } else {
      all.tasks.insert(all.tasks.end(), page.tasks.begin(), page.tasks.end());
    }
    all.next_task = page.next_task;
    return OkStatus();
  }));
  return all;
}

StatusOr<std::vector<model::JobSummary>> Client::ListJobs(int32_t limit, const std::string& name_prefix,
                                                         bool live_only) {
  v1::ListJobsRequest req;
  req.set_limit(limit);
  req.set_name_prefix(name_prefix);
  req.set_live_only(live_only);
  v1::ListJobsResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::JobService::Stub::List, req, &resp));
  std::vector<model::JobSummary> out;
  for (const v1::JobInfo& j : resp.jobs()) out.push_back(rpc::FromProto(j).summary);
  return out;
}

// A JobService call that names one job and answers with its summary.
template <typename Request, typename Method>
StatusOr<model::JobSummary> Client::OnJob(uint64_t id, Method method) {
  Request req;
  req.set_job_id(id);
  v1::JobInfo resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(method, req, &resp));
  return rpc::FromProto(resp).summary;
}

StatusOr<model::JobSummary> Client::Cancel(uint64_t id) {
  return OnJob<v1::CancelJobRequest>(id, &v1::JobService::Stub::Cancel);
}

StatusOr<model::JobSummary> Client::Delete(uint64_t id) {
  return OnJob<v1::DeleteJobRequest>(id, &v1::JobService::Stub::Delete);
}

StatusOr<std::pair<std::string, std::string>> Client::JobSpec(uint64_t id) {
  v1::GetJobSpecRequest req;
  req.set_job_id(id);
  v1::JobSpec resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::JobService::Stub::GetSpec, req, &resp));
  return std::make_pair(resp.spec_yaml(), resp.spec_name());
}

Status Client::ForEachLogPage(uint64_t id, const std::string& task,
                              const std::function<Status(std::vector<rpc::TaskLog>&)>& on_page) {
  v1::GetLogsRequest req;
  req.set_job_id(id);
  req.set_task(task);
  while (true) {
    v1::GetLogsResponse resp;
    MERIDIAN_RETURN_IF_ERROR(Unary(&v1::JobService::Stub::Logs, req, &resp));
    std::vector<rpc::TaskLog> page;
    page.reserve(static_cast<size_t>(resp.logs_size()));
    for (const v1::TaskLog& l : resp.logs()) page.push_back(rpc::FromProto(l));
    MERIDIAN_RETURN_IF_ERROR(on_page(page));
    if (!resp.more()) return OkStatus();
    // Each page starts past the one before: a coordinator that says otherwise would
    // have the client ask for ever.
    const rpc::LogCursor from{req.first_task(), req.first_attempt()};
    const rpc::LogCursor next{resp.next_task(), resp.next_attempt()};
    if (!(from < next)) {
      return InternalError(fmt::format("the coordinator's next page of logs ({}, {}) is not past this one's start ({}, {})",
                                       next.task, next.attempt, from.task, from.attempt));
    }
    req.set_first_task(next.task);
    req.set_first_attempt(next.attempt);
  }
}

StatusOr<std::vector<rpc::TaskLog>> Client::Logs(uint64_t id, const std::string& task) {
  std::vector<rpc::TaskLog> out;
  MERIDIAN_RETURN_IF_ERROR(ForEachLogPage(id, task, [&](std::vector<rpc::TaskLog>& page) {
    out.insert(out.end(), std::make_move_iterator(page.begin()), std::make_move_iterator(page.end()));
    return OkStatus();
  }));
  return out;
}

StatusOr<model::JobSummary> Client::Watch(uint64_t id, const std::function<bool(const model::JobSummary&)>& on_change,
                                          int64_t reconnect_for_us, const std::function<void(const Status&)>& on_lost) {
  uint64_t version = 0;
  std::optional<model::JobSummary> last;
  bool lost = false;  // the coordinator could not be reached, since lost_since
  std::chrono::steady_clock::time_point lost_since{};
  int64_t backoff_us = 200'000;
  // A stream lasts a minute at most; a long job is followed over several.
  while (true) {
    grpc::ClientContext ctx;
    rpc::SetDeadline(ctx, 60'000'000);
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_after_version(version);
    auto reader = v1::JobService::NewStub(Channel())->Watch(&ctx, req);
    std::optional<grpc::Status> ended = FollowSummaries<v1::JobInfo>(
        ctx, *reader,
        [&](const v1::JobInfo& info) {
          lost = false;
          backoff_us = 200'000;
          version = info.version();
          return &info;
        },
        on_change, last);
    if (!ended) return *last;
    const grpc::Status st = *ended;
    if (last && model::IsTerminal(last->job.status)) return *last;
    if (st.ok() || st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) continue;
    const Status error = Explain(rpc::FromGrpc(st));
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE || reconnect_for_us <= 0) return error;
    const auto now = std::chrono::steady_clock::now();
    if (!lost) {
      lost = true;
      lost_since = now;
      if (on_lost) on_lost(error);
    } else if (now - lost_since > std::chrono::microseconds(reconnect_for_us)) {
      return error.WithPrefix(fmt::format("gave up after {} without the coordinator", FormatDurationUs(reconnect_for_us)));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
    backoff_us = std::min<int64_t>(backoff_us * 2, 2'000'000);
    // A fresh channel connects at once (gRPC's own backoff can hide a restarted
    // coordinator for seconds), and a restarted coordinator counts versions afresh.
    {
      std::lock_guard<std::mutex> lock(channel_mu_);
      channel_ = rpc::MakeChannel(address_, security_);
    }
    version = 0;
  }
}

StatusOr<std::vector<model::NodeView>> Client::Nodes() {
  v1::ListNodesRequest req;
  v1::ListNodesResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::AdminService::Stub::ListNodes, req, &resp));
  std::vector<model::NodeView> out;
  for (const v1::NodeInfo& n : resp.nodes()) out.push_back(rpc::FromProto(n));
  return out;
}

StatusOr<std::vector<model::TenantView>> Client::Tenants() {
  v1::ListTenantsRequest req;
  v1::ListTenantsResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::AdminService::Stub::ListTenants, req, &resp));
  std::vector<model::TenantView> out;
  for (const v1::TenantInfo& t : resp.tenants()) out.push_back(rpc::FromProto(t));
  return out;
}

StatusOr<rpc::NewToken> Client::CreateToken(const std::string& user, const std::string& tenant, model::Role role,
                                            int64_t ttl_us) {
  v1::CreateTokenRequest req;
  req.set_user(user);
  req.set_tenant(tenant);
  req.set_role(std::string(model::RoleName(role)));
  req.set_ttl_us(ttl_us);
  v1::CreateTokenResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::AdminService::Stub::CreateToken, req, &resp));
  return rpc::NewToken{rpc::FromProto(resp.token()), resp.secret()};
}

StatusOr<std::vector<model::TokenRecord>> Client::Tokens() {
  v1::ListTokensRequest req;
  v1::ListTokensResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::AdminService::Stub::ListTokens, req, &resp));
  std::vector<model::TokenRecord> out;
  for (const v1::Token& t : resp.tokens()) out.push_back(rpc::FromProto(t));
  return out;
}

StatusOr<model::TokenRecord> Client::RevokeToken(const std::string& id) {
  v1::RevokeTokenRequest req;
  req.set_id(id);
  v1::Token resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::AdminService::Stub::RevokeToken, req, &resp));
  return rpc::FromProto(resp);
}

namespace {

model::Caller CallerOf(const v1::WhoAmIResponse& resp) {
  model::Caller c;
  c.user = resp.user();
  c.tenant = resp.tenant();
  c.role = model::ParseRole(resp.role()).value_or(model::Role::kViewer);
  return c;
}

}  // namespace

StatusOr<model::Caller> Client::WhoAmI(rpc::HttpEndpoints* endpoints) {
  v1::WhoAmIRequest req;
  v1::WhoAmIResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::AdminService::Stub::WhoAmI, req, &resp));
  if (endpoints != nullptr) *endpoints = rpc::HttpEndpoints{resp.http_url().substr(0, 256), resp.dashboard()};
  return CallerOf(resp);
}

StatusOr<model::Caller> Client::WhoIs(const std::string& token) {
  if (!security_.tls.enabled()) {
    return FailedPreconditionError("an insecure coordinator authenticates nobody: it cannot say whose a token is");
  }
  if (!security_.token.empty()) {
    return FailedPreconditionError("WhoIs needs a client without a token of its own (ConnectTokenChecker)");
  }
  if (token.empty()) return UnauthenticatedError("no token to ask about");
  // The request has no fields: the token the call presents is the question.
  v1::WhoAmIRequest req;
  v1::WhoAmIResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::AdminService::Stub::WhoAmI, req, &resp, /*timeout_us=*/0, /*as_token=*/token));
  return CallerOf(resp);
}

StatusOr<model::ObjectLocation> Client::Locate(const std::string& ref, uint64_t job_id, const std::string& task) {
  v1::LocateObjectRequest req;
  req.set_ref(ref);
  req.set_job_id(job_id);
  req.set_task(task);
  v1::ObjectLocation resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::ObjectService::Stub::Locate, req, &resp));
  return rpc::FromProto(resp);
}

StatusOr<model::ObjectReplica> Client::PlacePut(int64_t size, const std::string& site) {
  v1::PlacePutRequest req;
  req.set_size(size);
  req.set_site(site);
  v1::ObjectReplica resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::ObjectService::Stub::PlacePut, req, &resp));
  return rpc::FromProto(resp);
}

StatusOr<model::ObjectLocation> Client::CommitObject(const std::string& id, int64_t size, uint32_t node_id,
                                                     const std::string& name, const std::string& receipt) {
  v1::CommitObjectRequest req;
  req.set_receipt(receipt);
  req.set_id(id);
  req.set_size(size);
  req.set_node_id(node_id);
  req.set_name(name);
  v1::ObjectLocation resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::ObjectService::Stub::Commit, req, &resp));
  return rpc::FromProto(resp);
}

StatusOr<model::ObjectLocation> Client::DeleteObject(const std::string& id) {
  v1::DeleteObjectRequest req;
  req.set_id(id);
  v1::ObjectLocation resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::ObjectService::Stub::Delete, req, &resp));
  return rpc::FromProto(resp);
}

StatusOr<std::vector<model::ObjectLocation>> Client::Objects() {
  v1::ListObjectsRequest req;
  v1::ListObjectsResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::ObjectService::Stub::List, req, &resp));
  std::vector<model::ObjectLocation> out;
  for (const v1::ObjectLocation& l : resp.objects()) out.push_back(rpc::FromProto(l));
  return out;
}

StatusOr<model::DatasetView> Client::DefineDataset(const std::string& name,
                                                   const std::vector<model::HeldObject>& shards) {
  v1::DefineDatasetRequest req;
  req.set_name(name);
  for (const model::HeldObject& o : shards) rpc::ToProto(o, req.add_shards());
  v1::Dataset resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::ObjectService::Stub::DefineDataset, req, &resp));
  return rpc::FromProto(resp);
}

StatusOr<model::DatasetView> Client::GetDataset(const std::string& name) {
  v1::GetDatasetRequest req;
  req.set_name(name);
  v1::Dataset resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::ObjectService::Stub::GetDataset, req, &resp));
  return rpc::FromProto(resp);
}

StatusOr<std::vector<model::DatasetView>> Client::Datasets() {
  v1::ListDatasetsRequest req;
  v1::ListDatasetsResponse resp;
  MERIDIAN_RETURN_IF_ERROR(Unary(&v1::ObjectService::Stub::ListDatasets, req, &resp));
  std::vector<model::DatasetView> out;
  for (const v1::Dataset& d : resp.datasets()) out.push_back(rpc::FromProto(d));
  return out;
}

}  // namespace meridian::client
