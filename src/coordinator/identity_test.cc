// Who may do what, at the coordinator: one session per live node, reports only on
// the node's own attempts, nodes as the fleet declares them, API tokens and joins.
// (The gRPC edge that binds certificates and tokens to these is tested with real
// processes in tests/security_test.cc.)
#include <chrono>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <fmt/format.h>

#include "coordinator/coordinator_test_util.h"
#include "security/pki.h"
#include "security/ticket.h"
#include "store/sqlite_state_store.h"

namespace meridian::coordinator {
namespace {

constexpr int64_t kHourUs = int64_t{3600} * 1'000'000;

class IdentityTest : public CoordinatorTest {
 protected:
  // The job's tasks as a user sees them: statuses, attempts and outputs.
  std::string Fingerprint(uint64_t job) {
    StatusOr<model::JobView> v = coord_->GetJob(job, 0, 100);
    if (!v.ok()) return v.status().ToString();
    std::string out = std::string(model::JobStatusName(v->summary.job.status));
    for (const model::TaskView& t : v->tasks) {
      out += fmt::format(" {}:{}:{}:{}", t.record.task, model::TaskStatusName(t.record.status), t.record.attempt,
                         t.record.output);
    }
    return out;
  }
};

TEST_F(IdentityTest, ASecondSessionForALiveNodeIsRefusedAndTheFirstGoesOn) {
  Start();
  model::RegistrationReply n1 = Register(Node("n1"));
  auto job = coord_->Submit("name: one\ntasks:\n  - {name: a, kernel: sum}\n", "one.yaml", "");
  ASSERT_TRUE(job.ok());
  std::vector<model::TaskAssignment> a = Next(n1);
  ASSERT_EQ(a.size(), 1u);
  const std::string before = Fingerprint(job->job_id);
  // Another agent claiming n1 (without the session n1's agent keeps) while n1 is live.
  StatusOr<model::RegistrationReply> second = coord_->Register(Node("n1"));
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("node n1 already has a live session"), std::string::npos)
      << second.status().ToString();
  EXPECT_EQ(Fingerprint(job->job_id), before);
  // A guessed session does not help either.
  model::AgentRegistration guess = Node("n1");
  guess.previous_session = n1.session + 1;
  EXPECT_EQ(coord_->Register(guess).status().code(), StatusCode::kFailedPrecondition);
  // The real agent's session still works, and its report counts.
  Report(n1, {Done(a[0].key, "15")});
  EXPECT_EQ(Fingerprint(job->job_id), "succeeded 0:succeeded:1:15");
  // Once n1 is declared dead, a new agent may take the name.
  env_.fake().Advance(2'000'000);
  EXPECT_TRUE(Eventually([&] { return coord_->Register(Node("n1")).ok(); }));
}

TEST_F(IdentityTest, AReportOnAnAttemptAnotherNodeHoldsIsRefusedAndChangesNothing) {
  Start();
  model::RegistrationReply n1 = Register(NodeWithT4("n1"));
  model::RegistrationReply n2 = Register(Node("n2"));
  auto job = coord_->Submit("name: t4\ntasks:\n  - {name: a, kernel: sum, resources: {accelerator: T4}}\n", "t4.yaml", "");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::vector<model::TaskAssignment> a = Next(n1);
  ASSERT_EQ(a.size(), 1u);
  const std::string before = Fingerprint(job->job_id);
  // n2 forges n1's result: the whole heartbeat is refused, its other contents too.
  model::AgentHeartbeat forged;
  forged.node_id = n2.node_id;
  forged.session = n2.session;
  forged.updates = {Done(a[0].key, "attacker bytes")};
  forged.objects_added = {model::HeldObject{std::string(32, 'e'), 5}};
  StatusOr<bool> r = coord_->Heartbeat(forged);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find("node n2 reported on attempt 1 of task 0"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(Fingerprint(job->job_id), before);
  EXPECT_FALSE(coord_->Locate(model::Caller{"", "", model::Role::kAdmin, "", true}, std::string(32, 'e'), 0, "").ok());
  // An attempt not yet made is refused too.
  model::TaskKey future = a[0].key;
  future.attempt = 2;
  forged.updates = {Done(future, "later")};
  forged.objects_added.clear();
  EXPECT_EQ(coord_->Heartbeat(forged).status().code(), StatusCode::kPermissionDenied);
  // The holder's report is taken.
  Report(n1, {Done(a[0].key, "15")});
  EXPECT_EQ(Fingerprint(job->job_id), "succeeded 0:succeeded:1:15");
}

TEST_F(IdentityTest, NodesRegisterOnlyAsTheFleetDeclaresThem) {
  Start(std::make_unique<testing::InMemoryStateStore>(), {}, [](CoordinatorOptions& o) {
    model::Node n;
    n.name = "n1";
    n.cpu_milli = 4000;
    n.memory_bytes = int64_t{8} << 30;
    n.devices = {model::Device{"T4", 0, int64_t{16} << 30, true, 1.0}};
    o.declared_nodes["n1"] = {n, "s1"};
  });
  model::AgentRegistration greedy = NodeWithT4("n1");
  greedy.node.cpu_milli = 64'000;
  StatusOr<model::RegistrationReply> r = coord_->Register(greedy);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(r.status().message(), "node 'n1' declares 64000 millicores, more than the fleet gives it");
  model::AgentRegistration gpus = NodeWithT4("n1");
  gpus.node.devices.push_back(model::Device{"T4", 1, int64_t{16} << 30, true, 1.0});
  EXPECT_EQ(coord_->Register(gpus).status().message(), "node 'n1' declares 2 devices of type T4, more than the fleet gives it");
  EXPECT_EQ(coord_->Register(NodeWithT4("n1", "s2")).status().message(),
            "node 'n1' says it is at site s2; the fleet puts it at s1");
  EXPECT_EQ(coord_->Register(Node("stranger")).status().message(),
            "node 'stranger' is not in the fleet; only its nodes may register");
  EXPECT_TRUE(coord_->ListNodes().empty());
  EXPECT_TRUE(coord_->Register(NodeWithT4("n1")).ok());
  EXPECT_EQ(coord_->ListNodes().size(), 1u);
}

TEST_F(IdentityTest, TokensAuthenticateUntilRevokedOrExpiredAndOutliveARestart) {
  auto store = std::make_unique<testing::InMemoryStateStore>();
  testing::InMemoryStateStore* kept = store.get();
  Start(std::move(store));
  StatusOr<rpc::NewToken> alice = coord_->CreateToken("alice", "team-a", model::Role::kSubmitter, 0);
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  EXPECT_EQ(alice->secret.size(), 4u + 16 + 1 + 64);
  EXPECT_EQ(alice->secret.find(alice->record.id), 4u);
  StatusOr<model::Caller> who = coord_->Authenticate(alice->secret);
  ASSERT_TRUE(who.ok());
  EXPECT_EQ(who->Describe(), "user alice (submitter, tenant team-a)");
  // The store keeps the hash, never the secret.
  StatusOr<store::LoadedState> state = kept->Load();
  ASSERT_EQ(state->tokens.size(), 1u);
  EXPECT_EQ(state->tokens[0].secret_hash, security::Sha256Hex(alice->secret.substr(21)));
  // A wrong secret for a real id, and garbage.
  std::string wrong = alice->secret;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  EXPECT_EQ(coord_->Authenticate(wrong).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(coord_->Authenticate("hunter2").status().message(), "the token is not a Meridian token (mrd_...)");
  // Expiry.
  StatusOr<rpc::NewToken> brief = coord_->CreateToken("bob", "team-b", model::Role::kViewer, kHourUs);
  ASSERT_TRUE(coord_->Authenticate(brief->secret).ok());
  env_.fake().Advance(kHourUs);
  EXPECT_EQ(coord_->Authenticate(brief->secret).status().message(),
            fmt::format("token {} has expired", brief->record.id));
  // Revocation, which a restarted coordinator remembers.
  ASSERT_TRUE(coord_->RevokeToken(alice->record.id).ok());
  EXPECT_EQ(coord_->Authenticate(alice->secret).status().message(),
            fmt::format("token {} was revoked", alice->record.id));
  std::vector<model::TokenRecord> stored = kept->Load()->tokens;
  coord_.reset();  // and the store with it
  auto reloaded = std::make_unique<testing::InMemoryStateStore>();
  ASSERT_TRUE(reloaded->Apply(store::StoreBatch{{}, {}, {}, {}, {}, stored}).ok());
  Start(std::move(reloaded));
  EXPECT_EQ(coord_->Authenticate(alice->secret).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(coord_->ListTokens().size(), 2u);
  EXPECT_TRUE(coord_->ListTokens()[0].secret_hash.empty());
  // Names and lifetimes are checked.
  EXPECT_EQ(coord_->CreateToken("a b", "t", model::Role::kViewer, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(coord_->CreateToken("n", "t", model::Role::kAgent, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(IdentityTest, AJoinSignsTheNodesOwnKeyUnderItsNameWithAJoinTokenOnly) {
  StatusOr<security::KeyPair> ca = security::MakeCa("test-ca", 24 * kHourUs);
  ASSERT_TRUE(ca.ok());
  Start(std::make_unique<testing::InMemoryStateStore>(), {}, [&](CoordinatorOptions& o) {
    o.ca = *ca;
    model::Node n;
    n.name = "n1";
    n.cpu_milli = 4000;
    n.memory_bytes = int64_t{8} << 30;
    o.declared_nodes["n1"] = {n, "s1"};
  });
  StatusOr<rpc::NewToken> join = coord_->CreateToken("ops", "default", model::Role::kAgent, kHourUs);
  StatusOr<rpc::NewToken> admin = coord_->CreateToken("root", "default", model::Role::kAdmin, 0);
  ASSERT_TRUE(join.ok() && admin.ok());
  StatusOr<security::KeyPair> csr = security::MakeRequest("coordinator");  // asks for more than it gets
  ASSERT_TRUE(csr.ok());
  auto signed_cert = coord_->Join(join->secret, "n1", csr->cert_pem);
  ASSERT_TRUE(signed_cert.ok()) << signed_cert.status().ToString();
  EXPECT_EQ(security::Inspect(signed_cert->first)->common_name, "node:n1");
  EXPECT_TRUE(security::KeyMatches(signed_cert->first, csr->key_pem));
  EXPECT_EQ(signed_cert->second, ca->cert_pem);
  // Not with another role's token, not for a node outside the fleet, not for a live node.
  EXPECT_EQ(coord_->Join(admin->secret, "n1", csr->cert_pem).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(coord_->Join(join->secret, "n9", csr->cert_pem).status().message(),
            "node 'n9' is not in the fleet; only its nodes may join");
  Register(Node("n1"));
  EXPECT_EQ(coord_->Join(join->secret, "n1", csr->cert_pem).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(coord_->RevokeToken(join->record.id).ok());
  EXPECT_EQ(coord_->Join(join->secret, "n1", csr->cert_pem).status().code(), StatusCode::kUnauthenticated);
}

TEST_F(IdentityTest, AJobsTenantIsTheCredentialsNotTheSpecs) {
  Start();
  Register(Node("n1"));
  auto mine = coord_->Submit("name: mine\ntasks:\n  - {name: a, kernel: sum}\n", "mine.yaml", "team-a");
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(*coord_->JobTenant(mine->job_id), "team-a");
  auto theirs = coord_->Submit("name: theirs\ntenant: team-b\ntasks:\n  - {name: a, kernel: sum}\n", "theirs.yaml",
                               "team-a");
  EXPECT_EQ(theirs.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(theirs.status().message().find("the job names tenant 'team-b', but your credential is of tenant 'team-a'"),
            std::string::npos)
      << theirs.status().ToString();
  EXPECT_EQ(coord_->ListJobs(0, {}).size(), 1u);
  EXPECT_EQ(coord_->ListJobs(0, {"team-a", "", false}).size(), 1u);
  EXPECT_TRUE(coord_->ListJobs(0, {"team-b", "", false}).empty());
}

// A service is the set of its live replica jobs, found by their names (serve/NAME/...),
// and the gateways route /v1/services/NAME/ by the name. Another tenant's job under
// the name of a service that ran joined that set: the gateways took its secrets and
// sent the service's requests to it.
TEST_F(IdentityTest, AServicesNameIsOneTenantsWhileItsReplicasRun) {
  Start();
  Register(Node("n1"));
  auto replica = [this](const std::string& name, const std::string& tenant, const std::string& credential) {
    return coord_->Submit(fmt::format("name: {}\n{}tasks:\n  - {{name: replica, kernel: noop, duration: 1h}}\n", name,
                                      tenant.empty() ? "" : "tenant: " + tenant + "\n"),
                          "r.yaml", credential);
  };
  auto a0 = replica("serve/web/eu/0", "", "team-a");
  ASSERT_TRUE(a0.ok()) << a0.status().ToString();
  auto b1 = replica("serve/web/us/1", "", "team-b");
  EXPECT_EQ(b1.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(b1.status().message(),
            "job 'serve/web/us/1': a service named 'web' runs already, of another tenant; a service's name is the "
            "cluster's (the gateways route by it): serve yours under another name");
  // An admin (no tenant scope) adding a replica without naming the service's tenant
  // would make one of the default tenant's: refused as well.
  EXPECT_EQ(replica("serve/web/eu/1", "", "").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(coord_->ListJobs(0, {}).size(), 1u);
  // Its tenant adds replicas; so does an admin naming that tenant, as the site gateways do.
  auto a1 = replica("serve/web/eu/1", "", "team-a");
  ASSERT_TRUE(a1.ok()) << a1.status().ToString();
  auto a2 = replica("serve/web/us/2", "team-a", "");
  ASSERT_TRUE(a2.ok()) << a2.status().ToString();
  EXPECT_EQ(*coord_->JobTenant(a2->job_id), "team-a");
  // Other names are free: another service whose name starts the same, a job that is
  // no replica.
  EXPECT_TRUE(replica("serve/webs/eu/0", "", "team-b").ok());
  EXPECT_TRUE(replica("web", "", "team-b").ok());
  // A replica job's name is for a job of one task.
  auto two = coord_->Submit("name: serve/x/eu/0\ntasks:\n  - {name: a, kernel: noop}\n  - {name: b, kernel: noop}\n",
                            "x.yaml", "team-b");
  EXPECT_EQ(two.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(two.status().message(), "job 'serve/x/eu/0': names serve/SERVICE/REGION/N are services' replica jobs "
                                    "(meridian serve), of one task; this one has 2");
  EXPECT_EQ(coord_->ListJobs(0, {}).size(), 5u);
  // Once every replica of the service has ended, the name is free again.
  for (uint64_t id : {a0->job_id, a1->job_id}) ASSERT_TRUE(coord_->CancelJob(id).ok());
  EXPECT_EQ(replica("serve/web/us/1", "", "team-b").status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(coord_->CancelJob(a2->job_id).ok());
  auto b = replica("serve/web/us/1", "", "team-b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*coord_->JobTenant(b->job_id), "team-b");
}

model::Fleet TwoTenants(int64_t a_weight, int64_t a_max_gpu_milli) {
  model::Fleet fleet;
  model::Tenant a;
  a.id = TenantId(0);
  a.name = "team-a";
  a.weight = a_weight;
  a.max_gpu_milli = a_max_gpu_milli;
  model::Tenant b;
  b.id = TenantId(1);
  b.name = "team-b";
  fleet.tenants = {a, b};
  return fleet;
}

TEST_F(IdentityTest, ATenantsQuotaCountsWhatItsRunningTasksHold) {
  // The quota once counted only what one scheduling pass placed: a task submitted
  // while another of the tenant's held its one GPU was placed beside it.
  Start(std::make_unique<testing::InMemoryStateStore>(), TwoTenants(1, 1000));
  model::AgentRegistration two_gpus = NodeWithT4("n1");
  two_gpus.node.devices.push_back(model::Device{"T4", 1, int64_t{16} << 30, true, 1.0});
  model::RegistrationReply n1 = Register(two_gpus);
  const std::string spec = "name: g\ntasks:\n  - {name: a, kernel: sum, resources: {accelerator: T4}}\n";
  auto first = coord_->Submit(spec, "g.yaml", "team-a");
  ASSERT_TRUE(first.ok());
  std::vector<model::TaskAssignment> a = Next(n1);
  ASSERT_EQ(a.size(), 1u);
  auto second = coord_->Submit(spec, "g.yaml", "team-a");
  ASSERT_TRUE(second.ok());
  auto other = coord_->Submit(spec, "g.yaml", "team-b");  // another tenant's is not held back
  ASSERT_TRUE(other.ok());
  std::vector<model::TaskAssignment> b = Next(n1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].key.job, other->job_id);
  StatusOr<model::JobView> waiting = coord_->GetJob(second->job_id, 0, 10);
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->tasks[0].record.status, model::TaskStatus::kQueued);
  EXPECT_EQ(waiting->tasks[0].record.reason,
            "waiting: tenant 'team-a' uses 1 of its 1 GPUs quota; this task needs 1 more");
  std::vector<model::TenantView> tenants = coord_->ListTenants();
  ASSERT_EQ(tenants.size(), 2u);
  EXPECT_EQ(tenants[0].name, "team-a");
  EXPECT_EQ(tenants[0].max_gpu_milli, 1000);
  EXPECT_EQ(tenants[0].gpu_milli, 1000);
  EXPECT_EQ(tenants[0].jobs_active, 2);
  EXPECT_EQ(tenants[0].tasks_running, 1);
  EXPECT_EQ(tenants[0].tasks_waiting, 1);
  EXPECT_EQ(tenants[1].gpu_milli, 1000);  // team-b, no quota
  // Once the first is done, the second runs.
  Report(n1, {Done(a[0].key, "15")});
  std::vector<model::TaskAssignment> c = Next(n1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].key.job, second->job_id);
}

TEST_F(IdentityTest, TheTicketKeyComesFromTheCaSoItOutlivesARestart) {
  // Tickets in assignments agents still run must stay good after a restart.
  StatusOr<security::KeyPair> ca = security::MakeCa("cluster-ca", kHourUs);
  ASSERT_TRUE(ca.ok());
  auto with_ca = [&](CoordinatorOptions& o) { o.ca = *ca; };
  Start(std::make_unique<testing::InMemoryStateStore>(), {}, with_ca);
  const std::string first = Register(Node("n1")).ticket_key;
  EXPECT_EQ(first.size(), 64u);
  coord_.reset();
  Start(std::make_unique<testing::InMemoryStateStore>(), {}, with_ca);
  EXPECT_EQ(Register(Node("n1")).ticket_key, first);
  // Another CA, another key; without a CA key, a random one per start.
  StatusOr<security::KeyPair> other = security::MakeCa("cluster-ca", kHourUs);
  coord_.reset();
  Start(std::make_unique<testing::InMemoryStateStore>(), {}, [&](CoordinatorOptions& o) { o.ca = *other; });
  EXPECT_NE(Register(Node("n1")).ticket_key, first);
  coord_.reset();
  Start();
  const std::string random = Register(Node("n1")).ticket_key;
  coord_.reset();
  Start();
  EXPECT_NE(Register(Node("n1")).ticket_key, random);
}

TEST_F(IdentityTest, AnAssignmentCarriesATicketForWhatItsTaskReadsOnly) {
  Start();
  model::RegistrationReply n1 = Register(Node("n1"));
  auto job = coord_->Submit(
      "name: dag\ntasks:\n  - {name: a, kernel: sum}\n  - {name: b, kernel: sum, after: [a]}\n", "dag.yaml",
      "team-a");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::vector<model::TaskAssignment> a = Next(n1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_TRUE(a[0].dep_objects.empty());
  const std::string made(32, 'c'), other(32, 'd');
  Report(n1, {DoneAsObject(a[0].key, made)}, {model::HeldObject{made, 10'000}, model::HeldObject{other, 5}});
  std::vector<model::TaskAssignment> b = Next(n1);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(b[0].dep_objects.size(), 1u);
  EXPECT_EQ(b[0].dep_objects[0].id, made);
  StatusOr<security::Ticket> t = security::VerifyTicket(b[0].dep_objects[0].ticket, n1.ticket_key,
                                                        security::UnixNowUs());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->kind, security::TicketKind::kRead);
  EXPECT_EQ(t->tenant, "team-a");
  EXPECT_EQ(t->ids, std::vector<std::string>{made});  // not the other object n1 holds
  // Good for a day, not for ever.
  EXPECT_TRUE(security::VerifyTicket(b[0].dep_objects[0].ticket, n1.ticket_key, security::UnixNowUs() + kHourUs).ok());
  EXPECT_FALSE(security::VerifyTicket(b[0].dep_objects[0].ticket, n1.ticket_key,
                                      security::UnixNowUs() + 25 * kHourUs).ok());
}

model::AgentRegistration NodeWith(const std::string& name, const std::string& type, int devices,
                                   int64_t price_micro_usd_per_hour) {
  model::AgentRegistration r = Node(name);
  r.node.devices.clear();
  for (int i = 0; i < devices; ++i) r.node.devices.push_back(model::Device{type, i, int64_t{16} << 30, true, 1.0});
  r.node.price_micro_usd_per_hour = price_micro_usd_per_hour;
  return r;
}

TEST_F(IdentityTest, AQuotaOnOneAcceleratorTypeSendsTasksToOtherTypesOrHoldsThem) {
  model::Fleet fleet = TwoTenants(1, 0);
  fleet.tenants[0].max_gpu_milli_by_type = {{"T4", 1000}};
  Start(std::make_unique<testing::InMemoryStateStore>(), fleet);
  model::RegistrationReply n1 = Register(NodeWith("n1", "T4", 2, 0));
  model::RegistrationReply n2 = Register(NodeWith("n2", "A100", 1, 0));
  auto job = coord_->Submit(
      "name: g\ntasks:\n  - {name: t, kernel: sum, count: 3, duration: 1h, resources: {accelerator: {any_of: [T4, "
      "A100]}}}\n",
      "g.yaml", "team-a");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  // One T4 (its quota) and the A100; the third waits, though a T4 is free.
  std::vector<model::TaskAssignment> on_t4 = Next(n1), on_a100 = Next(n2);
  ASSERT_EQ(on_t4.size(), 1u);
  ASSERT_EQ(on_a100.size(), 1u);
  StatusOr<model::JobView> v = coord_->GetJob(job->job_id, 0, 10);
  ASSERT_TRUE(v.ok());
  const model::TaskView& third = v->tasks[2];
  EXPECT_EQ(third.record.status, model::TaskStatus::kQueued);
  EXPECT_EQ(third.record.reason,
            "waiting: 0 of 2 nodes can run it now: 1 node at s1 are busy, but one frees in 1h 00m and would still "
            "finish it first (2h 00m from now); 1 node with T4s: tenant 'team-a' uses 1 of its 1 T4 quota");
  // Another tenant's T4 task takes the free T4: the quota is team-a's.
  auto other = coord_->Submit("name: b\ntasks:\n  - {name: t, kernel: sum, resources: {accelerator: T4}}\n",
                              "b.yaml", "team-b");
  ASSERT_TRUE(other.ok());
  std::vector<model::TaskAssignment> b = Next(n1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].key.job, other->job_id);
  std::vector<model::TenantView> tenants = coord_->ListTenants();
  ASSERT_EQ(tenants.size(), 2u);
  EXPECT_EQ(tenants[0].max_gpu_milli_by_type, (std::map<std::string, int64_t>{{"T4", 1000}}));
  EXPECT_EQ(tenants[0].gpu_milli_by_type, (std::map<std::string, int64_t>{{"A100", 1000}, {"T4", 1000}}));
  EXPECT_EQ(tenants[1].gpu_milli_by_type, (std::map<std::string, int64_t>{{"T4", 1000}}));
  // The T4 task done, the third takes the T4.
  Report(n1, {Done(on_t4[0].key, "1")});
  std::vector<model::TaskAssignment> next = Next(n1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].key.task, third.record.task);
}

TEST_F(IdentityTest, ADailyBudgetHoldsTasksUntilTheSpendAllowsAndRenewsTheNextDay) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("meridian-budget-" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  const std::string db = (dir / "state.db").string();
  model::Fleet fleet = TwoTenants(1, 0);
  fleet.tenants[0].budget_micro_usd_per_day = 10'000'000;  // $10 a day
  auto long_heartbeats = [](CoordinatorOptions& o) { o.heartbeat_timeout_us = int64_t{100} * kHourUs; };
  Start(std::move(*store::SqliteStateStore::Open(db, {})), fleet, long_heartbeats);
  // 4 T4s at $16 an hour: an hour on one of them is $4.
  model::RegistrationReply n1 = Register(NodeWith("n1", "T4", 4, 16'000'000));
  auto job = coord_->Submit(
      "name: g\ntasks:\n  - {name: t, kernel: sum, count: 3, duration: 1h, resources: {accelerator: T4}}\n",
      "g.yaml", "team-a");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::vector<model::TaskAssignment> first = Next(n1);
  if (first.size() == 1) first.push_back(Next(n1).at(0));
  ASSERT_EQ(first.size(), 2u);  // $8 of $10
  StatusOr<model::JobView> v = coord_->GetJob(job->job_id, 0, 10);
  EXPECT_EQ(v->tasks[2].record.reason,
            "waiting: 0 of 1 nodes can run it now: 1 node would charge $4.00 for it, more than the $2.00 left today "
            "of tenant 'team-a''s daily budget");
  EXPECT_EQ(coord_->ListTenants()[0].spent_today_micro_usd, 8'000'000);
  // One ends after 15 minutes: it cost $1, not $4, and the third fits.
  env_.fake().Advance(15 * 60 * int64_t{1'000'000});
  Report(n1, {Done(first[0].key, "1")});
  // (The agent here reports nothing running: the second task's assignment, old by
  // now, is sent again beside the third.)
  std::vector<model::TaskAssignment> next = Next(n1);
  std::set<uint32_t> tasks;
  for (const model::TaskAssignment& a : next) tasks.insert(a.key.task);
  EXPECT_EQ(tasks, (std::set<uint32_t>{first[1].key.task, 3 - first[0].key.task - first[1].key.task}));
  EXPECT_EQ(coord_->ListTenants()[0].spent_today_micro_usd, 9'000'000);  // $1 + $4 + $4 placed
  EXPECT_EQ(coord_->ListTenants()[0].budget_micro_usd_per_day, 10'000'000);
  // What was spent survives a restart; the running two count again once they end,
  // at what they ran.
  coord_.reset();
  Start(std::move(*store::SqliteStateStore::Open(db, {})), fleet, long_heartbeats);
  EXPECT_EQ(coord_->ListTenants()[0].spent_today_micro_usd, 1'000'000);
  // A new day (UTC) starts from nothing.
  env_.fake().Advance(2 * kHourUs);
  EXPECT_EQ(coord_->ListTenants()[0].spent_today_micro_usd, 0);
  coord_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_F(IdentityTest, TwoTenantsSharingANodeGetTheirWeightedShares) {
  // team-a (weight 2) submits first, team-b (weight 1) right after; both keep a
  // backlog. Under fair order team-a gets two thirds of the placements, not all.
  Start(std::make_unique<testing::InMemoryStateStore>(), TwoTenants(2, 0),
        [](CoordinatorOptions& o) { o.order = sched::QueueOrder::kFairShare; });
  model::AgentRegistration three = Node("n1");
  three.node.cpu_milli = 3000;
  model::RegistrationReply n1 = Register(three);
  const std::string spec = "name: many\ntasks:\n  - {name: t, kernel: sum, count: 300, resources: {cpu: 1}}\n";
  auto a = coord_->Submit(spec, "a.yaml", "team-a");
  auto b = coord_->Submit(spec, "b.yaml", "team-b");
  ASSERT_TRUE(a.ok() && b.ok());
  std::map<uint64_t, int> placed;
  int total = 0;
  while (total < 240) {
    std::vector<model::TaskAssignment> got = Next(n1);
    ASSERT_FALSE(got.empty());
    std::vector<model::TaskUpdate> done;
    for (const model::TaskAssignment& t : got) {
      ++placed[t.key.job];
      done.push_back(Done(t.key, "0"));
    }
    total += static_cast<int>(got.size());
    Report(n1, done);
  }
  const double share_a = static_cast<double>(placed[a->job_id]) / total;
  EXPECT_NEAR(share_a, 2.0 / 3, 2.0 / 3 * 0.1) << placed[a->job_id] << " of " << total << " for team-a";
  EXPECT_NEAR(1 - share_a, 1.0 / 3, 1.0 / 3 * 0.1) << placed[b->job_id] << " of " << total << " for team-b";
}

}  // namespace
}  // namespace meridian::coordinator
