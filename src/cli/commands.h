// The `meridian` subcommands. Each returns a Status; main prints a non-OK one as
// one line on stderr and exits non-zero.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "client/connect.h"
#include "client/objects.h"
#include "common/files.h"
#include "common/status.h"
#include "spec/fleet_spec.h"
#include "spec/service_spec.h"
#include "workloads/chain/generate.h"
#include "workloads/training/trainer.h"

namespace CLI {
class App;
}

namespace meridian::cli {

// Objects read by the commands (client/objects.h).
using client::FetchObjectBytes;
using client::JobOutput;

// Which cluster a client command talks to, and with what credentials
// (client/connect.h says how each is found).
using client::ClusterTarget;

struct PlanOptions {
  std::string fleet;     // a fleet file: plan offline; empty: ask `target`'s coordinator
  ClusterTarget target;
  std::string job;
  std::string order = "fifo";
  uint64_t seed = 1;
  bool json = false;
};
// `meridian plan JOB.yaml [--fleet FLEET.yaml | --dir D | --coordinator A]`: the dry
// run, offline on a fleet file or by a live coordinator on its nodes and datasets.
Status RunPlan(const PlanOptions& options, std::ostream& out);

struct HealthOptions {
  std::string url;
  std::string tls_dir;
  std::string cert = "monitor";  // NAME.crt and NAME.key in tls_dir
  std::string node;              // the agent of this node answers; empty: the coordinator
};
// `meridian health URL`: GETs a coordinator's or an agent's page (default /healthz)
// over TLS, checking who answers; prints the body of a 200, else an error.
Status RunHealth(const HealthOptions& options, std::ostream& out);

struct FleetShowOptions {
  std::string what;  // "sites" or "links"
  std::string fleet;
};
// `meridian fleet sites|links FLEET`: one tab-separated line per site (name, kind) or
// link (site, site, rtt_us, bandwidth_bps), for scripts.
Status RunFleetShow(const FleetShowOptions& options, std::ostream& out);

struct BenchSchedOptions {
  std::vector<int64_t> nodes;
  int64_t tasks = 0;
  uint64_t seed = 1;
  bool json = false;
};
// `meridian bench sched`.
Status RunBenchSched(const BenchSchedOptions& options, std::ostream& out);

struct BenchSimOptions {
  std::string fleet;
  std::string trace;
  std::string policy = "meridian";
  std::vector<int> scales;
  uint64_t seed = 1;
  size_t saturated_jobs = 20'000;
  double saturated_limit_s = 150;
  bool json = false;
};
// `meridian bench sim`.
Status RunBenchSim(const BenchSimOptions& options, std::ostream& out);

struct SimOptions {
  std::string fleet;
  std::string trace;
  std::string trace_format = "auto";
  std::string policy = "meridian";
  std::vector<std::string> compare;
  std::string order = "fifo";
  uint64_t seed = 1;
  int scale_nodes = 1;
  int scale_jobs = 1;
  std::string node_mtbf, spot_mtbp, repair;
  std::vector<std::string> changes;
  size_t max_offered = 0;
  double fill = 0;  // > 0: the fill experiment up to this multiple of GPU capacity
  std::string out;
  bool json = false;
  bool markdown = false;
  bool no_progress = false;  // no progress line on stderr
  std::string relative_to;  // a compared policy the others are measured against
};
// `meridian sim`: replay a trace on a fleet under one or several policies.
Status RunSim(const SimOptions& options, std::ostream& out);

}  // namespace meridian::cli

namespace meridian::cli {

// How the client commands find their coordinator and credentials (--coordinator,
// --dir, --tls-dir, --token, --insecure): client/connect.h.
using client::ConnectClient;
using client::DefaultClusterDir;
using client::ReadSmallFile;
using client::ResolveCoordinator;
// Files written whole through a temporary file renamed over them: common/files.h.
using meridian::WriteFileAtomically;
// The last `lines` lines of a log, each on a new line, indented.
std::string LogTail(const std::filesystem::path& log, size_t lines);

// A bash completion script for `app`'s subcommands and options.
std::string BashCompletion(CLI::App& app);

// Exit codes (docs/runtime.md, "Exit codes"): what a script can tell apart.
inline constexpr int kExitJobFailed = 1;    // the job failed or was cancelled; plan: it cannot be placed
// An environment variable's value; empty when it is not set.
std::string Getenv(const char* name);

// What a gang's member knows of its gang, from the environment its agent gave it
// (RANK, WORLD_SIZE, MASTER_PORT, MERIDIAN_GANG_SECRET, MERIDIAN_GANG_PEERS).
struct GangMember {
  uint32_t rank = 0;
  uint32_t world = 0;
  int32_t master_port = 0;
  std::string secret;
  std::vector<std::string> hosts;  // by rank
  std::vector<std::string> sites;  // by rank
  std::string meridian;            // this program
};
// An error says which variable is missing, or what of the peers file does not fit.
StatusOr<GangMember> ReadGangMember();

// Open MPI launched by Meridian in a gang (src/cli/gang_command.cc, docs/training.md).
struct GangMpirunOptions {
  std::vector<std::string> command;      // the MPI program and its arguments
  std::vector<std::string> mpirun_args;  // more for mpirun, as they are
  std::string mpirun = "mpirun";
  int64_t wait_us = 300'000'000;  // ranks other than 0: how long to wait to be launched
};
// `meridian gang mpirun [--mpirun-arg A]... -- PROGRAM...` as every member's command:
// rank 0 runs mpirun over the gang, each rank serves its launch; `exit_code` is
// mpirun's (rank 0) or the launched daemon's.
Status RunGangMpirun(const GangMpirunOptions& options, int* exit_code);
struct GangRshOptions {
  std::string host;  // rankK
  std::vector<std::string> command;
};
// `meridian gang rsh rankK COMMAND...`: mpirun's plm_rsh_agent; runs COMMAND in rank K.
Status RunGangRsh(const GangRshOptions& options, int* exit_code);
// `meridian gang train --data FILE`: every member's command; the built-in trainer
// (workloads/training) as this rank, gradients all-reduced with the gang's other ranks
// on MASTER_PORT + 1 + WORLD_SIZE + RANK. Prints the rank's result as a JSON line.
struct GangTrainOptions {
  std::string data;                // the digits file (csv or csv.gz)
  training::TrainOptions train;    // but its algorithm, which is read from:
  std::string algorithm = "auto";  // auto, ring, hierarchical
  std::string device = "auto";     // auto, cpu, gpu: where gradients are computed
  std::string save_model;          // rank 0 writes the trained model there (a checkpoint)
  int64_t timeout_us = 60'000'000;  // a collective waiting this long on a peer fails
  // An elastic gang's rank gives up rejoining after failing this long with no step done.
  int64_t rejoin_us = 600'000'000;
};
Status RunGangTrain(const GangTrainOptions& options, std::ostream& out);

// Streams (docs/streams.md). The MQTT flags default to MERIDIAN_MQTT_* (what
// `meridian up` gives an edge site's tasks).
struct MqttFlags {
  std::string broker;  // mqtt://HOST:PORT or mqtts://HOST:PORT
  std::string user;
  std::string password_file;
  std::string ca;
  std::string cert;
  std::string key;
};
// Where a kernel-heavy command computes: "cpu"; "gpu" (the first visible CUDA device,
// an error when there is none); "auto" (a GPU when the agent gave the task one:
// CUDA_VISIBLE_DEVICES names a device and it answers; else the CPU, said on stderr
// as `who`'s).
StatusOr<const kernels::Ops*> ChooseDevice(const std::string& device, std::string_view who);
// `meridian stream run FILE`: runs a stream spec here until stopped (SIGTERM,
// Ctrl-C), or until --stop-after-idle passes without a record (then every open
// window is written). Prints what it counted.
struct StreamRunCommandOptions {
  std::string file;
  MqttFlags mqtt;
  std::string client_id;
  std::string state_dir;        // empty: $MERIDIAN_STREAM_STATE_DIR, or none
  std::string stop_after_idle;  // a duration; empty: never
  std::string device = "auto";  // where windows' figures are computed (ChooseDevice)
  bool json = false;
};
Status RunStreamCommand(const StreamRunCommandOptions& options, std::ostream& out, std::ostream& err);
// `meridian sensors simulate`: publishes simulated sensor records to a broker.
struct SensorsSimulateOptions {
  MqttFlags mqtt;
  std::string site;  // the topic prefix is sensors/SITE unless --topic-prefix says
  std::string topic_prefix;
  int32_t devices = 10;
  int64_t records = 100;  // per device
  double rate = 1000;
  std::string period = "100ms";
  std::string jitter = "0s";
  uint64_t seed = 1;
  bool print = false;  // print the records (one JSON line each) instead of publishing
};
Status RunSensorsSimulate(const SensorsSimulateOptions& options, std::ostream& out);
// Adds a user to a mosquitto password file (a new file with `create`), made 0600,
// through Mosquitto's mosquitto_passwd.
Status AddMqttUser(const std::filesystem::path& passwd, const std::string& user, const std::string& password,
                   bool create);
// `meridian bench stream`: records a second through a stream with windows and detect
// on, beside the broker's own rate with no processing, and publish-to-result latency.
struct BenchStreamOptions {
  int32_t devices = 100;
  int64_t records = 200'000;        // for the throughput figures
  double latency_rate = 5'000;      // records a second for the latency run
  int64_t latency_seconds = 5;
  bool json = false;
};
Status RunBenchStream(const BenchStreamOptions& options, std::ostream& out);

// Serving (docs/serving.md).
struct ReplicaCommandOptions {
  std::string model;       // a checkpoint file of the trainer's
  std::string command_env;  // or the variable holding a command that serves HTTP on $PORT
  std::string health_path = "/healthz";  // the command's
  std::string listen = "127.0.0.1:0";
  std::string token_file;  // the bearer token callers present
  std::string token_env;   // or the variable holding it (a service's replicas: docs/serving.md)
  std::string tls_cert, tls_key;
  // Or the variables holding them as PEM text (a service's replicas).
  std::string tls_cert_env, tls_key_env;
  int32_t max_batch = 32;
  int64_t max_wait_us = 1000;
  int64_t max_queued_images = 4096;
  std::string device = "auto";  // the model's batches: auto, cpu or gpu (ChooseDevice)
};
Status RunReplicaCommand(const ReplicaCommandOptions& options, std::ostream& out);

struct GatewayCommandOptions {
  std::string listen = "127.0.0.1:0";
  std::string region;
  std::vector<std::string> replicas;  // HOST:PORT[@REGION]
  // Or a service's: its replicas as the coordinator places them, read every
  // watch_interval_ms (with the replicas' token).
  std::string service;
  // Or a site's gateway: every service, at /v1/services/NAME/ (its site in `fleet`).
  std::string site, fleet;
  ClusterTarget target;
  int64_t watch_interval_ms = 1000;
  // Scale the service's replicas in --region by its spec's `autoscale`; a site's
  // gateway, those of the regions whose first matching site it is.
  bool autoscale = false;
  std::string token_file;             // clients' bearer token
  std::string replica_token_file;     // the replicas'
  // HTTPS to the replicas given by --replica: their CA (a PEM file) and the name their
  // certificate carries. A service's gateway reads both from the service.
  std::string replica_ca, replica_tls_name;
  std::string tls_cert, tls_key;
  int32_t max_inflight = 64;
  int32_t max_attempts = 3;
  int64_t probe_interval_ms = 250;
};
Status RunGatewayCommand(const GatewayCommandOptions& options, std::ostream& out);

struct BenchServeOptions {
  int32_t hidden = 1024;
  int32_t connections = 64;
  int64_t seconds = 5;
  int32_t max_batch = 32;
  int64_t max_wait_us = 2000;
  std::string device = "cpu";  // where the replicas' batches run: cpu, gpu or auto (ChooseDevice)
  bool json = false;
};
Status RunBenchServe(const BenchServeOptions& options, std::ostream& out);

// Services (docs/serving.md, "Services"): each replica is a job of its own.
struct ServeOptions {
  ClusterTarget target;
  std::string file;  // a service spec (kind: service)
  bool json = false;
};
Status RunServe(const ServeOptions& options, std::ostream& out);
struct ServicesOptions {
  ClusterTarget target;
  bool json = false;
};
Status RunServices(const ServicesOptions& options, std::ostream& out);
struct ServiceOptions {
  ClusterTarget target;
  std::string name;
  bool json = false;
};
Status RunServiceGet(const ServiceOptions& options, std::ostream& out);
// The service's clients' token at the sites' gateways (ReplicaSecrets::client_token):
// whoever may read the service's jobs (its tenant, an admin) may hand it out.
Status RunServiceToken(const ServiceOptions& options, std::ostream& out);
Status RunServiceDelete(const ServiceOptions& options, std::ostream& out);
struct ServiceScaleOptions {
  ClusterTarget target;
  std::string name;
  std::string region;
  int32_t replicas = 0;
};
Status RunServiceScale(const ServiceScaleOptions& options, std::ostream& out);
// A live (not ended) replica job of a service, and with tasks, where it runs.
struct ServiceReplica {
  uint64_t job = 0;
  std::string job_name;
  std::string service, region;
  std::string tenant;  // its job's (empty on an insecure coordinator)
  int32_t ordinal = 0;
  model::JobStatus job_status = model::JobStatus::kQueued;
  std::optional<model::TaskStatus> task_status;
  int32_t attempt = 0;
  std::string node, site, host;
  bool node_alive = false;
  // Running on a live node whose address is known: it listens (or is about to).
  bool Serving() const {
    return task_status == model::TaskStatus::kRunning && node_alive && !host.empty();
  }
};
// The live replica jobs of `service` (empty: of every service), by service and number.
StatusOr<std::vector<ServiceReplica>> ListServiceReplicas(client::Client& c, const std::string& service,
                                                          bool with_tasks);
// A running service: its live replica jobs, and the spec and token they carry (read
// from the first). NotFound when none runs.
struct LiveService {
  std::vector<ServiceReplica> replicas;
  spec::ServiceOfReplica service;
};
StatusOr<LiveService> FindService(client::Client& c, const std::string& name, bool with_tasks);
// Cancels replica job `job`: true when this call cancelled it, false when it had
// ended already or is gone (drained by a gateway, failed, deleted); an error else.
StatusOr<bool> CancelReplicaJob(client::Client& c, uint64_t job);
// Submits `count` more replicas of `spec` in `region`, numbered with the lowest
// numbers none of `live` has; on a failure, those it submitted are undone. With
// `replaces`, each is to take the place of that replica job, which runs in its
// fallback: it has no fallback itself (spec::ReplicaJobYaml).
StatusOr<std::vector<uint64_t>> AddReplicas(client::Client& c, const spec::ServiceSpec& spec,
                                            const spec::ReplicaSecrets& secrets,
                                            const std::string& region, int32_t count,
                                            const std::vector<ServiceReplica>& live, uint64_t replaces = 0);
// The service's spec and the replicas' secrets, as replica `r`'s job carries them.
StatusOr<spec::ServiceOfReplica> ServiceOf(client::Client& c, const ServiceReplica& r);

// A password or token file's first line (a trailing newline dropped), bounded.
StatusOr<std::string> ReadPasswordFile(const std::filesystem::path& path);

inline constexpr int kExitBadRequest = 2;   // bad flags, a malformed spec, a missing file or job, a refused precondition
inline constexpr int kExitUnreachable = 3;  // no coordinator (or agent) answered
inline constexpr int kExitRefused = 4;      // no valid credential, or not allowed
inline constexpr int kExitInternal = 5;     // anything else: a bug, damaged data
int ExitCode(const Status& status);

struct CoordinatorCommandOptions {
  std::string state_dir;
  // Where the state is kept: empty, SQLite in state_dir; or a postgresql:// URI,
  // which several coordinators may share (one leads, holding a lease this long).
  std::string state;
  std::string lease_ttl = "3s";
  std::string listen = "127.0.0.1:7070";
  std::string fleet;
  std::string addr_file;  // written once listening: "host:port"
  // The HTTP(S) listener (/metrics): empty, the API's host and the port after its
  // (a free one when the API's is 0); "none": no listener.
  std::string http_listen;
  std::string http_addr_file;  // written once listening: "https://host:port"
  // The built dashboard served under "/": empty, web/dist of the source tree if it
  // was built; "none": no dashboard.
  std::string web_dir;
  std::string heartbeat_timeout = "2s";
  // After a restart, how long tasks placed before it wait for their agents to come
  // back before they are run elsewhere.
  std::string reconcile_grace = "2m";
  // Retention: finished jobs beyond the newest `retain_jobs`, or finished longer ago
  // than `retain_for`, are deleted ("0": no limit).
  int retain_jobs = 10'000;
  std::string retain_for = "30d";
  std::string sync = "normal";
  std::string order = "fifo";
  bool emulate_wan = false;
  bool emulate_wan_latency = false;  // the links' round trips only: the network shapes bandwidth
  // The cluster's certificates: ca.crt (and ca.key, to sign joining nodes'),
  // coordinator.crt and coordinator.key.
  std::string tls_dir;
  bool insecure = false;  // no TLS and no authentication (a trusted machine only)
  // Written with a new admin token if it does not exist (the first start).
  std::string admin_token_file;
  std::string node_cert_ttl = "30d";
  // Devices as the agents find them, not the fleet's (a fleet emulated on real GPUs).
  bool accept_node_devices = false;
};
// `meridian coordinator`: serves until SIGINT or SIGTERM.
Status RunCoordinator(const CoordinatorCommandOptions& options);

struct AgentCommandOptions {
  std::string coordinator;
  std::string config;
  std::string site;
  std::string work_dir;
  bool no_gpu_discovery = false;
  int kernel_threads = 0;
  std::string object_memory = "1GiB";
  // The transfer server's address (empty: the node file's, else 127.0.0.1) and port
  // (-1: the node file's, else any free one).
  std::string transfer_host;
  int transfer_port = -1;
  // Its /metrics listener: empty, the transfer host with a free port; "none": none.
  std::string metrics_listen;
  std::string link_clocks;  // file of emulated links' clocks shared by a local cluster's agents
  // Where the cluster's ca.crt is, and the node's certificate once it joined
  // (node.crt, node.key); with no certificate there yet, the join token's file.
  std::string tls_dir;
  std::string join_token_file;
  bool insecure = false;
  // Commands run as their tenant's user, uid from this up; -1: 200000 when the agent
  // runs as root, else none; 0: none (as the agent's user).
  int task_uid_base = -1;
  // Every Python task starts an interpreter of its own (no warm ones).
  bool cold_python = false;
  // The site's MQTT broker, for the tasks that ask (agent::SiteBroker).
  MqttFlags site_broker;
  // Other sites' brokers for streams' sinks there: SITE,URL,USER,PASSWORD_FILE each
  // (checked against site_broker.ca).
  std::vector<std::string> peer_brokers;
  // Idle this long, the agent leaves the pool and exits (empty or 0: never).
  std::string idle_exit;
  // Inside a Slurm job: the node is the job's share of this machine (spec/slurm.h),
  // not a node file.
  bool slurm = false;
  std::string gpu_types;  // GRES type -> accelerator type: "a100=A100,rtx8000=T4"
  std::string gpu_type;   // the type of GPUs requested with no GRES type
};
// `meridian agent`: serves until SIGINT or SIGTERM, or until it left the pool idle.
Status RunAgent(const AgentCommandOptions& options);

// Under Slurm (src/cli/slurm_command.cc).
// This node's share of the Slurm job the agent runs in: SLURM_JOB_ID and
// SLURMD_NODENAME from the environment, the rest from `scontrol show job -d`. Points
// options.tls_dir at the node's own TLS_DIR/nodes/NAME (made, with the CA's
// certificate), as nodes may share TLS_DIR on a shared file system.
StatusOr<spec::NodeConfig> SlurmNodeConfig(AgentCommandOptions& options);
struct SlurmSubmitOptions {
  std::string partition;
  int nodes = 1;            // agents: a job array of one-node jobs, each given back on its own
  std::string gres;         // sbatch --gres, "gpu:a100:2"
  int cpus = 0;             // --cpus-per-task; 0: Slurm's default
  std::string mem;          // --mem; empty: Slurm's default
  std::string time;         // --time; empty: the partition's limit
  std::string site;         // empty: the partition
  std::string gpu_types;
  std::string gpu_type;
  std::string idle_exit = "5m";
  std::string coordinator;
  std::string tls_dir;          // on the nodes: the cluster's ca.crt; each node's certificate under nodes/NAME
  std::string join_token_file;  // on the nodes
  std::string work_dir;         // on the nodes; empty: the agent's default
  std::string log_dir = ".";    // the jobs' output files (sbatch --output)
  std::string job_name = "meridian-agent";
  std::string meridian;         // the meridian program on the nodes; empty: this one
  std::vector<std::string> sbatch_args;
  bool insecure = false;
  bool dry_run = false;         // print the sbatch command and script, submit nothing
  bool json = false;
};
// `meridian slurm submit`: Meridian agents as a Slurm job array; prints its id.
Status RunSlurmSubmit(const SlurmSubmitOptions& options, std::ostream& out);

struct UpOptions {
  std::string fleet;
  std::string dir;
  std::string heartbeat_timeout = "2s";
  std::string reconcile_grace = "2m";
  int retain_jobs = 10'000;
  std::string retain_for = "30d";
  int max_nodes = 64;
  // Coordinators to run: more than one share a PostgreSQL store (MERIDIAN_STATE), one
  // leading and the others standing by.
  int coordinators = 1;
  // Stop and delete a cluster already in `dir` (its state too) and start afresh.
  bool recreate = false;
  bool quiet = false;
  // Agents use this machine's CUDA GPUs instead of emulating the fleet's devices.
  bool real_gpus = false;
  // No TLS and no tokens (as before the cluster had them): a trusted machine only.
  bool insecure = false;
  // The prefix of a network scripts/netsim.sh built: the coordinator runs in its
  // router namespace, each site's agents in the site's namespace.
  std::string netns;
  // A gateway per site for every service: "autoscale" (they scale the services'
  // regions too), "route" (they route only), "none".
  std::string gateways = "autoscale";
};
// `meridian up`: starts what of the local cluster in `dir` is not running.
Status RunUp(const UpOptions& options, std::ostream& out);
// Writes `text` to `path` through a temporary file; readable by its owner only when
// `secret` (keys, tokens), from the moment the file is created.
Status WritePrivateFile(const std::filesystem::path& path, const std::string& text, bool secret);
// A CA, a coordinator certificate for `coordinator_hosts` and an admin client
// certificate in `dir`, unless dir/ca.crt exists (what `meridian up` makes).
Status MakeClusterCerts(const std::string& dir, const std::vector<std::string>& coordinator_hosts);

struct CertsOptions {
  std::string dir;
  std::string name;                 // issue: who (coordinator, or a client's user)
  std::string kind = "client";      // issue: coordinator or client
  std::vector<std::string> hosts;   // issue coordinator: its host names and addresses
  std::string ttl;                  // default: 10 years for a CA, 1 year for others
  bool ca = false;                  // rotate: the CA too
};
// `meridian certs init|issue|rotate|show`.
Status RunCertsInit(const CertsOptions& options, std::ostream& out);
Status RunCertsIssue(const CertsOptions& options, std::ostream& out);
Status RunCertsRotate(const CertsOptions& options, std::ostream& out);
Status RunCertsShow(const CertsOptions& options, std::ostream& out);

struct TokenOptions {
  ClusterTarget target;
  std::string user;
  std::string tenant = "default";
  std::string role = "submitter";
  std::string ttl = "0";  // 0: never expires
  std::string id;         // revoke
  bool json = false;
};
// `meridian token create|list|revoke`, `meridian whoami`.
Status RunTokenCreate(const TokenOptions& options, std::ostream& out);
Status RunTokenList(const TokenOptions& options, std::ostream& out);
Status RunTokenRevoke(const TokenOptions& options, std::ostream& out);
Status RunWhoAmI(const TokenOptions& options, std::ostream& out);
// `meridian tenant list`: weights, quotas and use now (an admin sees every tenant).
Status RunTenantList(const TokenOptions& options, std::ostream& out);

struct DownOptions {
  std::string dir;
};
Status RunDown(const DownOptions& options, std::ostream& out);

struct SubmitOptions {
  ClusterTarget target;
  std::string job;
  bool json = false;
};
Status RunSubmit(const SubmitOptions& options, std::ostream& out);

struct RunJobOptions {
  ClusterTarget target;
  std::string job;
  bool json = false;
  bool no_progress = false;
  std::string output_dir;  // write each result's whole output here (fetched from its object)
  // How long to keep trying when the coordinator cannot be reached (it restarts).
  std::string reconnect_for = "5m";
  // Ctrl-C cancels the job too (else it goes on without us).
  bool cancel_on_interrupt = false;
};
// `meridian run`: submit, follow with a progress bar on stderr, print the results.
// A job that does not succeed is an error.
Status RunRun(const RunJobOptions& options, std::ostream& out, std::ostream& progress);

struct JobsOptions {
  ClusterTarget target;
  int limit = 20;
  bool json = false;
};
Status RunJobs(const JobsOptions& options, std::ostream& out);

struct JobOptions {
  ClusterTarget target;
  uint64_t id = 0;
  std::string task;
  bool json = false;
  bool follow = false;  // logs: print output as it comes until the job ends
};
Status RunJobGet(const JobOptions& options, std::ostream& out);
Status RunJobCancel(const JobOptions& options, std::ostream& out);
Status RunJobDelete(const JobOptions& options, std::ostream& out);
Status RunJobLogs(const JobOptions& options, std::ostream& out);
// Submits job ID's spec again, as a new job.
Status RunJobResubmit(const JobOptions& options, std::ostream& out);

struct NodesOptions {
  ClusterTarget target;
  bool json = false;
};
Status RunNodes(const NodesOptions& options, std::ostream& out);
// The cluster at a glance: the coordinator, who you are to it, nodes, jobs, and the
// URLs of its metrics and dashboard.
Status RunStatus(const NodesOptions& options, std::ostream& out);

struct ObjectsPutOptions {
  ClusterTarget target;
  std::string file;
  std::string site;  // empty: any
  std::string name;  // empty: unnamed
  std::string from;  // the site this client is at (the upload crosses the link from it); empty: none
  bool json = false;
};
Status RunObjectsPut(const ObjectsPutOptions& options, std::ostream& out);
struct ObjectsGetOptions {
  ClusterTarget target;
  std::string ref;     // id or name
  std::string output;  // empty or "-": stdout
  std::string site;    // where this client is: the replica there, and that link's shaping
  bool json = false;
};
Status RunObjectsGet(const ObjectsGetOptions& options, std::ostream& out);
struct ObjectsListOptions {
  ClusterTarget target;
  bool json = false;
};
Status RunObjectsList(const ObjectsListOptions& options, std::ostream& out);
struct ObjectsRemoveOptions {
  ClusterTarget target;
  std::vector<std::string> ids;
};
// Undoes one put of each object (ObjectApi::DeleteObject), in order; stops at the first
// refused, saying which.
Status RunObjectsRemove(const ObjectsRemoveOptions& options, std::ostream& out);

struct DataPutOptions {
  ClusterTarget target;
  std::string path;   // a file (split at line ends) or a directory (its files)
  std::string name;
  int shards = 0;     // 0: one for a file, one per file of a directory
  std::string site;   // all shards there; empty: spread over the sites with nodes
  bool by_site = false;  // PATH's subdirectories are sites; each one's files become shards there
  std::string from;   // the site this client is at (uploads cross the link from it); empty: none
  bool json = false;
};
// `meridian data put`: a dataset (dataset://NAME) of shards stored on agents.
Status RunDataPut(const DataPutOptions& options, std::ostream& out);
struct DataListOptions {
  ClusterTarget target;
  std::string name;  // empty: every dataset
  bool json = false;
};
Status RunDataList(const DataListOptions& options, std::ostream& out);

struct BenchTasksOptions {
  int agents = 2;
  int64_t tasks = 100'000;
  int latency_samples = 300;
  bool insecure_loopback = false;  // the plaintext cluster only, no TLS run
  bool json = false;
};
struct BenchRetentionOptions {
  int agents = 2;
  int64_t tasks = 1'000'000;
  bool json = false;
};
// meridian bench retention: what a coordinator holds once a job of `tasks` no-op
// tasks has finished, what reading it all back costs a client, and deleting it.
Status RunBenchRetention(const BenchRetentionOptions& options, std::ostream& out);
struct BenchTransferOptions {
  int64_t bytes = int64_t{1} << 30;
  int repeat = 3;
  bool insecure_loopback = false;  // plain TCP only, no TLS runs
  bool json = false;
  // Across a veth pair into a network namespace made for the run, shaped by tc tbf at
  // `rate` (bits/s), instead of over loopback; needs root.
  bool netns = false;
  int64_t rate_bps = int64_t{1'000'000'000};
};
// `meridian bench transfer`: one object between two object stores over loopback, in
// plain TCP and in TLS, and iperf3 on the same loopback in the same run. With
// `netns`: over a shaped veth link, in TLS, against the configured rate and iperf3
// across the same link.
Status RunBenchTransfer(const BenchTransferOptions& options, std::ostream& out);

struct BenchAllReduceOptions {
  int ranks = 2;
  int64_t bytes = int64_t{64} << 20;
  int iterations = 5;
  int64_t wan_rtt_us = 80'000;           // the emulated link of the two-site figure
  int64_t wan_bps = int64_t{1'000'000'000};
  bool json = false;
};
// `meridian bench allreduce`: Meridian's all-reduce among `ranks` ranks on loopback
// (plain TCP and TLS) against Open MPI's over TCP in the same run, and 2 sites x 2
// ranks over an emulated WAN link, hierarchical against a flat ring.
Status RunBenchAllReduce(const BenchAllReduceOptions& options, std::ostream& out);

struct BenchGemmOptions {
  int64_t n = 8192;
  int64_t repeat = 50;
  bool json = false;
};
// `meridian bench gemm`: a DGEMM through cuBLAS called directly, against the same
// GEMM run as a Meridian task on a local cluster with this machine's GPU.
Status RunBenchGemm(const BenchGemmOptions& options, std::ostream& out);

struct BenchScaleOptions {
  int agents = 1000;
  int64_t tasks = 100'000;
  int processes = 0;  // of simulated agents; 0: one per 1,250 agents (1 to 8)
  int latency_samples = 300;
  double idle_seconds = 5;
  // Client reads beside the work: `history` finished jobs are made first, then the
  // throughput job and the round trips run again with `readers` clients listing jobs
  // (all of them, and the newest unfinished) in a loop. 0 readers: not measured.
  int readers = 0;
  int history = 2'000;
  bool json = false;
};
// `meridian bench scale`: a coordinator with N simulated agents connected (each its
// own gRPC connection): throughput, idle CPU, round trip, heartbeat lag; beside the
// same with two agents, in the same run.
Status RunBenchScale(const BenchScaleOptions& options, std::ostream& out);
// One process of bench scale's simulated agents (hidden): registers them, writes
// `ready_file`, serves until SIGTERM, then writes its figures to `stats_file`.
struct BenchScaleAgentsOptions {
  std::string coordinator;
  int first = 0;
  int count = 1;
  std::string ready_file;
  std::string stats_file;
};
Status RunBenchScaleAgents(const BenchScaleAgentsOptions& options);

struct ChainGenerateOptions {
  std::string out;  // a new or empty directory
  workloads::chain::GenerateOptions chain;
  int64_t shards = 0;  // 0: one per block, at most 8
  std::vector<std::string> sites;  // shard i in out/sites[i % n]/ (for data put --by-site)
  bool json = false;
};
struct ChainGenerated {
  int64_t blocks = 0;
  uint64_t transactions = 0;
  int64_t bytes = 0;
  std::vector<std::string> shards;  // the files written
  std::string expected_report;      // what chain-verify must output for the whole chain
};
// Makes the chain (workloads/chain) and writes its shards.
StatusOr<ChainGenerated> GenerateChain(const ChainGenerateOptions& options);
// `meridian chain generate`: the same, printing what verification must report.
Status RunChainGenerate(const ChainGenerateOptions& options, std::ostream& out);

struct BenchVerifyOptions {
  int agents = 2;
  int64_t blocks = 200;
  int64_t transactions_per_block = 500;
  int64_t shards = 0;  // 0: four per agent
  int repeat = 2;
  bool json = false;
};
// `meridian bench verify`: Ed25519 signatures checked per second by chain-verify on a
// local cluster of `agents` one-core agents, beside libsodium in one process on one
// core and on all cores, in the same run.
Status RunBenchVerify(const BenchVerifyOptions& options, std::ostream& out);

struct BenchQsimOptions {
  std::vector<int> qubits = {20, 22, 24};
  int layers = 4;
  int repeat = 3;
  bool json = false;
};
// `meridian bench qsim`: gates/s of the state-vector simulator on the CPU (and a GPU),
// beside a plain numpy simulation of the same circuit, in the same run.
Status RunBenchQsim(const BenchQsimOptions& options, std::ostream& out);

// `meridian bench tasks`: end-to-end task throughput and round-trip latency on a
// local cluster it starts and stops itself.
Status RunBenchTasks(const BenchTasksOptions& options, std::ostream& out);

struct BenchPyTasksOptions {
  int64_t tasks = 20'000;
  int repeat = 3;
  int ungrouped = 200;  // calls timed with one task each
  int single = 50;      // calls timed one at a time, warm and cold
  bool json = false;
};
// `meridian bench py-tasks`: Python functions through client.map, against Dask's.
Status RunBenchPyTasks(const BenchPyTasksOptions& options, std::ostream& out);

}  // namespace meridian::cli
