#include "rpc/server.h"

#include <grpcpp/grpcpp.h>

#include "meridian/v1/meridian.grpc.pb.h"
#include "rpc/convert.h"

namespace meridian::rpc {
namespace {

// How long a streaming handler waits before checking whether to stop.
constexpr int64_t kStreamPollUs = 250'000;
// Tasks in a GetJob page when the caller names no number.
constexpr uint32_t kDefaultTasksPerPage = 1000;

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(JobApi& api, const std::atomic<bool>& stopping) : api_(api), stopping_(stopping) {}

  grpc::Status Submit(grpc::ServerContext*, const v1::SubmitJobRequest* req, v1::SubmitJobResponse* resp) override {
    StatusOr<SubmitResult> r = api_.Submit(req->spec_yaml(), req->spec_name());
    if (!r.ok()) return ToGrpc(r.status());
    resp->set_job_id(r->job_id);
    resp->set_name(r->name);
    resp->set_tasks(r->tasks);
    for (const std::string& w : r->warnings) resp->add_warnings(w);
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext*, const v1::GetJobRequest* req, v1::JobInfo* resp) override {
    const uint32_t max_tasks = !req->include_tasks() ? 0 : req->max_tasks() == 0 ? kDefaultTasksPerPage : req->max_tasks();
    StatusOr<model::JobView> v = api_.GetJob(req->job_id(), req->first_task(), max_tasks);
    if (!v.ok()) return ToGrpc(v.status());
    ToProto(*v, resp);
    return grpc::Status::OK;
  }

  grpc::Status List(grpc::ServerContext*, const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) override {
    for (const model::JobSummary& s : api_.ListJobs(req->limit())) ToProto(s, resp->add_jobs());
    return grpc::Status::OK;
  }

  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelJobRequest* req, v1::JobInfo* resp) override {
    StatusOr<model::JobSummary> s = api_.CancelJob(req->job_id());
    if (!s.ok()) return ToGrpc(s.status());
    ToProto(*s, resp);
    return grpc::Status::OK;
  }

  grpc::Status Delete(grpc::ServerContext*, const v1::DeleteJobRequest* req, v1::JobInfo* resp) override {
    StatusOr<model::JobSummary> s = api_.DeleteJob(req->job_id());
    if (!s.ok()) return ToGrpc(s.status());
    ToProto(*s, resp);
    return grpc::Status::OK;
  }

  grpc::Status Logs(grpc::ServerContext*, const v1::GetLogsRequest* req, v1::GetLogsResponse* resp) override {
    StatusOr<std::vector<TaskLog>> logs = api_.Logs(req->job_id(), req->task());
    if (!logs.ok()) return ToGrpc(logs.status());
    for (const TaskLog& l : *logs) ToProto(l, resp->add_logs());
    return grpc::Status::OK;
  }

  grpc::Status Watch(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                     grpc::ServerWriter<v1::JobInfo>* writer) override {
    uint64_t version = req->after_version();
    while (!ctx->IsCancelled() && !stopping_.load()) {
      StatusOr<model::JobSummary> s = api_.WaitJob(req->job_id(), version, kStreamPollUs);
      if (!s.ok()) return ToGrpc(s.status());
      if (s->version > version) {
        version = s->version;
        v1::JobInfo info;
        ToProto(*s, &info);
        if (!writer->Write(info)) return grpc::Status::OK;
      }
      if (model::IsTerminal(s->job.status)) return grpc::Status::OK;
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
  }

 private:
  JobApi& api_;
  const std::atomic<bool>& stopping_;
};

class NodeServiceImpl final : public v1::NodeService::Service {
 public:
  NodeServiceImpl(NodeApi& api, const std::atomic<bool>& stopping) : api_(api), stopping_(stopping) {}

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* req, v1::RegisterResponse* resp) override {
    StatusOr<model::RegistrationReply> r = api_.Register(FromProto(*req));
    if (!r.ok()) return ToGrpc(r.status());
    ToProto(*r, resp);
    return grpc::Status::OK;
  }

  grpc::Status Assignments(grpc::ServerContext* ctx, const v1::AssignmentsRequest* req,
                           grpc::ServerWriter<v1::AssignmentBatch>* writer) override {
    while (!ctx->IsCancelled() && !stopping_.load()) {
      StatusOr<model::AssignmentBatch> b = api_.NextAssignments(req->node_id(), req->session(), kStreamPollUs);
      if (!b.ok()) return ToGrpc(b.status());
      if (b->assignments.empty() && b->cancel.empty()) continue;
      v1::AssignmentBatch out;
      ToProto(*b, &out);
      if (!writer->Write(out)) {
        // The agent is gone; what was taken is recovered by failure detection.
        return grpc::Status::OK;
      }
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req, v1::HeartbeatResponse* resp) override {
    StatusOr<bool> reregister = api_.Heartbeat(FromProto(*req));
    if (!reregister.ok()) return ToGrpc(reregister.status());
    resp->set_reregister(*reregister);
    return grpc::Status::OK;
  }

 private:
  NodeApi& api_;
  const std::atomic<bool>& stopping_;
};

class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  explicit AdminServiceImpl(AdminApi& api) : api_(api) {}

  grpc::Status ListNodes(grpc::ServerContext*, const v1::ListNodesRequest*, v1::ListNodesResponse* resp) override {
    for (const model::NodeView& n : api_.ListNodes()) ToProto(n, resp->add_nodes());
    return grpc::Status::OK;
  }

 private:
  AdminApi& api_;
};

class ObjectServiceImpl final : public v1::ObjectService::Service {
 public:
  explicit ObjectServiceImpl(ObjectApi& api) : api_(api) {}

  grpc::Status Locate(grpc::ServerContext*, const v1::LocateObjectRequest* req, v1::ObjectLocation* resp) override {
    StatusOr<model::ObjectLocation> l = api_.Locate(req->ref());
    if (!l.ok()) return ToGrpc(l.status());
    ToProto(*l, resp);
    return grpc::Status::OK;
  }

  grpc::Status PlacePut(grpc::ServerContext*, const v1::PlacePutRequest* req, v1::ObjectReplica* resp) override {
    StatusOr<model::ObjectReplica> r = api_.PlacePut(req->size(), req->site());
    if (!r.ok()) return ToGrpc(r.status());
    ToProto(*r, resp);
    return grpc::Status::OK;
  }

  grpc::Status Commit(grpc::ServerContext*, const v1::CommitObjectRequest* req, v1::ObjectLocation* resp) override {
    StatusOr<model::ObjectLocation> l = api_.Commit(req->id(), req->size(), req->node_id(), req->name());
    if (!l.ok()) return ToGrpc(l.status());
    ToProto(*l, resp);
    return grpc::Status::OK;
  }

  grpc::Status List(grpc::ServerContext*, const v1::ListObjectsRequest*, v1::ListObjectsResponse* resp) override {
    for (const model::ObjectLocation& l : api_.ListObjects()) ToProto(l, resp->add_objects());
    return grpc::Status::OK;
  }

  grpc::Status DefineDataset(grpc::ServerContext*, const v1::DefineDatasetRequest* req, v1::Dataset* resp) override {
    std::vector<model::HeldObject> shards;
    for (const v1::HeldObject& o : req->shards()) shards.push_back(FromProto(o));
    StatusOr<model::DatasetView> d = api_.DefineDataset(req->name(), shards);
    if (!d.ok()) return ToGrpc(d.status());
    ToProto(*d, resp);
    return grpc::Status::OK;
  }

  grpc::Status GetDataset(grpc::ServerContext*, const v1::GetDatasetRequest* req, v1::Dataset* resp) override {
    StatusOr<model::DatasetView> d = api_.GetDataset(req->name());
    if (!d.ok()) return ToGrpc(d.status());
    ToProto(*d, resp);
    return grpc::Status::OK;
  }

  grpc::Status ListDatasets(grpc::ServerContext*, const v1::ListDatasetsRequest*,
                            v1::ListDatasetsResponse* resp) override {
    for (const model::DatasetView& d : api_.ListDatasets()) ToProto(d, resp->add_datasets());
    return grpc::Status::OK;
  }

 private:
  ObjectApi& api_;
};

}  // namespace

StatusOr<std::unique_ptr<Server>> Server::Start(const std::string& address, JobApi& jobs, NodeApi& nodes,
                                                AdminApi& admin, ObjectApi& objects) {
  std::unique_ptr<Server> s(new Server());
  s->object_service_ = std::make_unique<ObjectServiceImpl>(objects);
  s->job_service_ = std::make_unique<JobServiceImpl>(jobs, s->stopping_);
  s->node_service_ = std::make_unique<NodeServiceImpl>(nodes, s->stopping_);
  s->admin_service_ = std::make_unique<AdminServiceImpl>(admin);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &s->port_);
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(kMaxResponseBytes);
  // Keep polling threads around: with gRPC's defaults (1 to 2 pollers) every call that
  // finds them busy starts a thread and ends one, a large share of a call's latency.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 4);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 64);
  builder.AddChannelArgument("grpc.optimization_target", "latency");
  builder.RegisterService(s->job_service_.get());
  builder.RegisterService(s->node_service_.get());
  builder.RegisterService(s->admin_service_.get());
  builder.RegisterService(s->object_service_.get());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return UnavailableError("cannot listen on " + address + " (in use, or not a valid host:port)");
  }
  return s;
}

Server::~Server() { Shutdown(); }

void Server::Shutdown() {
  if (!server_ || stopping_.exchange(true)) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

}  // namespace meridian::rpc
