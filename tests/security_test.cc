// The attacks of issue 12 against a real cluster (`meridian up`: a coordinator and
// four agents over loopback, with the CA, certificates and tokens it makes): each is
// refused with a clear error and changes nothing in the coordinator's SQLite store,
// compared table by table before and after.
#include <fcntl.h>
#include <openssl/ssl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "local_cluster.h"
#include "meridian/v1/meridian.grpc.pb.h"
#include "objects/transfer.h"
#include "rpc/convert.h"
#include "rpc/node_client.h"
#include "rpc/server.h"
#include "security/pki.h"
#include "testing/http2_flood.h"
#include "testing/raw_sockets.h"

namespace meridian::testing {
namespace {

constexpr int64_t kDayUs = int64_t{86'400} * 1'000'000;

// Every row of every table of the store, in order: what "changes nothing" compares.
std::string DumpStore(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return "cannot open " + path;
  std::vector<std::string> tables;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name", -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
  sqlite3_finalize(st);
  std::string out;
  for (const std::string& t : tables) {
    out += "[" + t + "]\n";
    sqlite3_prepare_v2(db, ("SELECT * FROM " + t + " ORDER BY 1, 2").c_str(), -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const unsigned char* v = sqlite3_column_text(st, c);
        out += (c ? "|" : "") + std::string(v ? reinterpret_cast<const char*>(v) : "NULL");
      }
      out += "\n";
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<LocalCluster>(SourceDir() + "/tests/fleets/local-three-sites.yaml");
    ASSERT_TRUE(cluster_->Up());
    StatusOr<rpc::ChannelSecurity> admin = client::LoadClusterCredentials(cluster_->dir());
    ASSERT_TRUE(admin.ok()) << admin.status().ToString();
    admin_ = *admin;
  }

  std::string Store() const { return DumpStore(cluster_->dir() + "/state/state.db"); }

  // A client with the cluster's client certificate and `token`.
  client::Client As(const std::string& token) const {
    rpc::ChannelSecurity s = admin_;
    s.token = token;
    return client::Client(cluster_->address(), s, 5'000'000);
  }

  // Node `name`'s own credentials, as its agent keeps them (what an attacker who took
  // that machine holds).
  security::TlsCredentials NodeTls(const std::string& name) const {
    const std::string dir = cluster_->dir() + "/work/" + name + "/tls";
    return {ReadFile(dir + "/ca.crt") + "\n", ReadFile(dir + "/node.crt") + "\n", ReadFile(dir + "/node.key") + "\n"};
  }

  std::unique_ptr<LocalCluster> cluster_;
  rpc::ChannelSecurity admin_;
};

constexpr const char* kJob = "name: j\ntasks:\n  - {name: a, kernel: sum}\n";
// A job that runs for a minute on one core.
constexpr const char* kLongJob = "name: long\ntasks:\n  - {name: wait, command: [sleep, '60'], resources: {cpu: 1}}\n";

TEST_F(SecurityTest, NoTokenARevokedOneOrAViewersSubmitsNothing) {
  client::Client admin = As(admin_.token);
  StatusOr<rpc::NewToken> viewer = admin.CreateToken("val", "team-v", model::Role::kViewer, 0);
  StatusOr<rpc::NewToken> revoked = admin.CreateToken("rex", "team-r", model::Role::kSubmitter, 0);
  ASSERT_TRUE(viewer.ok() && revoked.ok());
  ASSERT_TRUE(admin.RevokeToken(revoked->record.id).ok());
  const std::string before = Store();

  StatusOr<rpc::SubmitResult> none = As("").Submit(kJob, "j.yaml");
  EXPECT_EQ(none.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(none.status().message().find("the call carries no token"), std::string::npos) << none.status().ToString();

  StatusOr<rpc::SubmitResult> old = As(revoked->secret).Submit(kJob, "j.yaml");
  EXPECT_EQ(old.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(old.status().message(), "token " + revoked->record.id + " was revoked");

  StatusOr<rpc::SubmitResult> look = As(viewer->secret).Submit(kJob, "j.yaml");
  EXPECT_EQ(look.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(look.status().message(), "user val (viewer, tenant team-v) may not submit or change");
  EXPECT_EQ(As(viewer->secret).CreateToken("val", "team-v", model::Role::kAdmin, 0).status().code(),
            StatusCode::kPermissionDenied);
  // Planning reads the tenant's datasets: a submitter's right too.
  EXPECT_EQ(As(viewer->secret).Plan(kJob, "j.yaml", "", 1).status().message(),
            "user val (viewer, tenant team-v) may not submit or change");

  // SubmitAndWatch (what `meridian run` calls) is refused alike, accepting nothing.
  auto submit_and_watch = [&](const std::string& token) {
    bool accepted = false;
    Status s = As(token)
                   .SubmitAndWatch(kJob, "j.yaml", [&](const rpc::SubmitResult&) { accepted = true; },
                                   [](const model::JobSummary&) { return true; })
                   .status();
    EXPECT_FALSE(accepted);
    return s;
  };
  EXPECT_EQ(submit_and_watch("").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(submit_and_watch(revoked->secret).message(), "token " + revoked->record.id + " was revoked");
  Status viewer_run = submit_and_watch(viewer->secret);
  EXPECT_EQ(viewer_run.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(viewer_run.message(), "user val (viewer, tenant team-v) may not submit or change");

  // The CLI says the same in one line and exits non-zero.
  const std::string job_file = cluster_->WriteFile("j.yaml", kJob);
  CommandResult run = Meridian({"run", job_file, "--dir", cluster_->dir(), "--token", viewer->secret});
  EXPECT_EQ(run.exit_code, 4);
  EXPECT_EQ(run.err, "meridian: user val (viewer, tenant team-v) may not submit or change\n");
  CommandResult cli = Meridian({"submit", job_file, "--dir", cluster_->dir(), "--token", viewer->secret});
  EXPECT_EQ(cli.exit_code, 4);
  EXPECT_EQ(cli.err, "meridian: user val (viewer, tenant team-v) may not submit or change\n");
  EXPECT_EQ(Store(), before);
  // Each refusal is in the coordinator's audit log, with what the caller proved.
  const std::string log = ReadFile(cluster_->dir() + "/logs/coordinator.log");
  EXPECT_NE(log.find("audit: refused JobService.Submit from ipv4:127.0.0.1:"), std::string::npos);
  EXPECT_NE(log.find("audit: refused JobService.SubmitAndWatch from ipv4:127.0.0.1:"), std::string::npos);
  EXPECT_NE(log.find("(certificate client:admin): token " + revoked->record.id + " was revoked"), std::string::npos);
}

TEST_F(SecurityTest, TenantsSeeAndChangeOnlyTheirOwnJobs) {
  client::Client admin = As(admin_.token);
  StatusOr<rpc::NewToken> alice = admin.CreateToken("alice", "team-a", model::Role::kSubmitter, 0);
  StatusOr<rpc::NewToken> bob = admin.CreateToken("bob", "team-b", model::Role::kSubmitter, 0);
  ASSERT_TRUE(alice.ok() && bob.ok());
  StatusOr<rpc::SubmitResult> job = As(alice->secret).Submit(kLongJob, "long.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(As(alice->secret).GetJob(job->job_id, false)->summary.job.tenant, "team-a");
  // Running (its agent's report stored), so that nothing but the attempts below can change the store.
  ASSERT_TRUE(WaitFor([&] { return As(alice->secret).GetJob(job->job_id, true)->tasks[0].record.status ==
                                   model::TaskStatus::kRunning; }, 30));
  const std::string before = Store();
  StatusOr<model::JobSummary> cancel = As(bob->secret).Cancel(job->job_id);
  EXPECT_EQ(cancel.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(cancel.status().message().find("is not of tenant team-b"), std::string::npos) << cancel.status().ToString();
  EXPECT_EQ(As(bob->secret).GetJob(job->job_id, false).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(As(bob->secret).ListJobs(0)->empty());
  EXPECT_EQ(As(alice->secret).ListJobs(0)->size(), 1u);
  // A spec cannot charge its job to another tenant.
  StatusOr<rpc::SubmitResult> other =
      As(bob->secret).Submit("name: x\ntenant: team-a\ntasks:\n  - {name: a, kernel: sum}\n", "x.yaml");
  EXPECT_EQ(other.status().code(), StatusCode::kPermissionDenied);
  StatusOr<model::JobSummary> other_run = As(bob->secret).SubmitAndWatch(
      "name: x\ntenant: team-a\ntasks:\n  - {name: a, kernel: sum}\n", "x.yaml", nullptr,
      [](const model::JobSummary&) { return true; });
  EXPECT_EQ(other_run.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other_run.status().message().find("your credential is of tenant 'team-b'"), std::string::npos)
      << other_run.status().ToString();
  EXPECT_EQ(Store(), before);
  // An admin acts for whichever tenant the spec names; that tenant then sees the job.
  StatusOr<rpc::SubmitResult> for_bob =
      As(admin_.token).Submit("name: y\ntenant: team-b\ntasks:\n  - {name: a, kernel: sum}\n", "y.yaml");
  ASSERT_TRUE(for_bob.ok()) << for_bob.status().ToString();
  EXPECT_EQ(As(bob->secret).GetJob(for_bob->job_id, false)->summary.job.tenant, "team-b");
  // Each sees its own tenant only.
  CommandResult mine = Meridian({"tenant", "list", "--dir", cluster_->dir(), "--token", bob->secret, "--json"});
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out.find("team-a"), std::string::npos) << mine.out;
  ASSERT_TRUE(WaitFor([&] { return As(alice->secret).Tenants()->front().tasks_running == 1; }, 20));
  StatusOr<std::vector<model::TenantView>> seen = As(alice->secret).Tenants();
  ASSERT_EQ(seen->size(), 1u);
  EXPECT_EQ(seen->front().name, "team-a");
  EXPECT_EQ(seen->front().cpu_milli, 1000);
  EXPECT_TRUE(As(alice->secret).Cancel(job->job_id).ok());
}

TEST_F(SecurityTest, ObjectsAndDatasetsAreReadByTheirTenantOnly) {
  client::Client admin = As(admin_.token);
  StatusOr<rpc::NewToken> alice = admin.CreateToken("alice", "team-a", model::Role::kSubmitter, 0);
  StatusOr<rpc::NewToken> bob = admin.CreateToken("bob", "team-b", model::Role::kSubmitter, 0);
  ASSERT_TRUE(alice.ok() && bob.ok());
  const std::string secret = cluster_->WriteFile("q3.txt", "the quarterly numbers\n");
  CommandResult put = Meridian({"objects", "put", secret, "--name", "q3", "--dir", cluster_->dir(), "--token", alice->secret});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  StatusOr<model::ObjectLocation> q3 = As(alice->secret).Locate("q3");
  ASSERT_TRUE(q3.ok()) << q3.status().ToString();
  ASSERT_TRUE(As(alice->secret).DefineDataset("a-data", {model::HeldObject{q3->id, q3->size}}).ok());
  // Bob's own object, whose ticket he holds.
  const std::string own = cluster_->WriteFile("b.txt", "bob's notes\n");
  ASSERT_EQ(Meridian({"objects", "put", own, "--name", "b-notes", "--dir", cluster_->dir(), "--token", bob->secret})
                .exit_code,
            0);
  StatusOr<model::ObjectLocation> notes = As(bob->secret).Locate("b-notes");
  ASSERT_TRUE(notes.ok()) << notes.status().ToString();
  const std::string before = Store();

  client::Client b = As(bob->secret);
  for (const std::string& ref : {std::string("q3"), q3->id}) {
    StatusOr<model::ObjectLocation> l = b.Locate(ref);
    EXPECT_EQ(l.status().code(), StatusCode::kPermissionDenied) << ref;
    EXPECT_NE(l.status().message().find("is not of tenant 'team-b': user bob (submitter, tenant team-b) may not read it"),
              std::string::npos)
        << l.status().ToString();
  }
  EXPECT_EQ(b.GetDataset("a-data").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(b.Objects()->size(), 1u);  // his own
  EXPECT_TRUE(b.Datasets()->empty());
  // Naming the id in a commit does not make it his, nor does a job spec reach the dataset.
  StatusOr<model::ObjectLocation> claim = b.CommitObject(q3->id, q3->size, q3->replicas.front().node_id, "mine");
  EXPECT_EQ(claim.status().code(), StatusCode::kPermissionDenied) << claim.status().ToString();
  StatusOr<rpc::SubmitResult> job =
      b.Submit("name: steal\ntasks:\n  - {name: c, kernel: sum, map: {over: dataset://a-data}}\n", "steal.yaml");
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("a-data"), std::string::npos) << job.status().ToString();
  // A plan does not see it either; its owner's does.
  const std::string over = "name: look\ntasks:\n  - {name: c, kernel: sum, map: {over: dataset://a-data}}\n";
  StatusOr<model::PlanReport> peek = b.Plan(over, "look.yaml", "", 1);
  EXPECT_EQ(peek.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(peek.status().message().find("got 'dataset://a-data'"), std::string::npos) << peek.status().ToString();
  StatusOr<model::PlanReport> owners = As(alice->secret).Plan(over, "look.yaml", "", 1);
  ASSERT_TRUE(owners.ok()) << owners.status().ToString();
  EXPECT_EQ(owners->tasks.size(), 1u);
  // Straight to the node holding it, with his own object's ticket: refused there too.
  char tmpl[] = "/tmp/meridian-fetch-XXXXXX";
  const std::string scratch = mkdtemp(tmpl);
  auto store = objects::ObjectStore::Open({1 << 20, scratch});
  ASSERT_TRUE(store.ok());
  objects::FetchOptions fo{"", 1, 1, 2'000'000};
  fo.tls = *security::TlsContext::Create(admin_.tls);
  fo.ticket = notes->ticket;
  const objects::ObjectId q3_id = *objects::ObjectId::Parse(q3->id);
  StatusOr<objects::FetchStats> stolen = objects::Fetch(q3->replicas.front().transfer_address, q3_id, **store, fo);
  EXPECT_EQ(stolen.status().code(), StatusCode::kPermissionDenied) << stolen.status().ToString();
  EXPECT_FALSE((*store)->Contains(q3_id));
  // The CLI: one line, non-zero.
  CommandResult get = Meridian({"objects", "get", "q3", "--dir", cluster_->dir(), "--token", bob->secret});
  EXPECT_EQ(get.exit_code, 4);
  EXPECT_EQ(get.err, "meridian: object 'q3' is not of tenant 'team-b': user bob (submitter, tenant team-b) may not read it\n");
  // Nor may he delete it, or read it by id in a job.
  StatusOr<model::ObjectLocation> del = b.DeleteObject(q3->id);
  EXPECT_EQ(del.status().code(), StatusCode::kPermissionDenied) << del.status().ToString();
  StatusOr<rpc::SubmitResult> by_id = b.Submit(
      "name: steal\ntasks:\n  - {name: c, kernel: sum, inputs: [object://" + q3->id + "]}\n", "steal.yaml");
  EXPECT_EQ(by_id.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(by_id.status().message().find("no object " + q3->id + " in the cluster that this job may read"),
            std::string::npos)
      << by_id.status().ToString();
  EXPECT_EQ(Store(), before);
  const std::string log = ReadFile(cluster_->dir() + "/logs/coordinator.log");
  EXPECT_NE(log.find("audit: refused ObjectService.Locate from ipv4:127.0.0.1:"), std::string::npos);
  EXPECT_NE(log.find("audit: refused ObjectService.Commit from ipv4:127.0.0.1:"), std::string::npos);
  EXPECT_NE(log.find("audit: refused ObjectService.Delete from ipv4:127.0.0.1:"), std::string::npos);

  // Alice reads hers, and so would bob the same bytes once he puts them himself.
  CommandResult mine = Meridian({"objects", "get", "q3", "--dir", cluster_->dir(), "--token", alice->secret});
  EXPECT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out, "the quarterly numbers\n");
  ASSERT_EQ(Meridian({"objects", "put", secret, "--dir", cluster_->dir(), "--token", bob->secret}).exit_code, 0);
  EXPECT_TRUE(b.Locate(q3->id).ok());
  EXPECT_EQ(b.Locate("q3").status().code(), StatusCode::kPermissionDenied);  // the name stays alice's
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
}

// A user's open watches are bounded. Each is a stream the coordinator keeps and
// writes every change of its job to: a viewer could open as many as it liked (20,000
// of one job took the coordinator from 37 MB to 410 MB). Past the bound a watch, or a
// submission watched, is refused and submits nothing; other users watch on, and a
// watch that ends frees its place.
TEST_F(SecurityTest, AUsersOpenWatchesAreBounded) {
  client::Client admin = As(admin_.token);
  StatusOr<rpc::NewToken> sam = admin.CreateToken("sam", "team-w", model::Role::kSubmitter, 0);
  StatusOr<rpc::NewToken> val = admin.CreateToken("val", "team-w", model::Role::kViewer, 0);
  ASSERT_TRUE(sam.ok() && val.ok());
  StatusOr<rpc::SubmitResult> job = As(sam->secret).Submit(kLongJob, "long.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  struct Open {
    std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<grpc::ClientReader<v1::JobInfo>> reader;
  };
  auto stub_of = [&](const std::string& token) {
    rpc::ChannelSecurity s = admin_;
    s.token = token;
    return v1::JobService::NewStub(rpc::MakeChannel(cluster_->address(), s, {}));
  };
  std::unique_ptr<v1::JobService::Stub> as_sam = stub_of(sam->secret);
  v1::WatchJobRequest request;
  request.set_job_id(job->job_id);
  // Open, and its first summary read: admitted.
  auto watch = [&](v1::JobService::Stub& stub, Open& w) {
    w.reader = stub.Watch(w.ctx.get(), request);
    v1::JobInfo info;
    return w.reader->Read(&info);
  };
  std::vector<Open> open(rpc::kMaxStreamsPerUser);
  size_t admitted = 0;
  for (Open& w : open) admitted += watch(*as_sam, w) ? 1 : 0;
  EXPECT_EQ(admitted, rpc::kMaxStreamsPerUser);

  const std::string why = "user sam (submitter, tenant team-w) has 256 watches open (Watch and SubmitAndWatch), the "
                          "most one user may; end one first";
  Open past;
  if (watch(*as_sam, past)) {
    ADD_FAILURE() << "a watch past the bound was admitted";
    past.ctx->TryCancel();
  }
  grpc::Status refused = past.reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused.error_message(), why);
  const size_t jobs = As(sam->secret).ListJobs(0)->size();
  bool accepted = false;
  StatusOr<model::JobSummary> run = As(sam->secret).SubmitAndWatch(
      kJob, "j.yaml", [&](const rpc::SubmitResult&) { accepted = true; }, [](const model::JobSummary&) { return true; });
  EXPECT_EQ(run.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(run.status().message().find(why), std::string::npos) << run.status().ToString();
  EXPECT_FALSE(accepted);
  EXPECT_EQ(As(sam->secret).ListJobs(0)->size(), jobs);

  // Another user of the tenant watches on.
  std::unique_ptr<v1::JobService::Stub> as_val = stub_of(val->secret);
  Open theirs;
  EXPECT_TRUE(watch(*as_val, theirs));
  theirs.ctx->TryCancel();
  theirs.reader->Finish();
  // One of sam's ends: its place is free once the coordinator has seen it end.
  open.back().ctx->TryCancel();
  EXPECT_EQ(open.back().reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  open.pop_back();
  bool again = false;
  for (int i = 0; i < 50 && !again; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    Open w;
    again = watch(*as_sam, w);
    if (again) {
      open.push_back(std::move(w));
    } else {
      w.reader->Finish();
    }
  }
  EXPECT_TRUE(again) << "a watch that ended did not free its place";
  for (Open& w : open) w.ctx->TryCancel();
  for (Open& w : open) w.reader->Finish();
  EXPECT_NE(ReadFile(cluster_->dir() + "/logs/coordinator.log").find("audit: refused JobService.Watch from ipv4:127.0.0.1:"),
            std::string::npos);
  EXPECT_TRUE(As(sam->secret).Cancel(job->job_id).ok());
}

TEST_F(SecurityTest, ACertificateOfAnotherCaGetsNoConnection) {
  StatusOr<security::KeyPair> ca = security::MakeCa("meridian-cluster-ca", kDayUs);  // same name, other key
  StatusOr<security::KeyPair> kp = security::Issue(*ca, {"client:admin", {}, kDayUs, false});
  ASSERT_TRUE(ca.ok() && kp.ok());
  const std::string before = Store();
  rpc::ChannelSecurity forged = admin_;  // trusts the real CA, presents the other's certificate
  forged.tls.cert_pem = kp->cert_pem;
  forged.tls.key_pem = kp->key_pem;
  client::Client c(cluster_->address(), forged, 5'000'000);
  StatusOr<rpc::SubmitResult> r = c.Submit(kJob, "j.yaml");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_FALSE(c.Nodes().ok());
  // A client that trusts another CA is told the handshake failed, not that the
  // coordinator is down.
  rpc::ChannelSecurity wrong_ca = admin_;
  wrong_ca.tls.ca_pem = ca->cert_pem;
  StatusOr<std::vector<model::NodeView>> lost = client::Client(cluster_->address(), wrong_ca, 5'000'000).Nodes();
  EXPECT_EQ(lost.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lost.status().message().find("the TLS handshake with the coordinator at"), std::string::npos)
      << lost.status().ToString();
  // And with no client certificate at all, only Join is answered.
  rpc::ChannelSecurity bare = admin_;
  bare.tls.cert_pem.clear();
  bare.tls.key_pem.clear();
  StatusOr<std::vector<model::NodeView>> nodes = client::Client(cluster_->address(), bare, 5'000'000).Nodes();
  EXPECT_EQ(nodes.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(nodes.status().message(), "the call carries no client certificate of the cluster's CA");
  EXPECT_EQ(Store(), before);
}

// A TLS connection to `address` offering HTTP/2 (ALPN "h2") and no client
// certificate, non-blocking once open, as a testing::Http2Io.
class BareTlsConnection {
 public:
  explicit BareTlsConnection(const std::string& address) {
    const int port = std::stoi(address.substr(address.rfind(':') + 1));
    fd_ = testing::ConnectFrom(port);
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (fd_ < 0 || ctx_ == nullptr) return;
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    static const unsigned char kAlpn[] = {2, 'h', '2'};
    SSL_CTX_set_alpn_protos(ctx_, kAlpn, sizeof(kAlpn));
    SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    open_ = SSL_connect(ssl_) == 1;
    fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  ~BareTlsConnection() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    if (fd_ >= 0) close(fd_);
  }
  bool open() const { return open_; }
  testing::Http2Io Io() {
    return {[this](char* data, size_t size) { return Done(SSL_read(ssl_, data, static_cast<int>(size))); },
            [this](const char* data, size_t size) { return Done(SSL_write(ssl_, data, static_cast<int>(size))); }};
  }

 private:
  long Done(int n) {
    if (n > 0) return n;
    const int e = SSL_get_error(ssl_, n);
    if (e == SSL_ERROR_ZERO_RETURN) return 0;
    errno = e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? EAGAIN : EIO;
    return -1;
  }
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  bool open_ = false;
};

// A call without a client certificate is refused as its headers arrive, before its
// message is read: only NodeService.Join goes on, and only with a join token in its
// headers. gRPC reads a call's message whole (up to 16 MiB) before any handler runs:
// 40 calls announcing 16 MB each, on 2 connections with no certificate, took the
// coordinator from 36 MB to 687 MB. Now each is answered and reset having sent no
// more than HTTP/2's first window (64 KiB).
TEST_F(SecurityTest, CallsWithoutACertificateAreRefusedBeforeTheirMessageIsRead) {
  constexpr int kConnections = 2;
  constexpr int kStreams = 20;
  for (const std::string path : {"/meridian.v1.AdminService/ListTokens", "/meridian.v1.NodeService/Join"}) {
    std::vector<std::unique_ptr<BareTlsConnection>> connections;
    std::vector<testing::Http2MessageFlood> floods;
    for (int i = 0; i < kConnections; ++i) {
      connections.push_back(std::make_unique<BareTlsConnection>(cluster_->address()));
      ASSERT_TRUE(connections.back()->open());
      floods.emplace_back(connections.back()->Io(), path, kStreams, 16'000'000);
    }
    int resets = 0, answers = 0;
    int64_t sent = 0;
    for (int i = 0; i < 2'000 && resets < kConnections * kStreams && sent < (int64_t{64} << 20); ++i) {
      resets = answers = 0;
      sent = 0;
      for (testing::Http2MessageFlood& f : floods) {
        f.Pump();
        resets += f.resets_received();
        answers += f.headers_received();
        sent += f.body_bytes_sent();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(resets, kConnections * kStreams) << path;
    EXPECT_EQ(answers, kConnections * kStreams) << path;
    EXPECT_LE(sent, int64_t{kConnections} * kStreams * 65'535) << path << ": the server took that much of messages";
    for (const testing::Http2MessageFlood& f : floods) EXPECT_FALSE(f.closed()) << path;
  }
  EXPECT_NE(ReadFile(cluster_->dir() + "/logs/coordinator.log")
                .find("audit: refused /meridian.v1.AdminService/ListTokens before its message, with no client "
                      "certificate: the call carries no client certificate of the cluster's CA (1 such calls so far)"),
            std::string::npos);
  // A join with a join token in its headers is read and decided by the coordinator
  // (here: no such node in the fleet); one with another token is refused before.
  StatusOr<rpc::NewToken> join = As(admin_.token).CreateToken("ops", "default", model::Role::kAgent, 3'600'000'000);
  ASSERT_TRUE(join.ok()) << join.status().ToString();
  auto decided = rpc::JoinCluster(cluster_->address(), admin_.tls.ca_pem, join->secret, "intruder", "csr", 5'000'000);
  EXPECT_EQ(decided.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(decided.status().message().find("node 'intruder' is not in the fleet; only its nodes may join"),
            std::string::npos)
      << decided.status().ToString();
  auto viewer = As(admin_.token).CreateToken("vic", "default", model::Role::kViewer, 0);
  ASSERT_TRUE(viewer.ok());
  auto refused = rpc::JoinCluster(cluster_->address(), admin_.tls.ca_pem, viewer->secret, "intruder", "csr", 5'000'000);
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("a join needs a join token (role agent)"), std::string::npos)
      << refused.status().ToString();
}

TEST_F(SecurityTest, ANodesCertificateSpeaksForThatNodeOnly) {
  StatusOr<std::vector<model::NodeView>> nodes = As(admin_.token).Nodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 4u);
  // A job whose task holds the T4 on edge-t4 for a while.
  StatusOr<rpc::SubmitResult> job = As(admin_.token).Submit(
      "name: t4\ntasks:\n  - {name: hold, command: [sleep, '60'], resources: {accelerator: T4}}\n", "t4.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  model::TaskRecord held;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto v = As(admin_.token).GetJob(job->job_id, true);
        if (!v.ok() || v->tasks.empty() || v->tasks[0].record.status != model::TaskStatus::kRunning) return false;
        held = v->tasks[0].record;
        return true;
      },
      20));
  ASSERT_EQ(held.node, "edge-t4");
  const std::string before = Store();

  // us-cpu-0 taken over: its certificate, its session, its node id.
  const security::TlsCredentials stolen = NodeTls("us-cpu-0");
  const uint64_t session = std::stoull(ReadFile(cluster_->dir() + "/work/us-cpu-0/session"));
  uint32_t id = 0;
  for (uint32_t i = 0; i < nodes->size(); ++i) {
    if ((*nodes)[i].node.name == "us-cpu-0") id = i;
  }
  rpc::NodeClient as_node(cluster_->address(), stolen);

  // Registering as another node.
  model::AgentRegistration reg;
  reg.node = nodes->front().node;
  reg.node.name = "edge-t4";
  reg.site = "factory";
  StatusOr<model::RegistrationReply> r = as_node.Register(reg, 5'000'000);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find("the certificate of node us-cpu-0 cannot register node 'edge-t4'"),
            std::string::npos)
      << r.status().ToString();

  // Reporting the T4 task, which edge-t4 holds, as done with attacker bytes.
  model::AgentHeartbeat hb;
  hb.node_id = id;
  hb.session = session;
  model::TaskUpdate forged;
  forged.key = {job->job_id, 0, held.attempt};
  forged.kind = model::UpdateKind::kSucceeded;
  forged.output = "attacker bytes";
  hb.updates = {forged};
  auto beat = as_node.Heartbeat(hb, 5'000'000);
  EXPECT_EQ(beat.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(beat.status().message().find("node us-cpu-0 reported on attempt 1 of task 0"), std::string::npos)
      << beat.status().ToString();

  // A node's certificate submits nothing.
  rpc::ChannelSecurity node_client{stolen, ""};
  StatusOr<rpc::SubmitResult> submit = client::Client(cluster_->address(), node_client, 5'000'000).Submit(kJob, "j.yaml");
  EXPECT_EQ(submit.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(submit.status().message(), "node us-cpu-0 may only call NodeService; agents cannot submit, read or manage");

  // A second agent for a live node, with a join token: refused at the join.
  StatusOr<rpc::NewToken> join = As(admin_.token).CreateToken("ops", "default", model::Role::kAgent, 3'600'000'000);
  StatusOr<security::KeyPair> csr = security::MakeRequest("node:edge-t4");
  ASSERT_TRUE(join.ok() && csr.ok());
  auto joined = rpc::JoinCluster(cluster_->address(), admin_.tls.ca_pem, join->secret, "edge-t4", csr->cert_pem, 5'000'000);
  EXPECT_EQ(joined.status().code(), StatusCode::kFailedPrecondition);
  // A node the fleet does not have (the fake node with 10,000 cores).
  joined = rpc::JoinCluster(cluster_->address(), admin_.tls.ca_pem, join->secret, "big", csr->cert_pem, 5'000'000);
  EXPECT_EQ(joined.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(joined.status().message().find("node 'big' is not in the fleet"), std::string::npos);

  EXPECT_EQ(Store().substr(0, Store().find("[tokens]")), before.substr(0, before.find("[tokens]")));
  auto v = As(admin_.token).GetJob(job->job_id, true);
  EXPECT_EQ(v->tasks[0].record.status, model::TaskStatus::kRunning);
  EXPECT_TRUE(v->tasks[0].record.output.empty());
  EXPECT_TRUE(As(admin_.token).Cancel(job->job_id).ok());
}

TEST_F(SecurityTest, TheTransferPlaneServesOnlyCertificatesOfTheCluster) {
  // An object on a node, put as the CLI puts it (TLS with the client certificate).
  const std::string file = cluster_->WriteFile("secret.txt", "the quarterly numbers\n");
  CommandResult put = Meridian({"objects", "put", file, "--dir", cluster_->dir(), "--json"});
  ASSERT_EQ(put.exit_code, 0) << put.err;
  StatusOr<std::vector<model::ObjectLocation>> objects = As(admin_.token).Objects();
  ASSERT_TRUE(objects.ok());
  ASSERT_EQ(objects->size(), 1u);
  const model::ObjectLocation& o = objects->front();
  const std::string from = o.replicas.front().transfer_address;
  StatusOr<objects::ObjectId> id = objects::ObjectId::Parse(o.id);
  ASSERT_TRUE(id.ok());
  char tmpl[] = "/tmp/meridian-fetch-XXXXXX";
  const std::string scratch = mkdtemp(tmpl);
  auto store = objects::ObjectStore::Open({1 << 20, scratch});
  ASSERT_TRUE(store.ok());
  // Plain TCP: no answer at all.
  StatusOr<objects::FetchStats> plain = objects::Fetch(from, *id, **store, objects::FetchOptions{"", 1, 1, 2'000'000});
  EXPECT_FALSE(plain.ok());
  // Another CA's certificate.
  StatusOr<security::KeyPair> ca = security::MakeCa("other", kDayUs);
  StatusOr<security::KeyPair> kp = security::Issue(*ca, {"node:us-cpu-0", {}, kDayUs, true});
  objects::FetchOptions fo{"", 1, 1, 2'000'000};
  fo.tls = *security::TlsContext::Create({admin_.tls.ca_pem, kp->cert_pem, kp->key_pem});
  // (TLS 1.3: the client's side of the handshake ends first; the server's refusal
  // arrives as an alert, or as a closed connection, on the first read or write.)
  StatusOr<objects::FetchStats> stranger = objects::Fetch(from, *id, **store, fo);
  EXPECT_FALSE(stranger.ok());
  EXPECT_FALSE((*store)->Contains(*id));
  // The holder logged both refusals, with why.
  auto logs = [&] {
    std::string all;
    for (const auto& e : std::filesystem::directory_iterator(cluster_->dir() + "/logs")) all += ReadFile(e.path());
    return all;
  };
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string text = logs();
        return text.find("wrong version number") != std::string::npos && text.find("unable to get local issuer certificate") != std::string::npos;
      },
      5))
      << logs();
  // A certificate of the cluster alone reads nothing: not the client's, nor a node's
  // (a machine holding one node's credentials reads what its tasks were given only).
  fo.tls = *security::TlsContext::Create(admin_.tls);
  EXPECT_EQ(objects::Fetch(from, *id, **store, fo).status().code(), StatusCode::kPermissionDenied);
  fo.tls = *security::TlsContext::Create(NodeTls(o.replicas.front().node == "us-cpu-0" ? "us-cpu-1" : "us-cpu-0"));
  EXPECT_EQ(objects::Fetch(from, *id, **store, fo).status().code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE((*store)->Contains(*id));
  fo.tls = *security::TlsContext::Create(admin_.tls);
  // With the ticket the coordinator gives a caller of the object's tenant, it reads it.
  StatusOr<model::ObjectLocation> located = As(admin_.token).Locate(o.id);
  ASSERT_TRUE(located.ok()) << located.status().ToString();
  fo.ticket = located->ticket;
  EXPECT_TRUE(objects::Fetch(from, *id, **store, fo).ok());
  EXPECT_EQ(std::string((*store)->Pin(*id)->data()), "the quarterly numbers\n");
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
}

}  // namespace
}  // namespace meridian::testing
