#include "rpc/server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/logging.h"
#include "meridian/v1/meridian.grpc.pb.h"
#include "rpc/convert.h"

namespace meridian::rpc {
namespace {

// Tasks in a GetJob page when the caller names no number.
constexpr uint32_t kDefaultTasksPerPage = 1000;

// What a call needs of its caller.
enum class Need {
  kJoin,    // nothing: a join token is checked by the call itself
  kNode,    // a node's certificate
  kView,    // a user's token of any role but agent
  kSubmit,  // a submitter's or an admin's token
  kAdmin,   // an admin's token
};

constexpr char kNoCertificate[] = "the call carries no client certificate of the cluster's CA";

}  // namespace

// The first look at a call on a TLS connection, when its headers have arrived and
// before its message is read: gRPC reads a call's message whole (up to
// kMaxRequestBytes, granting the peer the window to send it) before any handler, the
// Gate's included, runs. A call without a client certificate of the CA goes on only
// as NodeService.Join carrying a join token (authorization: Bearer ...); any other is
// refused here, its stream reset, so that such peers cannot have the coordinator
// hold what they send: 40 calls announcing 16 MB each, on 2 connections with no
// certificate, took a coordinator from 36 MB to 687 MB. Refusals are counted, and
// logged at the first and every 1000th (the Gate logs each call it refuses).
class CallHeaderGate final : public grpc::AuthMetadataProcessor {
 public:
  explicit CallHeaderGate(AuthApi& auth) : auth_(auth) {}

  bool IsBlocking() const override { return false; }  // no wait: a lookup of a token at most

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context, OutputMetadata*,
                       OutputMetadata*) override {
    if (!context->FindPropertyValues("x509_common_name").empty()) return grpc::Status::OK;
    const std::string_view path = Find(metadata, ":path");
    if (path != kJoinPath) {
      return Refuse(path, UnauthenticatedError(kNoCertificate));
    }
    constexpr std::string_view kBearer = "Bearer ";
    const std::string_view auth = Find(metadata, "authorization");
    if (!auth.starts_with(kBearer)) {
      return Refuse(path, UnauthenticatedError("a join carries its join token (authorization: Bearer ...)"));
    }
    StatusOr<model::Caller> caller = auth_.Authenticate(std::string(auth.substr(kBearer.size())));
    if (caller.ok() && caller->role == model::Role::kAgent) return grpc::Status::OK;
    return Refuse(path, caller.ok() ? PermissionDeniedError("a join needs a join token (role agent)") : caller.status());
  }

 private:
  static constexpr std::string_view kJoinPath = "/meridian.v1.NodeService/Join";

  // The first value of `key`, or empty.
  static std::string_view Find(const InputMetadata& metadata, const char* key) {
    const auto it = metadata.find(grpc::string_ref(key));
    return it == metadata.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
  }

  grpc::Status Refuse(std::string_view path, const Status& why) {
    const uint64_t n = refused_.fetch_add(1) + 1;
    if (n == 1 || n % 1000 == 0) {
      MERIDIAN_LOG_WARN("audit: refused {} before its message, with no client certificate: {} ({} such calls so far)",
                        path, why.message(), n);
    }
    return ToGrpc(why);
  }

  AuthApi& auth_;
  std::atomic<uint64_t> refused_{0};
};

// Decides who a call comes from and whether it may go on; logs every refusal.
class Gate {
 public:
  Gate(AuthApi& auth, bool secure) : auth_(auth), secure_(secure) {}

  StatusOr<model::Caller> Admit(grpc::ServerContextBase* ctx, Need need, std::string_view method) const {
    StatusOr<model::Caller> c = Decide(ctx, need);
    if (!c.ok()) Refused(ctx, method, c.status());
    return c;
  }

  // Logs a refusal decided after Admit (a node naming another, a job of another tenant).
  void Refused(grpc::ServerContextBase* ctx, std::string_view method, const Status& why) const {
    Refused(Who(ctx), method, why);
  }
  // The same, for work that goes on after the call's context may be gone: `who` is
  // what Who(ctx) said.
  static void Refused(const std::string& who, std::string_view method, const Status& why) {
    MERIDIAN_LOG_WARN("audit: refused {} from {}: {}", method, who, why.message());
  }
  static std::string Who(grpc::ServerContextBase* ctx) { return fmt::format("{} ({})", ctx->peer(), Identity(ctx)); }

  // A job call by `c` on job `id`: an admin may touch any; others their tenant's only.
  Status CheckTenant(const model::Caller& c, JobApi& jobs, uint64_t id) const {
    if (c.SeesAllTenants()) return OkStatus();
    MERIDIAN_ASSIGN_OR_RETURN(std::string tenant, jobs.JobTenant(id));
    if (tenant != c.tenant) {
      return PermissionDeniedError(fmt::format("job {} is not of tenant {}: {} may not see or change it", id, c.tenant,
                                               c.Describe()));
    }
    return OkStatus();
  }
  // The tenant whose jobs `c` sees: empty for all.
  static std::string TenantScope(const model::Caller& c) {
    return c.SeesAllTenants() ? std::string() : c.tenant;
  }

 private:
  static std::string Identity(grpc::ServerContextBase* ctx) {
    std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
    std::vector<grpc::string_ref> cn = auth ? auth->FindPropertyValues("x509_common_name") : std::vector<grpc::string_ref>{};
    return cn.empty() ? "no certificate" : "certificate " + std::string(cn.front().data(), cn.front().size());
  }

  StatusOr<model::Caller> Decide(grpc::ServerContextBase* ctx, Need need) const {
    if (!secure_) return model::Caller{"", "", model::Role::kAdmin, "", true};
    std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
    std::vector<grpc::string_ref> cn = auth ? auth->FindPropertyValues("x509_common_name") : std::vector<grpc::string_ref>{};
    if (need == Need::kJoin) return model::Caller{};
    if (cn.empty()) {
      return UnauthenticatedError(kNoCertificate);
    }
    const std::string name(cn.front().data(), cn.front().size());
    if (name.rfind("node:", 0) == 0) {
      model::Caller node{name, "", model::Role::kAgent, name.substr(5), false};
      if (need != Need::kNode) {
        return PermissionDeniedError(fmt::format("{} may only call NodeService; agents cannot submit, read or manage",
                                                 node.Describe()));
      }
      return node;
    }
    if (need == Need::kNode) {
      return PermissionDeniedError(fmt::format("only a node's certificate may call NodeService, not '{}'", name));
    }
    std::string token;
    for (auto it = ctx->client_metadata().find("authorization"); it != ctx->client_metadata().end(); ++it) {
      if (it->first != "authorization") break;
      std::string_view v(it->second.data(), it->second.size());
      if (v.rfind("Bearer ", 0) == 0) token = std::string(v.substr(7));
    }
    if (token.empty()) {
      return UnauthenticatedError(
          "the call carries no token: give --token, set MERIDIAN_TOKEN, or use the local cluster's admin.token");
    }
    MERIDIAN_ASSIGN_OR_RETURN(model::Caller c, auth_.Authenticate(token));
    const bool allowed = c.role != model::Role::kAgent &&
                         (need == Need::kView || (need == Need::kSubmit && c.role != model::Role::kViewer) ||
                          (need == Need::kAdmin && c.role == model::Role::kAdmin));
    if (!allowed) {
      static constexpr std::string_view kWhat[] = {"join", "act as a node", "read", "submit or change", "administer"};
      return PermissionDeniedError(fmt::format("{} may not {}", c.Describe(), kWhat[static_cast<int>(need)]));
    }
    return c;
  }

  AuthApi& auth_;
  const bool secure_;
};

// How each kind of pushed stream folds a new item into one not yet written.
void Fold(model::AssignmentBatch&& from, model::AssignmentBatch& into) {
  for (model::TaskAssignment& a : from.assignments) into.assignments.push_back(std::move(a));
  into.cancel.insert(into.cancel.end(), from.cancel.begin(), from.cancel.end());
  for (std::string& o : from.release_objects) into.release_objects.push_back(std::move(o));
}
void Fold(model::JobSummary&& from, model::JobSummary& into) { into = std::move(from); }

// What a SubmitAndWatch stream carries: first that the job was accepted, then its
// summary after each change (the newest only, as a watch).
struct SubmitProgress {
  std::optional<SubmitResult> accepted;
  std::optional<model::JobSummary> job;
};
void Fold(SubmitProgress&& from, SubmitProgress& into) {
  if (from.accepted) into.accepted = std::move(from.accepted);
  if (from.job) into.job = std::move(from.job);
}
void ToProto(const SubmitResult& r, v1::SubmitJobResponse* out) {
  out->set_job_id(r.job_id);
  out->set_name(r.name);
  out->set_tasks(r.tasks);
  for (const std::string& w : r.warnings) out->add_warnings(w);
}
void ToProto(const SubmitProgress& p, v1::SubmitProgress* out) {
  if (p.accepted) ToProto(*p.accepted, out->mutable_accepted());
  if (p.job) ToProto(*p.job, out->mutable_job());
}

// How many streams (Watch and SubmitAndWatch) each user has open. Each is kept by the
// coordinator and written every change of its job, so a user could otherwise hold as
// many as it liked: 20,000 watches of one job took a coordinator from 37 MB to 410 MB.
// A lease is one open stream, given back when it is destroyed (with its stream); it
// keeps the counts alive, whatever ends first.
class StreamQuota {
 public:
  class Lease {
   public:
    Lease(std::shared_ptr<StreamQuota> quota, std::string user) : quota_(std::move(quota)), user_(std::move(user)) {}
    ~Lease() { quota_->Give(user_); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

   private:
    const std::shared_ptr<StreamQuota> quota_;
    const std::string user_;
  };

  // A lease on one more of `user`'s streams, or null when it has kMaxStreamsPerUser.
  static std::unique_ptr<Lease> Take(const std::shared_ptr<StreamQuota>& quota, const std::string& user) {
    {
      std::lock_guard<std::mutex> lock(quota->mu_);
      size_t& open = quota->open_[user];
      if (open >= kMaxStreamsPerUser) return nullptr;
      ++open;
    }
    return std::make_unique<Lease>(quota, user);
  }

 private:
  void Give(const std::string& user) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = open_.find(user);
    if (it != open_.end() && --it->second == 0) open_.erase(it);
  }

  std::mutex mu_;
  std::map<std::string, size_t> open_;
};

template <typename T, typename Proto>
class PushStream;

// A server stream written by pushes (StreamSink): an item pushed is written at once
// from the pushing thread, or, while a write is in flight, folded into the next one.
// Shared by the pusher and the stream's reactor (`Reactor`: its StartWrite and
// Finish), so it outlives whichever ends first; the reactor is used only until Finish.
//
// A write is in flight until gRPC says it is done (WriteDone) and its StartWrite has
// returned, whichever comes last, and that one goes on with what is pending. StartWrite
// reads `out_` (it serializes it) on the calling thread; the write's completion may
// come on another thread, ordered after that read by gRPC's internals only, which
// ThreadSanitizer does not see: it took the next write's reuse of `out_` for a race
// with that read (CI's TSan stage, the coordinator ending mid-job). Going on only
// once StartWrite has returned and said so under the lock orders the reuse after the
// read where TSan sees it.
template <typename T, typename Proto, typename Reactor = PushStream<T, Proto>>
class PushSink final : public StreamSink<T> {
 public:
  explicit PushSink(Reactor* reactor) : reactor_(reactor) {
    // Publishes the fields to whoever takes the lock next. The sink may first be used
    // on another thread than this one, ordered after it by gRPC's internals only, which
    // ThreadSanitizer does not see (it reported the first use as a race).
    std::lock_guard<std::mutex> lock(mu_);
  }

  bool Push(T& item) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_ || gone_) return false;
    if (pending_) {
      Fold(std::move(item), *pending_);
    } else {
      pending_ = std::move(item);
    }
    item = T{};
    if (!writing()) WriteNext(lock);
    return true;
  }
  void Close(const Status& status) override { End(ToGrpc(status), false); }
  bool open() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !closing_ && !gone_;
  }

  // From the reactor: a write is done (not ok: the reader is gone).
  void WriteDone(bool ok) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!ok) gone_ = true;
    write_done_ = true;
    if (!write_returned_) return;  // its StartWrite goes on once it returns
    if (!gone_ && pending_) {
      WriteNext(lock);
    } else {
      FinishIfIdle(lock);
    }
  }
  // Ends the stream: after what is pending is written, or (`now`: the reader is gone,
  // or shutdown) after the write in flight.
  void End(const grpc::Status& status, bool now) {
    std::unique_lock<std::mutex> lock(mu_);
    if (finished_) return;
    if (!closing_ && !gone_) end_status_ = status;
    closing_ = true;
    gone_ = gone_ || now;
    if (gone_ || !pending_) FinishIfIdle(lock);
  }

 private:
  // With the lock held and no write in flight: converts what is pending into the
  // message (under the lock, so the next writer's use of it is ordered after this
  // one's) and starts writing it outside the lock. Where the write is done by the time
  // StartWrite returns (its completion may run inline), goes on with the next.
  void WriteNext(std::unique_lock<std::mutex>& lock) {
    do {
      out_.Clear();
      ToProto(*pending_, &out_);
      pending_.reset();
      write_done_ = false;
      write_returned_ = false;
      lock.unlock();
      reactor_->StartWrite(&out_);
      lock.lock();
      write_returned_ = true;
      if (!write_done_) return;  // WriteDone goes on
    } while (!gone_ && pending_);
    FinishIfIdle(lock);
  }
  void FinishIfIdle(std::unique_lock<std::mutex>& lock) {
    if (writing() || finished_ || !closing_) return;
    finished_ = true;
    const grpc::Status status = end_status_;
    lock.unlock();
    reactor_->Finish(status);
  }

  // A write is in flight (out_ is its message) until gRPC has said it is done and its
  // StartWrite has returned; with no write yet, both hold.
  bool writing() const { return !write_done_ || !write_returned_; }

  mutable std::mutex mu_;
  Reactor* const reactor_;
  std::optional<T> pending_;
  bool write_done_ = true;
  bool write_returned_ = true;
  bool closing_ = false;   // takes nothing more; finishes once pending_ is written
  bool gone_ = false;      // the reader is gone: finishes after the write in flight
  bool finished_ = false;  // Finish called: the reactor may be gone
  grpc::Status end_status_;
  Proto out_;
};

template <typename T, typename Proto>
class PushStream final : public grpc::ServerWriteReactor<Proto> {
 public:
  PushStream() : sink_(std::make_shared<PushSink<T, Proto>>(this)) {}
  const std::shared_ptr<PushSink<T, Proto>>& sink() const { return sink_; }
  void OnWriteDone(bool ok) override { sink_->WriteDone(ok); }
  void OnCancel() override { sink_->End(grpc::Status(grpc::StatusCode::CANCELLED, "the reader went away"), true); }
  void OnDone() override { delete this; }
  // Its user's lease on it (StreamQuota), given back when it is done.
  void Hold(std::unique_ptr<StreamQuota::Lease> lease) { lease_ = std::move(lease); }
  // A stream refused before it starts.
  static PushStream* Refused(const Status& why) {
    auto* s = new PushStream();
    s->sink_->End(ToGrpc(why), true);
    return s;
  }

 private:
  const std::shared_ptr<PushSink<T, Proto>> sink_;
  std::unique_ptr<StreamQuota::Lease> lease_;
};

using WatchStream = PushStream<model::JobSummary, v1::JobInfo>;
using SubmitStream = PushStream<SubmitProgress, v1::SubmitProgress>;

// A SubmitAndWatch stream as the job's watch: each summary pushed goes after the
// acceptance (or folded into it, while that is still being written).
class SubmitWatchSink final : public JobWatchSink {
 public:
  explicit SubmitWatchSink(std::shared_ptr<PushSink<SubmitProgress, v1::SubmitProgress>> stream)
      : stream_(std::move(stream)) {}
  bool Push(model::JobSummary& summary) override {
    SubmitProgress p;
    p.job = std::move(summary);
    if (stream_->Push(p)) return true;
    summary = std::move(*p.job);
    return false;
  }
  void Close(const Status& status) override { stream_->Close(status); }
  bool open() const override { return stream_->open(); }

 private:
  const std::shared_ptr<PushSink<SubmitProgress, v1::SubmitProgress>> stream_;
};

// What a node's session carries to it: assignments, and the acknowledgement of the
// newest report applied. Reports are applied in order and a failed one ends the
// session, so an acknowledgement answers every report up to its number: one folded
// away is answered by the next.
struct ReportAck {
  uint64_t seq = 0;
  bool reregister = false;
  int64_t interval_us = 0;
};
struct SessionOut {
  std::optional<model::AssignmentBatch> batch;
  std::optional<ReportAck> ack;
};
void Fold(SessionOut&& from, SessionOut& into) {
  if (from.batch) {
    if (into.batch) {
      Fold(std::move(*from.batch), *into.batch);
    } else {
      into.batch = std::move(from.batch);
    }
  }
  if (from.ack) into.ack = from.ack;
}
void ToProto(const SessionOut& o, v1::CoordinatorMessage* out) {
  if (o.batch) ToProto(*o.batch, out->mutable_batch());
  if (o.ack) {
    v1::ReportAck* a = out->mutable_ack();
    a->set_seq(o.ack->seq);
    a->set_reregister(o.ack->reregister);
    a->set_heartbeat_interval_us(o.ack->interval_us);
  }
}

// SubmitAndWatch's workers, for jobs too large to store on a callback thread, and how
// many such submissions may wait for one (each holds its spec, up to 16 MiB).
constexpr int kSubmissionWorkers = 4;
constexpr size_t kMaxSubmissionsWaiting = 64;

// A few threads that run work handed to them in turn, off gRPC's threads; at most
// `max_waiting` pieces of work wait.
class Workers {
 public:
  Workers(int threads, size_t max_waiting) : max_waiting_(max_waiting) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Serve(); });
  }
  ~Workers() { Stop(); }
  // False, and nothing queued, when max_waiting already wait (or it is stopping).
  bool Run(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ || queue_.size() >= max_waiting_) return false;
      queue_.push_back(std::move(work));
    }
    cv_.notify_one();
    return true;
  }
  // Runs what was handed over, then joins the threads.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Serve() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      lock.lock();
    }
  }

  const size_t max_waiting_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The open pushed streams, to end them first at shutdown.
class StreamRegistry {
 public:
  template <typename Sink>
  void Add(const std::shared_ptr<Sink>& sink) {
    std::lock_guard<std::mutex> lock(mu_);
    if (++adds_ % 1024 == 0) {
      std::erase_if(streams_, [](const Entry& e) { return !e.open(); });
    }
    std::weak_ptr<Sink> weak = sink;
    streams_.push_back(Entry{[weak] {
                               std::shared_ptr<Sink> s = weak.lock();
                               return s && s->open();
                             },
                             [weak] {
                               if (std::shared_ptr<Sink> s = weak.lock()) {
                                 s->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down"),
                                        true);
                               }
                             }});
  }
  void EndAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry& e : streams_) e.end();
    streams_.clear();
  }

 private:
  struct Entry {
    std::function<bool()> open;
    std::function<void()> end;
  };
  std::mutex mu_;
  std::vector<Entry> streams_;
  uint64_t adds_ = 0;
};

namespace {

// The caller, or the refusal as the call's answer.
#define MERIDIAN_ADMIT(caller, ctx, need, method)                       \
  StatusOr<model::Caller> caller##_or = gate_.Admit(ctx, need, method); \
  if (!caller##_or.ok()) return ToGrpc(caller##_or.status());           \
  [[maybe_unused]] const model::Caller& caller = *caller##_or

// A check after admission: refused (and logged) unless `status` is OK.
#define MERIDIAN_CHECK_CALL(ctx, method, expr)   \
  do {                                           \
    Status check_ = (expr);                      \
    if (!check_.ok()) {                          \
      gate_.Refused(ctx, method, check_);        \
      return ToGrpc(check_);                     \
    }                                            \
  } while (false)

class JobServiceImpl final
    : public v1::JobService::WithCallbackMethod_SubmitAndWatch<
          v1::JobService::WithCallbackMethod_Watch<v1::JobService::Service>> {
 public:
  JobServiceImpl(JobApi& api, const Gate& gate, const std::atomic<bool>& stopping, StreamRegistry& streams,
                 Workers& workers)
      : api_(api),
        gate_(gate),
        stopping_(stopping),
        streams_(streams),
        workers_(workers),
        quota_(std::make_shared<StreamQuota>()) {}

  grpc::Status Submit(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req, v1::SubmitJobResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kSubmit, "JobService.Submit");
    // A user's job is their tenant's; an admin's is the tenant its spec names (an
    // operator acting for a tenant), else "default".
    StatusOr<SubmitResult> r = api_.Submit(req->spec_yaml(), req->spec_name(), Gate::TenantScope(caller));
    if (r.status().code() == StatusCode::kPermissionDenied) gate_.Refused(ctx, "JobService.Submit", r.status());
    if (!r.ok()) return ToGrpc(r.status());
    ToProto(*r, resp);
    return grpc::Status::OK;
  }

  // Submit, then the job's watch on the same stream: the client learns its job ended
  // without a second call. A small job is stored and placed here, on gRPC's callback
  // thread, as a unary Submit is on a synchronous one; a large one (it takes seconds
  // to store, and callback threads serve the agents' heartbeats) by a worker.
  grpc::ServerWriteReactor<v1::SubmitProgress>* SubmitAndWatch(grpc::CallbackServerContext* ctx,
                                                              const v1::SubmitJobRequest* req) override {
    StatusOr<model::Caller> caller = gate_.Admit(ctx, Need::kSubmit, "JobService.SubmitAndWatch");
    if (!caller.ok()) return SubmitStream::Refused(caller.status());
    if (stopping_.load()) return SubmitStream::Refused(UnavailableError("the coordinator is shutting down"));
    StatusOr<std::unique_ptr<StreamQuota::Lease>> lease = TakeStream(ctx, *caller, "JobService.SubmitAndWatch");
    if (!lease.ok()) return SubmitStream::Refused(lease.status());
    auto* stream = new SubmitStream();
    stream->Hold(std::move(*lease));
    streams_.Add(stream->sink());
    const std::string tenant = Gate::TenantScope(*caller);
    if (req->spec_yaml().size() <= kInPlaceSpecBytes) {
      StatusOr<std::optional<SubmitResult>> r =
          api_.SubmitSmall(req->spec_yaml(), req->spec_name(), tenant, kInPlaceTasks);
      if (!r.ok() || r->has_value()) {
        if (r.status().code() == StatusCode::kPermissionDenied) gate_.Refused(ctx, "JobService.SubmitAndWatch", r.status());
        Accepted(stream->sink(), r.ok() ? StatusOr<SubmitResult>(std::move(**r)) : r.status());
        return stream;
      }
    }
    // The call's request and context may be gone before the work is done (the client
    // gave up, the coordinator stops): the work keeps what it needs of them.
    const bool queued = workers_.Run([this, spec = req->spec_yaml(), name = req->spec_name(), sink = stream->sink(),
                                      tenant, who = Gate::Who(ctx)] {
      if (!sink->open()) return;  // the client gave up before it began
      StatusOr<SubmitResult> r = api_.Submit(spec, name, tenant);
      if (r.status().code() == StatusCode::kPermissionDenied) Gate::Refused(who, "JobService.SubmitAndWatch", r.status());
      Accepted(sink, std::move(r));
    });
    if (!queued) {
      stream->sink()->Close(ResourceExhaustedError(fmt::format(
          "the coordinator has {} large submissions waiting to be stored; submit again shortly", kMaxSubmissionsWaiting)));
    }
    return stream;
  }

  grpc::Status Get(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::JobInfo* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "JobService.Get");
    MERIDIAN_CHECK_CALL(ctx, "JobService.Get", gate_.CheckTenant(caller, api_, req->job_id()));
    const uint32_t max_tasks = !req->include_tasks() ? 0 : req->max_tasks() == 0 ? kDefaultTasksPerPage : req->max_tasks();
    StatusOr<model::JobView> v = api_.GetJob(req->job_id(), req->first_task(), max_tasks);
    if (!v.ok()) return ToGrpc(v.status());
    ToProto(*v, resp);
    return grpc::Status::OK;
  }

  grpc::Status List(grpc::ServerContext* ctx, const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "JobService.List");
    if (req->name_prefix().size() > kMaxJobNamePrefixBytes) {
      return ToGrpc(InvalidArgumentError(fmt::format("name_prefix: {} bytes; at most {}", req->name_prefix().size(),
                                                     kMaxJobNamePrefixBytes)));
    }
    const JobFilter filter{Gate::TenantScope(caller), req->name_prefix(), req->live_only()};
    for (const model::JobSummary& s : api_.ListJobs(req->limit(), filter)) ToProto(s, resp->add_jobs());
    return grpc::Status::OK;
  }

  grpc::Status Cancel(grpc::ServerContext* ctx, const v1::CancelJobRequest* req, v1::JobInfo* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kSubmit, "JobService.Cancel");
    MERIDIAN_CHECK_CALL(ctx, "JobService.Cancel", gate_.CheckTenant(caller, api_, req->job_id()));
    StatusOr<model::JobSummary> s = api_.CancelJob(req->job_id());
    if (!s.ok()) return ToGrpc(s.status());
    ToProto(*s, resp);
    return grpc::Status::OK;
  }

  grpc::Status Delete(grpc::ServerContext* ctx, const v1::DeleteJobRequest* req, v1::JobInfo* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kSubmit, "JobService.Delete");
    MERIDIAN_CHECK_CALL(ctx, "JobService.Delete", gate_.CheckTenant(caller, api_, req->job_id()));
    StatusOr<model::JobSummary> s = api_.DeleteJob(req->job_id());
    if (!s.ok()) return ToGrpc(s.status());
    ToProto(*s, resp);
    return grpc::Status::OK;
  }

  grpc::Status Logs(grpc::ServerContext* ctx, const v1::GetLogsRequest* req, v1::GetLogsResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "JobService.Logs");
    MERIDIAN_CHECK_CALL(ctx, "JobService.Logs", gate_.CheckTenant(caller, api_, req->job_id()));
    StatusOr<LogPage> page = api_.Logs(req->job_id(), req->task(), {req->first_task(), req->first_attempt()});
    if (!page.ok()) return ToGrpc(page.status());
    for (const TaskLog& l : page->logs) ToProto(l, resp->add_logs());
    if (page->next) {
      resp->set_more(true);
      resp->set_next_task(page->next->task);
      resp->set_next_attempt(page->next->attempt);
    }
    return grpc::Status::OK;
  }

  grpc::Status Plan(grpc::ServerContext* ctx, const v1::PlanJobRequest* req, v1::PlanJobResponse* resp) override {
    // Whoever may submit may ask where a job would run (it reads their datasets).
    MERIDIAN_ADMIT(caller, ctx, Need::kSubmit, "JobService.Plan");
    StatusOr<model::PlanReport> r = api_.Plan(req->job().spec_yaml(), req->job().spec_name(),
                                              Gate::TenantScope(caller), req->order(), req->seed());
    if (r.status().code() == StatusCode::kPermissionDenied) gate_.Refused(ctx, "JobService.Plan", r.status());
    if (!r.ok()) return ToGrpc(r.status());
    ToProto(*r, resp);
    return grpc::Status::OK;
  }

  grpc::Status GetSpec(grpc::ServerContext* ctx, const v1::GetJobSpecRequest* req, v1::JobSpec* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "JobService.GetSpec");
    MERIDIAN_CHECK_CALL(ctx, "JobService.GetSpec", gate_.CheckTenant(caller, api_, req->job_id()));
    StatusOr<std::pair<std::string, std::string>> spec = api_.JobSpec(req->job_id());
    if (!spec.ok()) return ToGrpc(spec.status());
    resp->set_spec_yaml(std::move(spec->first));
    resp->set_spec_name(std::move(spec->second));
    return grpc::Status::OK;
  }

  // Pushed by the coordinator as the job changes: no thread waits on a watch.
  grpc::ServerWriteReactor<v1::JobInfo>* Watch(grpc::CallbackServerContext* ctx,
                                              const v1::WatchJobRequest* req) override {
    StatusOr<model::Caller> caller = gate_.Admit(ctx, Need::kView, "JobService.Watch");
    if (!caller.ok()) return WatchStream::Refused(caller.status());
    if (Status own = gate_.CheckTenant(*caller, api_, req->job_id()); !own.ok()) {
      gate_.Refused(ctx, "JobService.Watch", own);
      return WatchStream::Refused(own);
    }
    if (stopping_.load()) return WatchStream::Refused(UnavailableError("the coordinator is shutting down"));
    StatusOr<std::unique_ptr<StreamQuota::Lease>> lease = TakeStream(ctx, *caller, "JobService.Watch");
    if (!lease.ok()) return WatchStream::Refused(lease.status());
    auto* stream = new WatchStream();
    stream->Hold(std::move(*lease));
    streams_.Add(stream->sink());
    if (Status s = api_.WatchJob(req->job_id(), req->after_version(), stream->sink()); !s.ok()) {
      stream->sink()->End(ToGrpc(s), true);
    }
    return stream;
  }

 private:
  // The caller's lease on one more open stream; refused (and logged) when it has the
  // most a user may. An insecure coordinator's callers are nobody in particular: no
  // bound.
  StatusOr<std::unique_ptr<StreamQuota::Lease>> TakeStream(grpc::CallbackServerContext* ctx,
                                                           const model::Caller& caller, const char* method) {
    if (caller.insecure) return std::unique_ptr<StreamQuota::Lease>();
    std::unique_ptr<StreamQuota::Lease> lease = StreamQuota::Take(quota_, caller.user);
    if (lease != nullptr) return lease;
    Status refused = ResourceExhaustedError(
        fmt::format("{} has {} watches open (Watch and SubmitAndWatch), the most one user may; end one first",
                    caller.Describe(), kMaxStreamsPerUser));
    gate_.Refused(ctx, method, refused);
    return refused;
  }

  // What SubmitAndWatch does on the callback thread: a spec this small, of a job of
  // this many tasks at most (a few milliseconds to read and store).
  static constexpr size_t kInPlaceSpecBytes = 64 << 10;
  static constexpr int64_t kInPlaceTasks = 256;

  // SubmitAndWatch, once the submission is decided: the acceptance, then the job's
  // summaries; or the refusal.
  void Accepted(const std::shared_ptr<PushSink<SubmitProgress, v1::SubmitProgress>>& sink,
                StatusOr<SubmitResult> r) {
    if (!r.ok()) {
      sink->Close(r.status());
      return;
    }
    const uint64_t id = r->job_id;
    SubmitProgress accepted;
    accepted.accepted = std::move(*r);
    sink->Push(accepted);
    if (Status s = api_.WatchJob(id, 0, std::make_shared<SubmitWatchSink>(sink)); !s.ok()) {
      sink->Close(s);  // deleted already (by its owner, or retention): after the acceptance
    }
  }

  JobApi& api_;
  const Gate& gate_;
  const std::atomic<bool>& stopping_;
  StreamRegistry& streams_;
  Workers& workers_;
  const std::shared_ptr<StreamQuota> quota_;
};

}  // namespace

namespace {

// An agent's assignment stream and its heartbeats run on gRPC's callback API: no
// thread per agent, and no synchronous thread pool that thousands of agents
// heartbeating at once would make grow and shrink. Join and Register, rare, are
// synchronous handlers.
class NodeServiceImpl final
    : public v1::NodeService::WithCallbackMethod_Heartbeat<
          v1::NodeService::WithCallbackMethod_Session<v1::NodeService::Service>> {
 public:
  NodeServiceImpl(NodeApi& api, AuthApi& auth, const Gate& gate, const std::atomic<bool>& stopping,
                  StreamRegistry& streams)
      : api_(api), auth_(auth), gate_(gate), stopping_(stopping), streams_(streams) {}

  grpc::Status Join(grpc::ServerContext* ctx, const v1::JoinRequest* req, v1::JoinResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kJoin, "NodeService.Join");
    if (caller.insecure) {
      return ToGrpc(FailedPreconditionError("this coordinator runs without TLS: there are no certificates to join with"));
    }
    StatusOr<std::pair<std::string, std::string>> r = auth_.Join(req->token(), req->node(), req->csr_pem());
    if (!r.ok()) {
      gate_.Refused(ctx, fmt::format("NodeService.Join of node '{}'", req->node()), r.status());
      return ToGrpc(r.status());
    }
    resp->set_cert_pem(r->first);
    resp->set_ca_pem(r->second);
    return grpc::Status::OK;
  }

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req, v1::RegisterResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kNode, "NodeService.Register");
    if (!caller.insecure && req->node().name() != caller.node) {
      MERIDIAN_CHECK_CALL(ctx, "NodeService.Register",
                          PermissionDeniedError(fmt::format("the certificate of node {} cannot register node '{}'",
                                                            caller.node, req->node().name())));
    }
    StatusOr<model::RegistrationReply> r = api_.Register(FromProto(*req));
    if (!r.ok()) return ToGrpc(r.status());
    ToProto(*r, resp);
    return grpc::Status::OK;
  }

  grpc::Status Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* req, v1::LeaveResponse*) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kNode, "NodeService.Leave");
    if (Status own = OwnNode(caller, req->node_id()); !own.ok()) {
      gate_.Refused(ctx, "NodeService.Leave", own);
      return ToGrpc(FailedPreconditionError(own.message()));
    }
    return ToGrpc(api_.Leave(req->node_id(), req->session()));
  }

  grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>* Session(
      grpc::CallbackServerContext* ctx) override {
    return new SessionStream(*this, ctx);
  }

  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* req,
                                      v1::HeartbeatResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(Beat(ctx, req, resp));
    return reactor;
  }

 private:
  // Runs on a gRPC callback thread: it takes the coordinator's lock for as long as
  // applying the reports takes, and never waits for anything else.
  grpc::Status Beat(grpc::CallbackServerContext* ctx, const v1::HeartbeatRequest* req, v1::HeartbeatResponse* resp) {
    MERIDIAN_ADMIT(caller, ctx, Need::kNode, "NodeService.Heartbeat");
    if (Status own = OwnNode(caller, req->node_id()); !own.ok()) {
      // An id from before a coordinator restart, or another node's: nothing of it is
      // applied, and the agent registers again (as when its session is unknown).
      gate_.Refused(ctx, "NodeService.Heartbeat", own);
      resp->set_reregister(true);
      return grpc::Status::OK;
    }
    StatusOr<bool> reregister = api_.Heartbeat(FromProto(*req));
    if (reregister.status().code() == StatusCode::kPermissionDenied) {
      gate_.Refused(ctx, "NodeService.Heartbeat", reregister.status());
    }
    if (!reregister.ok()) return ToGrpc(reregister.status());
    resp->set_reregister(*reregister);
    resp->set_heartbeat_interval_us(api_.HeartbeatIntervalUs());
    return grpc::Status::OK;
  }

  // A node's session: its first message opens the assignment stream of the node and
  // session it names (admitted once, for that node only); each later message is a
  // report of that node and session, applied as a Heartbeat and acknowledged on the
  // stream once durable. Reports are read one at a time, each on a gRPC callback
  // thread as a unary Heartbeat is: the next is read once the last is applied. Any
  // refusal ends the session with it.
  class SessionStream final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage> {
   public:
    using Sink = PushSink<SessionOut, v1::CoordinatorMessage, SessionStream>;
    SessionStream(NodeServiceImpl& service, grpc::CallbackServerContext* ctx)
        : service_(service), ctx_(ctx), sink_(std::make_shared<Sink>(this)) {
      std::lock_guard<std::mutex> lock(mu_);  // publishes the fields (PushSink's constructor says why)
      StartRead(&in_);
    }
    void OnReadDone(bool ok) override {
      // Reads are one at a time, but each may be answered on another thread.
      std::lock_guard<std::mutex> lock(mu_);
      if (!ok) {  // the agent closed its side or went away: what is pending is written
        sink_->End(grpc::Status::OK, false);
        return;
      }
      if (Status s = opened_ ? Report() : Open(); !s.ok()) {
        sink_->End(ToGrpc(s), false);
        return;
      }
      in_.Clear();
      StartRead(&in_);
    }
    void OnWriteDone(bool ok) override { sink_->WriteDone(ok); }
    void OnCancel() override { sink_->End(grpc::Status(grpc::StatusCode::CANCELLED, "the agent went away"), true); }
    void OnDone() override { delete this; }

   private:
    // The coordinator's pushes of assignments, as this session's messages.
    class Assignments final : public AssignmentSink {
     public:
      explicit Assignments(std::shared_ptr<Sink> session) : session_(std::move(session)) {}
      bool Push(model::AssignmentBatch& batch) override {
        SessionOut out;
        out.batch = std::move(batch);
        if (session_->Push(out)) return true;
        batch = std::move(*out.batch);
        return false;
      }
      void Close(const Status& status) override { session_->Close(status); }
      bool open() const override { return session_->open(); }

     private:
      const std::shared_ptr<Sink> session_;
    };

    Status Open() {
      if (in_.kind_case() != v1::AgentMessage::kOpen) {
        return InvalidArgumentError("a session's first message opens it, naming its node and session");
      }
      node_id_ = in_.open().node_id();
      session_ = in_.open().session();
      MERIDIAN_RETURN_IF_ERROR(service_.Admitted(ctx_, node_id_));
      if (service_.stopping_.load()) return UnavailableError("the coordinator is shutting down");
      opened_ = true;
      service_.streams_.Add(sink_);
      return service_.api_.ConnectAssignments(node_id_, session_, std::make_shared<Assignments>(sink_));
    }
    Status Report() {
      if (in_.kind_case() != v1::AgentMessage::kReport) {
        return InvalidArgumentError("a session is opened once: each later message is a report");
      }
      const v1::HeartbeatRequest& report = in_.report();
      if (report.node_id() != node_id_ || report.session() != session_) {
        Status s = FailedPreconditionError(fmt::format("a report of node id {} session {} on the session of node id {} session {}",
                                                       report.node_id(), report.session(), node_id_, session_));
        service_.gate_.Refused(ctx_, "NodeService.Session", s);
        return s;
      }
      StatusOr<bool> reregister = service_.api_.Heartbeat(FromProto(report));
      if (!reregister.ok()) {
        if (reregister.status().code() == StatusCode::kPermissionDenied) {
          service_.gate_.Refused(ctx_, "NodeService.Session", reregister.status());
        }
        return reregister.status();
      }
      SessionOut out;
      out.ack = ReportAck{in_.seq(), *reregister, service_.api_.HeartbeatIntervalUs()};
      sink_->Push(out);  // false: the session is ending; the agent reports again on its next
      return OkStatus();
    }

    NodeServiceImpl& service_;
    grpc::CallbackServerContext* const ctx_;
    const std::shared_ptr<Sink> sink_;
    std::mutex mu_;  // held by each read's reaction, for what follows
    v1::AgentMessage in_;
    bool opened_ = false;
    uint32_t node_id_ = 0;
    uint64_t session_ = 0;
  };

  // Whether a node's certificate may open node `node_id`'s session (logged if not).
  Status Admitted(grpc::CallbackServerContext* ctx, uint32_t node_id) {
    StatusOr<model::Caller> caller = gate_.Admit(ctx, Need::kNode, "NodeService.Session");
    if (!caller.ok()) return caller.status();
    if (Status own = OwnNode(*caller, node_id); !own.ok()) {
      gate_.Refused(ctx, "NodeService.Session", own);
      return FailedPreconditionError(own.message() + "; register again");
    }
    return OkStatus();
  }

  // A node's certificate speaks for that node's id only. (After a coordinator restart
  // ids are given anew: an agent that has not registered again holds a stale one.)
  Status OwnNode(const model::Caller& caller, uint32_t node_id) {
    if (caller.insecure) return OkStatus();
    StatusOr<std::string> name = api_.NodeName(node_id);
    if (name.ok() && *name == caller.node) return OkStatus();
    return PermissionDeniedError(fmt::format("node {} cannot act for node id {} ({})", caller.node, node_id,
                                             name.ok() ? *name : "no such node"));
  }

  NodeApi& api_;
  AuthApi& auth_;
  const Gate& gate_;
  const std::atomic<bool>& stopping_;
  StreamRegistry& streams_;
};

class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  AdminServiceImpl(AdminApi& api, AuthApi& auth, const Gate& gate) : api_(api), auth_(auth), gate_(gate) {}

  grpc::Status ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest*, v1::ListNodesResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "AdminService.ListNodes");
    for (const model::NodeView& n : api_.ListNodes()) ToProto(n, resp->add_nodes());
    return grpc::Status::OK;
  }

  grpc::Status ListTenants(grpc::ServerContext* ctx, const v1::ListTenantsRequest*,
                           v1::ListTenantsResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "AdminService.ListTenants");
    const std::string scope = Gate::TenantScope(caller);
    for (const model::TenantView& t : api_.ListTenants()) {
      if (!scope.empty() && t.name != scope) continue;
      ToProto(t, resp->add_tenants());
    }
    return grpc::Status::OK;
  }

  grpc::Status CreateToken(grpc::ServerContext* ctx, const v1::CreateTokenRequest* req,
                           v1::CreateTokenResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kAdmin, "AdminService.CreateToken");
    if (caller.insecure) return ToGrpc(FailedPreconditionError("this coordinator runs without TLS: it takes no tokens"));
    std::optional<model::Role> role = model::ParseRole(req->role());
    if (!role) {
      return ToGrpc(InvalidArgumentError(
          fmt::format("role '{}': expected admin, submitter, viewer or agent", req->role())));
    }
    StatusOr<NewToken> t = auth_.CreateToken(req->user(), req->tenant(), *role, req->ttl_us());
    if (!t.ok()) return ToGrpc(t.status());
    ToProto(t->record, resp->mutable_token());
    resp->set_secret(t->secret);
    return grpc::Status::OK;
  }

  grpc::Status ListTokens(grpc::ServerContext* ctx, const v1::ListTokensRequest*, v1::ListTokensResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kAdmin, "AdminService.ListTokens");
    for (const model::TokenRecord& t : auth_.ListTokens()) ToProto(t, resp->add_tokens());
    return grpc::Status::OK;
  }

  grpc::Status RevokeToken(grpc::ServerContext* ctx, const v1::RevokeTokenRequest* req, v1::Token* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kAdmin, "AdminService.RevokeToken");
    StatusOr<model::TokenRecord> t = auth_.RevokeToken(req->id());
    if (!t.ok()) return ToGrpc(t.status());
    ToProto(*t, resp);
    return grpc::Status::OK;
  }

  grpc::Status WhoAmI(grpc::ServerContext* ctx, const v1::WhoAmIRequest*, v1::WhoAmIResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "AdminService.WhoAmI");
    resp->set_user(caller.insecure ? "(insecure coordinator)" : caller.user);
    resp->set_tenant(caller.tenant);
    resp->set_role(std::string(model::RoleName(caller.role)));
    const HttpEndpoints http = api_.Endpoints();
    resp->set_http_url(http.url);
    resp->set_dashboard(http.dashboard);
    return grpc::Status::OK;
  }

 private:
  AdminApi& api_;
  AuthApi& auth_;
  const Gate& gate_;
};

class ObjectServiceImpl final : public v1::ObjectService::Service {
 public:
  ObjectServiceImpl(ObjectApi& api, const Gate& gate) : api_(api), gate_(gate) {}

  grpc::Status Locate(grpc::ServerContext* ctx, const v1::LocateObjectRequest* req, v1::ObjectLocation* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "ObjectService.Locate");
    StatusOr<model::ObjectLocation> l = api_.Locate(caller, req->ref(), req->job_id(), req->task());
    if (!l.ok()) return Answer(ctx, "ObjectService.Locate", l.status());
    ToProto(*l, resp);
    return grpc::Status::OK;
  }

  grpc::Status PlacePut(grpc::ServerContext* ctx, const v1::PlacePutRequest* req, v1::ObjectReplica* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kSubmit, "ObjectService.PlacePut");
    StatusOr<model::ObjectReplica> r = api_.PlacePut(caller, req->size(), req->site());
    if (!r.ok()) return ToGrpc(r.status());
    ToProto(*r, resp);
    return grpc::Status::OK;
  }

  grpc::Status Commit(grpc::ServerContext* ctx, const v1::CommitObjectRequest* req, v1::ObjectLocation* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kSubmit, "ObjectService.Commit");
    StatusOr<model::ObjectLocation> l =
        api_.Commit(caller, req->id(), req->size(), req->node_id(), req->name(), req->receipt());
    if (!l.ok()) return Answer(ctx, "ObjectService.Commit", l.status());
    ToProto(*l, resp);
    return grpc::Status::OK;
  }

  grpc::Status Delete(grpc::ServerContext* ctx, const v1::DeleteObjectRequest* req, v1::ObjectLocation* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kSubmit, "ObjectService.Delete");
    StatusOr<model::ObjectLocation> l = api_.DeleteObject(caller, req->id());
    if (!l.ok()) return Answer(ctx, "ObjectService.Delete", l.status());
    ToProto(*l, resp);
    return grpc::Status::OK;
  }

  grpc::Status List(grpc::ServerContext* ctx, const v1::ListObjectsRequest*, v1::ListObjectsResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "ObjectService.List");
    for (const model::ObjectLocation& l : api_.ListObjects(caller)) ToProto(l, resp->add_objects());
    return grpc::Status::OK;
  }

  grpc::Status DefineDataset(grpc::ServerContext* ctx, const v1::DefineDatasetRequest* req, v1::Dataset* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kSubmit, "ObjectService.DefineDataset");
    std::vector<model::HeldObject> shards;
    for (const v1::HeldObject& o : req->shards()) shards.push_back(FromProto(o));
    StatusOr<model::DatasetView> d = api_.DefineDataset(caller, req->name(), shards);
    if (!d.ok()) return Answer(ctx, "ObjectService.DefineDataset", d.status());
    ToProto(*d, resp);
    return grpc::Status::OK;
  }

  grpc::Status GetDataset(grpc::ServerContext* ctx, const v1::GetDatasetRequest* req, v1::Dataset* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "ObjectService.GetDataset");
    StatusOr<model::DatasetView> d = api_.GetDataset(caller, req->name());
    if (!d.ok()) return Answer(ctx, "ObjectService.GetDataset", d.status());
    ToProto(*d, resp);
    return grpc::Status::OK;
  }

  grpc::Status ListDatasets(grpc::ServerContext* ctx, const v1::ListDatasetsRequest*,
                            v1::ListDatasetsResponse* resp) override {
    MERIDIAN_ADMIT(caller, ctx, Need::kView, "ObjectService.ListDatasets");
    for (const model::DatasetView& d : api_.ListDatasets(caller)) ToProto(d, resp->add_datasets());
    return grpc::Status::OK;
  }

 private:
  // An error as the call's answer; a refusal by tenant goes to the audit log too.
  grpc::Status Answer(grpc::ServerContext* ctx, std::string_view method, const Status& s) const {
    if (s.code() == StatusCode::kPermissionDenied) gate_.Refused(ctx, method, s);
    return ToGrpc(s);
  }

  ObjectApi& api_;
  const Gate& gate_;
};

bool IsLoopback(const std::string& address) {
  return address.rfind("127.", 0) == 0 || address.rfind("localhost:", 0) == 0 || address.rfind("[::1]:", 0) == 0;
}

}  // namespace

StatusOr<std::unique_ptr<Server>> Server::Start(const std::string& address, JobApi& jobs, NodeApi& nodes,
                                                AdminApi& admin, ObjectApi& objects, AuthApi& auth,
                                                const ServerSecurity& security) {
  const bool secure = security.tls.enabled();
  if (!secure && !security.insecure) {
    return FailedPreconditionError(fmt::format(
        "the coordinator would listen on {} without TLS; give it the cluster's certificates, or allow that "
        "explicitly (--insecure) on a machine you trust",
        address));
  }
  if (!secure && !IsLoopback(address)) {
    MERIDIAN_LOG_WARN("INSECURE: the coordinator listens on {} without TLS or authentication: anyone who reaches it "
                      "can run commands on every node",
                      address);
  }
  std::unique_ptr<Server> s(new Server());
  s->gate_ = std::make_unique<Gate>(auth, secure);
  s->object_service_ = std::make_unique<ObjectServiceImpl>(objects, *s->gate_);
  s->streams_ = std::make_unique<StreamRegistry>();
  // Large submissions (SubmitAndWatch) stored at once; a few more wait their turn.
  s->workers_ = std::make_unique<Workers>(kSubmissionWorkers, kMaxSubmissionsWaiting);
  s->job_service_ = std::make_unique<JobServiceImpl>(jobs, *s->gate_, s->stopping_, *s->streams_, *s->workers_);
  s->node_service_ = std::make_unique<NodeServiceImpl>(nodes, auth, *s->gate_, s->stopping_, *s->streams_);
  s->admin_service_ = std::make_unique<AdminServiceImpl>(admin, auth, *s->gate_);
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (secure) {
    // Certificates are asked for and checked when sent; only NodeService.Join goes on
    // without one (the gate refuses every other call).
    grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = security.tls.ca_pem;
    ssl.pem_key_cert_pairs.push_back({security.tls.key_pem, security.tls.cert_pem});
    creds = grpc::SslServerCredentials(ssl);
    creds->SetAuthMetadataProcessor(std::make_shared<CallHeaderGate>(auth));
  }
  builder.AddListeningPort(address, creds, &s->port_);
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(kMaxResponseBytes);
  // Keep polling threads around: with gRPC's defaults (1 to 2 pollers) every call that
  // finds them busy starts a thread and ends one, a large share of a call's latency.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 4);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 64);
  builder.AddChannelArgument("grpc.optimization_target", "latency");
  // No bandwidth probe (a ping after data arrives): thousands of agents' small
  // heartbeats would each cost a ping round trip more.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // Our clients ping every 10 s while a call is open (ChannelOptions::keepalive_us), a
  // watch of a quiet job's included. gRPC's default lets a server take pings with no
  // data between only 5 minutes apart, and ends the connection on the third sooner one
  // (GOAWAY too_many_pings): such a watch failed with UNAVAILABLE. Pings 5 s apart are
  // taken, also between calls (a watch that ends and the next one); a client pinging
  // faster still gets its GOAWAY.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Connections that prove nothing are not kept (ServerSecurity).
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(std::clamp<int64_t>(security.handshake_timeout_ms, 1, INT32_MAX)));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(std::clamp<int64_t>(security.idle_timeout_ms, 1, INT32_MAX)));
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
  // Streams that wait on nothing but the coordinator end first, so the server need
  // not wait for them.
  streams_->EndAll();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // Submissions under way finish (their streams are ended: nobody hears of them, as
  // with a unary Submit cut off); those not begun are dropped.
  workers_->Stop();
}

}  // namespace meridian::rpc
