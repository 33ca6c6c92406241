// meridian: one binary, many subcommands (README.md; docs/runtime.md for the runtime ones).
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/table.h"
#include "common/logging.h"
#include "common/units.h"
#include "version.h"

int main(int argc, char** argv) {
  using namespace meridian;
  if (argc >= 4 && std::string_view(argv[1]) == "gang" && std::string_view(argv[2]) == "rsh") {
    cli::GangRshOptions rsh{argv[3], std::vector<std::string>(argv + 4, argv + argc)};
    int code = 0;
    Status s = cli::RunGangRsh(rsh, &code);
    if (s.ok()) return code;
    std::cerr << "meridian: " << cli::TerminalText(s.message(), true) << '\n';
    return cli::ExitCode(s);
  }
  CLI::App app{"Meridian: one pool of accelerators over data centres, clouds and edge sites"};
  app.require_subcommand(1);
  app.set_version_flag("--version", fmt::format("meridian {} (commit {})", MERIDIAN_VERSION, MERIDIAN_COMMIT),
                       "Print the version and the commit it was built from");
  app.footer(
      "Exit codes: 0 done; 1 the job failed or was cancelled (plan: it cannot be placed); 2 a bad request (flags, "
      "a malformed spec, a missing file or job); 3 the coordinator cannot be reached; 4 refused (credentials, "
      "permissions); 5 an internal error.");
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");

  cli::PlanOptions plan;
  CLI::App* plan_cmd = app.add_subcommand("plan", "Dry run: where each task of a job would run, when, and at what cost");
  CLI::Option* plan_fleet = plan_cmd->add_option(
      "--fleet", plan.fleet, "Plan offline on this fleet file (YAML); without it the cluster's coordinator plans on its live nodes and datasets");
  plan_cmd->add_option("job", plan.job, "Job file (YAML)")->required();
  plan_cmd->add_option("--order", plan.order, "Queue order: fifo, priority or fair");
  plan_cmd->add_option("--seed", plan.seed, "Seed for tie-breaking between equally good placements");
  plan_cmd->add_flag("--json", plan.json, "Print JSON for scripts");

  cli::SimOptions sim;
  CLI::App* sim_cmd = app.add_subcommand("sim", "Replay a workload trace on a fleet with the real scheduler, on a virtual clock");
  sim_cmd->add_option("--fleet", sim.fleet, "Fleet file (YAML)")->required();
  sim_cmd->add_option("--trace", sim.trace, "Trace: Alibaba GPU 2023 pod list, Sia/Philly workload or Meridian CSV")->required();
  sim_cmd->add_option("--trace-format", sim.trace_format, "auto (from the header), alibaba, sia, gavel or csv");
  sim_cmd->add_option("--policy", sim.policy,
                      "meridian, frag-aware, first-fit, best-fit, random, agnostic or cheapest-region (default meridian)");
  sim_cmd->add_option("--compare", sim.compare, "Several policies on the same input, comma-separated")->delimiter(',');
  sim_cmd->add_option("--order", sim.order, "Queue order: fifo, priority or fair");
  sim_cmd->add_option("--seed", sim.seed, "Seed; the same seed gives the same metrics (default 1)");
  sim_cmd->add_option("--scale-nodes", sim.scale_nodes, "Every node N times (size experiments)");
  sim_cmd->add_option("--scale-jobs", sim.scale_jobs, "Every job N times, arriving together");
  sim_cmd->add_option("--node-mtbf", sim.node_mtbf, "Mean time between failures of each node, e.g. 30d");
  sim_cmd->add_option("--spot-mtbp", sim.spot_mtbp, "Mean time between preemptions of each spot node");
  sim_cmd->add_option("--repair", sim.repair, "Time a failed or preempted node stays away (default 10m)");
  sim_cmd->add_option("--change", sim.changes, "Fleet change TIME:+N or TIME:-N after the first arrival, e.g. 2h:+100");
  sim_cmd->add_option("--max-offered", sim.max_offered, "At most N waiting tasks per scheduler call, oldest first");
  sim_cmd->add_option("--fill", sim.fill,
                      "Fill experiment (Weng et al., ATC 2023): tasks never end and are turned away when there is no "
                      "room, until GPU demand reaches this multiple of capacity, e.g. 1.3");
  sim_cmd->add_option("--out", sim.out, "Directory for metrics.json, report.html and per-job CSVs");
  sim_cmd->add_flag("--json", sim.json, "Print JSON for scripts");
  sim_cmd->add_flag("--markdown", sim.markdown, "Print the table as Markdown (docs/results.md)");
  sim_cmd->add_flag("--no-progress", sim.no_progress, "No progress line on stderr during long replays");
  sim_cmd->add_option("--relative-to", sim.relative_to, "With --compare: one line per policy against this one");
  sim_cmd->get_option("--compare")->excludes(sim_cmd->get_option("--policy"));

  CLI::App* bench_cmd = app.add_subcommand("bench", "Benchmarks that print figures");
  bench_cmd->require_subcommand(1);
  cli::BenchSchedOptions bench;
  CLI::App* bench_sched = bench_cmd->add_subcommand("sched", "Scheduler placements/s and decision latency");
  bench_sched->add_option("--nodes", bench.nodes, "Fleet sizes (default 1000 10000 100000)")->delimiter(',');
  bench_sched->add_option("--tasks", bench.tasks, "Tasks per run (default: one per GPU, at most 100000)");
  bench_sched->add_option("--seed", bench.seed, "Seed");
  bench_sched->add_flag("--json", bench.json, "Print JSON for scripts");

  cli::BenchSimOptions bench_sim_opts;
  CLI::App* bench_sim = bench_cmd->add_subcommand("sim", "Simulator replay speed on a real trace, scaled");
  bench_sim->add_option("--fleet", bench_sim_opts.fleet, "Fleet file (default examples/fleets/alibaba-gpu-2023.yaml)");
  bench_sim->add_option("--trace", bench_sim_opts.trace, "Trace (default the Alibaba GPU 2023 default pod list)");
  bench_sim->add_option("--policy", bench_sim_opts.policy, "Policy (default meridian)");
  bench_sim->add_option("--scale", bench_sim_opts.scales, "Scales, comma-separated (default 1,100)")->delimiter(',');
  bench_sim->add_option("--seed", bench_sim_opts.seed, "Seed");
  bench_sim->add_option("--saturated-jobs", bench_sim_opts.saturated_jobs,
                        "Jobs of the saturated case, arriving 100/s and running 30 min on average (default 20000; 0: "
                        "skip it)");
  bench_sim->add_option("--saturated-limit", bench_sim_opts.saturated_limit_s,
                        "Seconds after which a saturated replay stops (default 150)");
  bench_sim->add_flag("--json", bench_sim_opts.json, "Print JSON for scripts");

  cli::BenchRetentionOptions bench_retention_opts;
  CLI::App* bench_retention = bench_cmd->add_subcommand(
      "retention", "Coordinator memory holding a finished job of many tasks, paging it back, deleting it");
  bench_retention->add_option("--agents", bench_retention_opts.agents, "Agent processes (default 2)");
  bench_retention->add_option("--tasks", bench_retention_opts.tasks, "No-op tasks in the job (default 1000000)");
  bench_retention->add_flag("--json", bench_retention_opts.json, "Print JSON for scripts");
  cli::BenchTasksOptions bench_tasks_opts;
  CLI::App* bench_tasks = bench_cmd->add_subcommand("tasks", "End-to-end task throughput and round trip on a local cluster");
  bench_tasks->add_option("--agents", bench_tasks_opts.agents, "Agent processes (default 2)");
  bench_tasks->add_option("--tasks", bench_tasks_opts.tasks, "No-op tasks in the throughput run (default 100000)");
  bench_tasks->add_option("--samples", bench_tasks_opts.latency_samples, "Round trips to time (default 300)");
  bench_tasks->add_flag("--insecure-loopback", bench_tasks_opts.insecure_loopback,
                        "Only a plaintext cluster (no TLS, no tokens): skip the TLS run");
  bench_tasks->add_flag("--json", bench_tasks_opts.json, "Print JSON for scripts");

  cli::BenchPyTasksOptions bench_py_opts;
  CLI::App* bench_py = bench_cmd->add_subcommand(
      "py-tasks", "No-op Python functions through the Python package's client.map, beside Dask's, in one run");
  bench_py->add_option("--tasks", bench_py_opts.tasks, "Functions to map (default 20000)");
  bench_py->add_option("--repeat", bench_py_opts.repeat, "Timed runs of each; the best counts (default 3)");
  bench_py->add_option("--ungrouped", bench_py_opts.ungrouped,
                       "Calls timed with one task each (default 200)");
  bench_py->add_option("--single", bench_py_opts.single,
                       "Calls timed one at a time, forked from a warm interpreter and in one of their own each "
                       "(default 50)");
  bench_py->add_flag("--json", bench_py_opts.json, "Print JSON for scripts");

  cli::BenchTransferOptions bench_transfer_opts;
  std::string transfer_bytes;
  cli::BenchScaleOptions bench_scale_opts;
  CLI::App* bench_scale = bench_cmd->add_subcommand(
      "scale", "A coordinator with thousands of simulated agents: throughput, idle CPU, round trip, heartbeat lag");
  bench_scale->add_option("--agents", bench_scale_opts.agents, "Simulated agents, each its own connection (default 1000)");
  bench_scale->add_option("--tasks", bench_scale_opts.tasks, "No-op tasks in the throughput run (default 100000)");
  bench_scale->add_option("--processes", bench_scale_opts.processes,
                          "Processes the agents run in (default: one per 1,250 agents, 1 to 8)");
  bench_scale->add_option("--samples", bench_scale_opts.latency_samples, "Round trips to time (default 300)");
  bench_scale->add_option("--idle-seconds", bench_scale_opts.idle_seconds,
                          "How long at least to measure the idle coordinator's CPU (default 5; at least one heartbeat interval)");
  bench_scale->add_option("--readers", bench_scale_opts.readers,
                          "Also measure with this many clients listing jobs in a loop (default 0: not measured)");
  bench_scale->add_option("--history", bench_scale_opts.history,
                          "With --readers: finished jobs made first, for them to list (default 2000)");
  bench_scale->add_flag("--json", bench_scale_opts.json, "Print JSON for scripts");
  cli::BenchScaleAgentsOptions scale_agents_opts;
  CLI::App* scale_agents = bench_cmd->add_subcommand("scale-agents", "One process of bench scale's simulated agents");
  scale_agents->group("");  // internal: started by bench scale
  scale_agents->add_option("--coordinator", scale_agents_opts.coordinator, "")->required();
  scale_agents->add_option("--first", scale_agents_opts.first, "");
  scale_agents->add_option("--count", scale_agents_opts.count, "");
  scale_agents->add_option("--ready-file", scale_agents_opts.ready_file, "")->required();
  scale_agents->add_option("--stats-file", scale_agents_opts.stats_file, "")->required();

  CLI::App* bench_transfer = bench_cmd->add_subcommand(
      "transfer", "One object between two object stores over loopback, against iperf3 in the same run");
  bench_transfer->add_option("--bytes", transfer_bytes, "Object size (default 1GiB; 512MiB, 4GiB...)");
  bench_transfer->add_option("--repeat", bench_transfer_opts.repeat, "Runs per stream count (default 3)");
  bench_transfer->add_flag("--insecure-loopback", bench_transfer_opts.insecure_loopback,
                           "Plain TCP only: skip the TLS runs");
  bench_transfer->add_flag("--json", bench_transfer_opts.json, "Print JSON for scripts");
  std::string transfer_rate = "1Gbps";
  bench_transfer->add_flag("--netns", bench_transfer_opts.netns,
                           "Across a veth pair into a network namespace made for the run, shaped by tc tbf at --rate, "
                           "against the configured rate and iperf3 on the same link (root; default --bytes 256MiB)");
  bench_transfer->add_option("--rate", transfer_rate, "With --netns: the link's rate (default 1Gbps)");

  cli::BenchAllReduceOptions bench_allreduce_opts;
  std::string allreduce_bytes = "64MiB";
  CLI::App* bench_allreduce = bench_cmd->add_subcommand(
      "allreduce", "Meridian's all-reduce against Open MPI's over TCP in the same run, and hierarchical against a flat "
                   "ring over an emulated WAN link");
  bench_allreduce->add_option("--ranks", bench_allreduce_opts.ranks, "Ranks on this machine (default 2)");
  bench_allreduce->add_option("--bytes", allreduce_bytes, "Size of the vector reduced (default 64MiB)");
  bench_allreduce->add_option("--iterations", bench_allreduce_opts.iterations, "Timed runs of each (default 5)");
  bench_allreduce->add_flag("--json", bench_allreduce_opts.json, "Print JSON for scripts");

  cli::BenchGemmOptions bench_gemm_opts;
  cli::BenchStreamOptions bench_stream;
  CLI::App* bench_stream_cmd = bench_cmd->add_subcommand(
      "stream", "Records/s through a stream (windows, detect) beside mosquitto's own rate, and publish-to-result latency");
  bench_stream_cmd->add_option("--devices", bench_stream.devices, "Simulated devices")->capture_default_str();
  bench_stream_cmd->add_option("--records", bench_stream.records, "Records for the throughput figures")
      ->capture_default_str();
  bench_stream_cmd->add_option("--latency-rate", bench_stream.latency_rate, "Records a second for the latency run")
      ->capture_default_str();
  bench_stream_cmd->add_option("--latency-seconds", bench_stream.latency_seconds, "Length of the latency run")
      ->capture_default_str();
  bench_stream_cmd->add_flag("--json", bench_stream.json, "Print JSON for scripts");
  CLI::App* bench_gemm = bench_cmd->add_subcommand(
      "gemm", "A DGEMM through cuBLAS called directly, against the same GEMM as a Meridian task (needs a GPU)");
  bench_gemm->add_option("--n", bench_gemm_opts.n, "Matrix size n (n x n, default 8192)");
  bench_gemm->add_option("--repeat", bench_gemm_opts.repeat, "Products per run (default 50)");
  bench_gemm->add_flag("--json", bench_gemm_opts.json, "Print JSON for scripts");
  cli::BenchVerifyOptions bench_verify_opts;
  CLI::App* bench_verify = bench_cmd->add_subcommand(
      "verify", "Signatures/s of chain-verify on a local cluster, against libsodium in one process, same run");
  bench_verify->add_option("--agents", bench_verify_opts.agents, "One-core agents (default 2)");
  bench_verify->add_option("--blocks", bench_verify_opts.blocks, "Blocks in the chain (default 200)");
  bench_verify->add_option("--transactions-per-block", bench_verify_opts.transactions_per_block,
                           "Transactions in each block (default 500)");
  bench_verify->add_option("--shards", bench_verify_opts.shards, "Shards, one task each (default: four per agent)");
  bench_verify->add_option("--repeat", bench_verify_opts.repeat, "Runs of each measurement; the best counts (default 2)");
  bench_verify->add_flag("--json", bench_verify_opts.json, "Print JSON for scripts");
  cli::BenchQsimOptions bench_qsim_opts;
  CLI::App* bench_qsim = bench_cmd->add_subcommand(
      "qsim", "Gates/s of the state-vector simulator (CPU, and GPU if any) against numpy on the same circuit, same run");
  bench_qsim->add_option("--qubits", bench_qsim_opts.qubits, "Circuit sizes (default 20,22,24)")->delimiter(',');
  bench_qsim->add_option("--layers", bench_qsim_opts.layers, "Layers of gates (default 4)");
  bench_qsim->add_option("--repeat", bench_qsim_opts.repeat, "Timed runs of Meridian's simulation after an untimed one; the best counts (default 3)");
  bench_qsim->add_flag("--json", bench_qsim_opts.json, "Print JSON for scripts");

  // ---- the runtime
  const std::string target_help =
      "Coordinator HOST:PORT, or several comma-separated (coordinators sharing a store: whichever leads answers) "
      "(default: $MERIDIAN_COORDINATOR, else the local cluster's)";
  const std::string dir_help = "Local cluster directory (default $MERIDIAN_HOME or ~/.meridian)";
  auto add_target = [&](CLI::App* cmd, cli::ClusterTarget& t) {
    cmd->add_option("--coordinator", t.coordinator, target_help);
    cmd->add_option("--dir", t.dir, dir_help);
    cmd->add_option("--tls-dir", t.tls_dir,
                    "The cluster's ca.crt and your client.crt/client.key (default: $MERIDIAN_TLS_DIR, else the local "
                    "cluster's tls/)");
    cmd->add_option("--token", t.token,
                    "Your API token (default: $MERIDIAN_TOKEN, else the local cluster's admin.token); prefer the "
                    "variable: others can read command lines");
    cmd->add_flag("--insecure", t.insecure, "Plaintext, to a coordinator started with --insecure");
  };

  add_target(plan_cmd, plan.target);
  for (const char* o : {"--coordinator", "--dir", "--tls-dir", "--token", "--insecure"}) {
    plan_fleet->excludes(plan_cmd->get_option(o));
  }

  cli::HealthOptions health;
  CLI::App* health_cmd = app.add_subcommand(
      "health", "Ask a coordinator or an agent whether it is healthy (/healthz) or ready (/readyz): for probes");
  health_cmd->add_option("url", health.url, "https://HOST:PORT/healthz or /readyz (the coordinator's HTTPS listener, or "
                                            "an agent's --metrics-listen)")
      ->required();
  health_cmd->add_option("--tls-dir", health.tls_dir, "The cluster's ca.crt and the certificate to show")
      ->envname("MERIDIAN_TLS_DIR");
  health_cmd->add_option("--cert", health.cert, "Show NAME.crt and NAME.key of --tls-dir (default monitor)");
  health_cmd->add_option("--node", health.node, "An agent answers: the one of this node (default: the coordinator)");

  cli::FleetShowOptions fleet_show;
  CLI::App* fleet_cmd = app.add_subcommand("fleet", "A fleet file's sites or links, one tab-separated line each (scripts)");
  fleet_cmd->add_option("what", fleet_show.what, "sites (name, kind) or links (site, site, rtt_us, bandwidth_bps)")
      ->required()
      ->check(CLI::IsMember({"sites", "links"}));
  fleet_cmd->add_option("fleet", fleet_show.fleet, "Fleet file (YAML)")->required();

  cli::CoordinatorCommandOptions coord;
  CLI::App* coord_cmd = app.add_subcommand("coordinator", "Run a coordinator: jobs, nodes, scheduling, state");
  coord_cmd->add_option("--state-dir", coord.state_dir,
                        "Directory of the coordinator's files: the SQLite state store, unless --state names another")
      ->required()
      ->envname("MERIDIAN_STATE_DIR");
  coord_cmd
      ->add_option("--state", coord.state,
                   "A PostgreSQL server to keep the state in, as a URI: postgresql://user@host:5432/db?sslmode=verify-full "
                   "(its password from PGPASSFILE or PGPASSWORD, not the URI, which ps shows; default: SQLite in "
                   "--state-dir)")
      ->envname("MERIDIAN_STATE");
  coord_cmd->add_option("--lease-ttl", coord.lease_ttl,
                        "With --state: coordinators sharing the store wait while one leads; a leader that has not "
                        "renewed its lease for this long is replaced (default 3s)");
  coord_cmd->add_option("--listen", coord.listen, "Address to serve on (default 127.0.0.1:7070; port 0 picks one)")
      ->envname("MERIDIAN_LISTEN");
  coord_cmd
      ->add_option("--fleet", coord.fleet, "Fleet file: sites, links, tenants, throughput (nodes join by registering)")
      ->envname("MERIDIAN_FLEET");
  coord_cmd->add_option("--addr-file", coord.addr_file, "Write the address it listens on to this file");
  coord_cmd
      ->add_option("--http-listen", coord.http_listen,
                   "Address of its HTTPS listener for /metrics, /healthz, /readyz and the dashboard (default: the API's "
                   "host, the port after the API's; none: no listener)")
      ->envname("MERIDIAN_HTTP_LISTEN");
  coord_cmd->add_option("--http-addr-file", coord.http_addr_file, "Write the URL of its HTTPS listener to this file");
  coord_cmd->add_option("--web-dir", coord.web_dir,
                        "The built dashboard to serve on the HTTPS listener (default: web/dist of the source tree, "
                        "when scripts/build-web.sh built it; none: no dashboard)");
  coord_cmd->add_option("--heartbeat-timeout", coord.heartbeat_timeout, "A node silent this long is dead (default 2s)");
  coord_cmd->add_option("--reconcile-grace", coord.reconcile_grace,
                        "After a restart, how long tasks wait for their agents to return before they run elsewhere "
                        "(default 2m)");
  coord_cmd->add_option("--retain-jobs", coord.retain_jobs,
                        "Keep this many finished jobs; older ones are deleted with their tasks and logs "
                        "(default 10000; 0: all)");
  coord_cmd->add_option("--retain-for", coord.retain_for,
                        "Delete a finished job this long after it finished (default 30d; 0: never)");
  coord_cmd->add_option("--sync", coord.sync, "normal (survives a crash) or full (survives power loss too)");
  coord_cmd->add_option("--order", coord.order, "Queue order: fifo, priority or fair");
  coord_cmd->add_flag("--emulate-wan", coord.emulate_wan,
                      "Agents' transfers emulate the fleet's links (latency, bandwidth): a local cluster playing sites");
  coord_cmd->add_flag("--emulate-wan-latency", coord.emulate_wan_latency,
                      "Agents' transfers emulate only the links' round trips; their bandwidth is the network's (sites in "
                      "namespaces shaped by scripts/netsim.sh, on a kernel without netem)");
  coord_cmd
      ->add_option("--tls-dir", coord.tls_dir,
                   "The cluster's certificates: ca.crt, coordinator.crt, coordinator.key, and ca.key to let nodes join "
                   "(meridian certs init / issue)")
      ->envname("MERIDIAN_TLS_DIR");
  coord_cmd
      ->add_option("--admin-token-file", coord.admin_token_file,
                   "On first start, write an admin token here (readable by you alone)")
      ->envname("MERIDIAN_ADMIN_TOKEN_FILE");
  coord_cmd->add_option("--node-cert-ttl", coord.node_cert_ttl, "Lifetime of the certificates joining nodes get (default 30d)");
  coord_cmd->add_flag("--accept-node-devices", coord.accept_node_devices,
                      "Take nodes' devices as their agents find them, not as the fleet declares them");
  coord_cmd->add_flag("--insecure", coord.insecure,
                      "No TLS and no authentication: anyone who reaches the port runs commands on every node");

  cli::AgentCommandOptions agent;
  CLI::App* agent_cmd = app.add_subcommand("agent", "Run an agent for one node");
  agent_cmd
      ->add_option("--coordinator", agent.coordinator,
                   "Coordinator HOST:PORT, or several comma-separated (coordinators sharing a store: the agent follows "
                   "whichever leads); default: the node file's agent.coordinator")
      ->envname("MERIDIAN_COORDINATOR");
  agent_cmd
      ->add_option("--config", agent.config,
                   "Node file (YAML): name, site, cpu, memory, devices, price, and optionally how the agent runs "
                   "(agent: coordinator, join_token_file, tls_dir, work_dir, transfer_host, transfer_port, "
                   "metrics_listen; docs/deploy.md)")
      ->envname("MERIDIAN_NODE_CONFIG");
  agent_cmd->add_option("--site", agent.site, "Site, overriding the node file's")->envname("MERIDIAN_SITE");
  agent_cmd->add_option("--work-dir", agent.work_dir, "Where task directories go")->envname("MERIDIAN_WORK_DIR");
  agent_cmd->add_flag("--no-gpu-discovery", agent.no_gpu_discovery, "Do not look for CUDA devices");
  agent_cmd->add_option("--kernel-threads", agent.kernel_threads, "Threads for built-in kernels (default: one per core)");
  agent_cmd->add_option("--object-memory", agent.object_memory, "Objects held in memory before spilling to disk (default 1GiB)");
  agent_cmd->add_option("--link-clocks", agent.link_clocks,
                        "File of emulated WAN links' clocks shared with the other agents on this machine, so that "
                        "senders at one site share each link's bandwidth (meridian up sets it)");
  agent_cmd
      ->add_option("--transfer-host", agent.transfer_host,
                   "Address the object transfer server listens on, which other nodes reach it by (default 127.0.0.1)")
      ->envname("MERIDIAN_TRANSFER_HOST");
  agent_cmd
      ->add_option("--transfer-port", agent.transfer_port,
                   "Port of the object transfer server (default: a free one; fix it to open it in a firewall)")
      ->envname("MERIDIAN_TRANSFER_PORT");
  agent_cmd
      ->add_option("--metrics-listen", agent.metrics_listen,
                   "Address of its HTTPS listener for /metrics, /healthz and /readyz (default: the transfer host, a "
                   "free port; none: no listener)")
      ->envname("MERIDIAN_METRICS_LISTEN");
  agent_cmd
      ->add_option("--tls-dir", agent.tls_dir,
                   "Holds the cluster's ca.crt, and the node's certificate once it joined (node.crt, node.key)")
      ->envname("MERIDIAN_TLS_DIR");
  agent_cmd
      ->add_option("--join-token-file", agent.join_token_file,
                   "A join token (meridian token create --role agent), used when the node has no certificate")
      ->envname("MERIDIAN_JOIN_TOKEN_FILE");
  agent_cmd->add_flag("--insecure", agent.insecure, "Plaintext, to a coordinator started with --insecure");
  agent_cmd->add_option("--task-uid-base", agent.task_uid_base,
                        "Commands run as their tenant's user, uid BASE + a hash of the tenant (default 200000 when "
                        "run as root; 0: as the agent's user)");
  agent_cmd->add_option("--site-broker", agent.site_broker.broker,
                        "The site's MQTT broker (mqtt[s]://HOST:PORT), for tasks that ask with MERIDIAN_MQTT=site");
  agent_cmd->add_option("--site-broker-user", agent.site_broker.user, "Its user for those tasks");
  agent_cmd->add_option("--site-broker-password-file", agent.site_broker.password_file, "File holding that user's password");
  agent_cmd->add_option("--site-broker-ca", agent.site_broker.ca, "mqtts: the broker's CA certificate");
  agent_cmd->add_option("--peer-broker", agent.peer_brokers,
                        "Another site's MQTT broker, for streams whose sink is there: SITE,URL,USER,PASSWORD_FILE "
                        "(repeatable; its certificate is checked against --site-broker-ca)");
  agent_cmd->add_flag("--cold-python", agent.cold_python,
                      "Start an interpreter for each Python task (python SCRIPT.py) instead of forking it from a "
                      "warm one");
  agent_cmd
      ->add_option("--idle-exit", agent.idle_exit,
                   "Idle this long (nothing running), leave the pool and exit: under a batch system the node goes "
                   "back to it (default: never)")
      ->envname("MERIDIAN_IDLE_EXIT");
  agent_cmd->add_flag("--slurm", agent.slurm,
                      "Inside a Slurm job: the node is the job's share of this machine (CPUs, memory, GPUs from its "
                      "GRES), at the site named by --site or else the job's partition; no node file");
  agent_cmd->add_option("--gpu-types", agent.gpu_types,
                        "With --slurm: GRES types as accelerator types, GRES_TYPE=TYPE[,...] (default: the GRES type "
                        "itself, a100 -> A100)");
  agent_cmd->add_option("--gpu-type", agent.gpu_type, "With --slurm: the type of GPUs a job asked for with no GRES type");

  cli::SlurmSubmitOptions slurm;
  CLI::App* slurm_cmd = app.add_subcommand("slurm", "Meridian under Slurm: agents started as Slurm jobs");
  slurm_cmd->require_subcommand(1);
  CLI::App* slurm_submit = slurm_cmd->add_subcommand(
      "submit", "Start agents as a Slurm job array, one node each; each leaves the pool and ends its job when idle");
  slurm_submit->add_option("--partition", slurm.partition, "Slurm partition (also the agents' site unless --site)")
      ->required();
  slurm_submit->add_option("--nodes", slurm.nodes, "Agents, one node each (default 1)");
  slurm_submit->add_option("--gres", slurm.gres, "Generic resources per node, as sbatch --gres (gpu:a100:2)");
  slurm_submit->add_option("--cpus", slurm.cpus, "CPUs per agent (sbatch --cpus-per-task; default Slurm's)");
  slurm_submit->add_option("--mem", slurm.mem, "Memory per node (sbatch --mem; default Slurm's)");
  slurm_submit->add_option("--time", slurm.time, "Time limit (sbatch --time; default the partition's)");
  slurm_submit->add_option("--site", slurm.site, "The agents' site (default: the partition's name)");
  slurm_submit->add_option("--gpu-types", slurm.gpu_types, "GRES types as accelerator types, GRES_TYPE=TYPE[,...]");
  slurm_submit->add_option("--gpu-type", slurm.gpu_type, "The type of GPUs asked for with no GRES type");
  slurm_submit->add_option("--idle-exit", slurm.idle_exit, "An agent idle this long gives its node back (default 5m)");
  slurm_submit->add_option("--coordinator", slurm.coordinator, "Coordinator HOST:PORT the agents join")
      ->envname("MERIDIAN_COORDINATOR");
  slurm_submit->add_option("--tls-dir", slurm.tls_dir,
                           "On a file system the nodes share: the cluster's ca.crt; each node keeps its certificate "
                           "under nodes/NAME");
  slurm_submit->add_option("--join-token-file", slurm.join_token_file,
                           "On a file system the nodes share: a join token (meridian token create --role agent)");
  slurm_submit->add_option("--work-dir", slurm.work_dir, "The agents' task directories (default /tmp/meridian-agent-NODE)");
  slurm_submit->add_option("--log-dir", slurm.log_dir, "Where the jobs' output goes (default: here)");
  slurm_submit->add_option("--job-name", slurm.job_name, "Slurm job name (default meridian-agent)");
  slurm_submit->add_option("--meridian", slurm.meridian, "The meridian program on the nodes (default: this one)");
  slurm_submit->add_option("--sbatch-arg", slurm.sbatch_args, "Passed to sbatch as it is (repeatable): --account=x");
  slurm_submit->add_flag("--insecure", slurm.insecure, "Plaintext, to a coordinator started with --insecure");
  slurm_submit->add_flag("--dry-run", slurm.dry_run, "Print the sbatch command and the script; submit nothing");
  slurm_submit->add_flag("--json", slurm.json, "JSON output");

  cli::UpOptions up;
  CLI::App* up_cmd = app.add_subcommand("up", "Start a local cluster: a coordinator and one agent per node of a fleet");
  up_cmd->add_option("--fleet", up.fleet, "Fleet file (default examples/fleets/three-sites.yaml)");
  up_cmd->add_option("--dir", up.dir, dir_help);
  up_cmd->add_option("--heartbeat-timeout", up.heartbeat_timeout, "A node silent this long is dead (default 2s)");
  up_cmd->add_option("--reconcile-grace", up.reconcile_grace,
                     "After a coordinator restart, how long tasks wait for their agents (default 2m)");
  up_cmd->add_option("--retain-jobs", up.retain_jobs,
                     "The coordinator keeps this many finished jobs (default 10000; 0: all)");
  up_cmd->add_option("--retain-for", up.retain_for,
                     "The coordinator deletes a finished job this long after it finished (default 30d; 0: never)");
  up_cmd->add_option("--coordinators", up.coordinators,
                     "Coordinators to run (default 1): more share a PostgreSQL store, given as MERIDIAN_STATE, one "
                     "leading and the others ready to take over")
      ->check(CLI::Range(1, 9));
  up_cmd->add_flag("--recreate", up.recreate,
                   "Stop and delete the cluster already in the directory (its jobs and objects too) and start afresh");
  up_cmd->add_flag("--real-gpus", up.real_gpus,
                   "Agents use this machine's CUDA GPUs (each agent all of them) instead of emulating the fleet's");
  up_cmd->add_option("--netns", up.netns,
                     "Run the coordinator and each site's agents in the network namespaces scripts/netsim.sh built "
                     "with this --prefix (as root): traffic between sites crosses shaped kernel links");
  up_cmd->add_option("--gateways", up.gateways,
                     "A gateway per site for every service (docs/serving.md): autoscale (they scale the services' "
                     "regions too), route (they only route), none")
      ->check(CLI::IsMember({"autoscale", "route", "none"}))
      ->capture_default_str();
  up_cmd->add_flag("--insecure", up.insecure,
                   "No TLS and no tokens (by default the cluster gets its own CA and an admin token)");
  cli::DownOptions down;
  CLI::App* down_cmd = app.add_subcommand("down", "Stop the local cluster's processes (its state is kept)");
  down_cmd->add_option("--dir", down.dir, dir_help);

  cli::SubmitOptions submit;
  CLI::App* submit_cmd = app.add_subcommand("submit", "Submit a job and return once it is stored");
  submit_cmd->add_option("job", submit.job, "Job file (YAML)")->required();
  add_target(submit_cmd, submit.target);
  submit_cmd->add_flag("--json", submit.json, "Print JSON for scripts");

  cli::RunJobOptions run;
  CLI::App* run_cmd = app.add_subcommand("run", "Submit a job, follow it, print its results");
  run_cmd->add_option("job", run.job, "Job file (YAML)")->required();
  add_target(run_cmd, run.target);
  run_cmd->add_flag("--json", run.json, "Print the finished job as JSON");
  run_cmd->add_flag("--no-progress", run.no_progress, "No progress bar");
  run_cmd->add_flag("--cancel-on-interrupt", run.cancel_on_interrupt,
                    "Ctrl-C cancels the job (by default it goes on, and you are told how to follow it)");
  run_cmd->add_option("--reconnect-for", run.reconnect_for,
                      "Keep following the job this long while the coordinator cannot be reached (default 5m)");
  run_cmd->add_option("--output-dir", run.output_dir,
                      "Write every result's whole output to a file here (fetched from the node that made it)");

  cli::JobsOptions jobs;
  CLI::App* jobs_cmd = app.add_subcommand("jobs", "List jobs, newest first");
  add_target(jobs_cmd, jobs.target);
  jobs_cmd->add_option("--limit", jobs.limit, "At most this many (default 20; 0: all)");
  jobs_cmd->add_flag("--json", jobs.json, "Print JSON for scripts");

  CLI::App* job_cmd = app.add_subcommand("job", "One job: get, cancel, delete, logs, resubmit");
  job_cmd->require_subcommand(1);
  cli::JobOptions job_get, job_cancel, job_delete, job_logs, job_resubmit;
  CLI::App* job_get_cmd = job_cmd->add_subcommand("get", "A job, its tasks, where they ran and their attempts");
  CLI::App* job_cancel_cmd = job_cmd->add_subcommand("cancel", "Cancel a job; running tasks are killed");
  CLI::App* job_delete_cmd = job_cmd->add_subcommand(
      "delete", "Delete a finished job: its tasks, attempts and logs, and the results it kept on nodes");
  CLI::App* job_logs_cmd = job_cmd->add_subcommand("logs", "Output of a job's command tasks");
  CLI::App* job_resubmit_cmd =
      job_cmd->add_subcommand("resubmit", "Submit a job's spec again as a new job (checked against today's fleet)");
  for (auto [cmd, o] : {std::pair{job_get_cmd, &job_get}, {job_cancel_cmd, &job_cancel},
                        {job_delete_cmd, &job_delete}, {job_logs_cmd, &job_logs}, {job_resubmit_cmd, &job_resubmit}}) {
    cmd->add_option("id", o->id, "Job id")->required();
    add_target(cmd, o->target);
    cmd->add_flag("--json", o->json, "Print JSON for scripts");
  }
  job_logs_cmd->add_option("--task", job_logs.task, "Only this task");
  job_logs_cmd
      ->add_flag("-f,--follow", job_logs.follow,
                 "Print output as it comes (within about a second) until the job ends; exit 1 if it failed")
      ->excludes(job_logs_cmd->get_option("--json"));

  cli::NodesOptions nodes;
  CLI::App* objects_cmd = app.add_subcommand("objects", "Objects held by the agents: put, get, ls, rm");
  objects_cmd->require_subcommand(1);
  cli::ObjectsPutOptions objects_put;
  CLI::App* objects_put_cmd = objects_cmd->add_subcommand("put", "Store a file as an object on an agent");
  add_target(objects_put_cmd, objects_put.target);
  objects_put_cmd->add_option("file", objects_put.file, "The file")->required();
  objects_put_cmd->add_option("--site", objects_put.site, "Put it on a node at this site (default: any)");
  objects_put_cmd->add_option("--from", objects_put.from,
                              "The site this client is at: on an emulated cluster the upload crosses the link from it");
  objects_put_cmd->add_option("--name", objects_put.name, "A name to get it by");
  objects_put_cmd->add_flag("--json", objects_put.json, "Print JSON for scripts");
  cli::ObjectsGetOptions objects_get;
  CLI::App* objects_get_cmd = objects_cmd->add_subcommand("get", "Fetch an object (by id or name) from an agent");
  add_target(objects_get_cmd, objects_get.target);
  objects_get_cmd->add_option("ref", objects_get.ref, "Object id or name")->required();
  objects_get_cmd->add_option("-o,--output", objects_get.output, "Write it here (default: stdout)");
  objects_get_cmd->add_option("--site", objects_get.site,
                              "The site this client is at: its replica is preferred, the link from others emulated");
  objects_get_cmd->add_flag("--json", objects_get.json, "Print JSON for scripts");
  cli::ObjectsListOptions objects_ls;
  CLI::App* objects_ls_cmd = objects_cmd->add_subcommand("ls", "List objects and where their replicas are");
  add_target(objects_ls_cmd, objects_ls.target);
  objects_ls_cmd->add_flag("--json", objects_ls.json, "Print JSON for scripts");
  cli::ObjectsRemoveOptions objects_rm;
  CLI::App* objects_rm_cmd =
      objects_cmd->add_subcommand("rm", "Undo a put of an object: its node lets go of it once nothing else holds it");
  add_target(objects_rm_cmd, objects_rm.target);
  objects_rm_cmd->add_option("id", objects_rm.ids, "Object ids (32 hex digits)")->required();

  CLI::App* data_cmd = app.add_subcommand("data", "Datasets: shards stored on agents, read by jobs as dataset://NAME");
  data_cmd->require_subcommand(1);
  cli::DataPutOptions data_put;
  CLI::App* data_put_cmd = data_cmd->add_subcommand("put", "Split a file or a directory into shards and store them");
  add_target(data_put_cmd, data_put.target);
  data_put_cmd->add_option("path", data_put.path, "A file (split at line ends) or a directory (its files)")->required();
  data_put_cmd->add_option("--name", data_put.name, "The dataset's name (jobs read dataset://NAME)")->required();
  data_put_cmd->add_option("--shards", data_put.shards,
                           "Shards (default: 1 for a file, one per file of a directory)");
  data_put_cmd->add_option("--site", data_put.site, "Put every shard at this site (default: spread over sites)");
  data_put_cmd->add_flag("--by-site", data_put.by_site,
                         "PATH's subdirectories are named after sites: their files become shards at those sites");
  data_put_cmd->add_option("--from", data_put.from,
                           "The site this client is at: on an emulated cluster uploads cross the links from it");
  data_put_cmd->add_flag("--json", data_put.json, "Print JSON for scripts");
  cli::DataListOptions data_ls;
  CLI::App* data_ls_cmd = data_cmd->add_subcommand("ls", "List datasets, their shards and where they are");
  add_target(data_ls_cmd, data_ls.target);
  data_ls_cmd->add_option("name", data_ls.name, "One dataset (default: all)");
  data_ls_cmd->add_flag("--json", data_ls.json, "Print JSON for scripts");

  CLI::App* chain_cmd = app.add_subcommand("chain", "The transaction-verification workload (docs/chain.md)");
  chain_cmd->require_subcommand(1);
  cli::ChainGenerateOptions chain_gen;
  CLI::App* chain_gen_cmd = chain_cmd->add_subcommand(
      "generate", "Write a realistic chain of signed transfers, with a few bad ones, as shards to put and verify");
  chain_gen_cmd->add_option("--out", chain_gen.out, "A new directory for the shards")->required();
  chain_gen_cmd->add_option("--blocks", chain_gen.chain.blocks, "Blocks (default 100)");
  chain_gen_cmd->add_option("--transactions-per-block", chain_gen.chain.transactions_per_block,
                            "Transactions in each block (default 1000)");
  chain_gen_cmd->add_option("--accounts", chain_gen.chain.accounts, "Accounts with keys (default 1000)");
  chain_gen_cmd->add_option("--forged", chain_gen.chain.forged, "Transactions signed by someone else (default 3)");
  chain_gen_cmd->add_option("--tampered", chain_gen.chain.tampered, "Transactions altered after sealing (default 1)");
  chain_gen_cmd->add_option("--shards", chain_gen.shards, "Shard files (default: one per block, at most 8)");
  chain_gen_cmd->add_option("--sites", chain_gen.sites, "Spread the shards over OUT/SITE/ directories (for data put --by-site)")
      ->delimiter(',');
  chain_gen_cmd->add_option("--seed", chain_gen.chain.seed, "Seed; the same seed writes the same bytes (default 1)");
  chain_gen_cmd->add_flag("--json", chain_gen.json, "Print JSON for scripts");

  // Streams at the edge (docs/streams.md).
  auto add_mqtt = [](CLI::App* cmd, cli::MqttFlags& f) {
    cmd->add_option("--broker", f.broker, "MQTT broker, mqtt://HOST:PORT or mqtts://HOST:PORT (default: $MERIDIAN_MQTT_URL)");
    cmd->add_option("--mqtt-user", f.user, "MQTT user (default: $MERIDIAN_MQTT_USER)");
    cmd->add_option("--mqtt-password-file", f.password_file,
                    "File holding the MQTT password (default: $MERIDIAN_MQTT_PASSWORD_FILE)");
    cmd->add_option("--mqtt-ca", f.ca, "mqtts: the broker's CA file (default: $MERIDIAN_MQTT_CA)");
    cmd->add_option("--mqtt-cert", f.cert, "mqtts: this client's certificate (default: $MERIDIAN_MQTT_CERT)");
    cmd->add_option("--mqtt-key", f.key, "mqtts: this client's key (default: $MERIDIAN_MQTT_KEY)");
  };
  CLI::App* stream_cmd = app.add_subcommand("stream", "Stream jobs: sensor records through windows, at the edge");
  stream_cmd->require_subcommand(1);
  cli::StreamRunCommandOptions stream_run;
  CLI::App* stream_run_cmd = stream_cmd->add_subcommand(
      "run", "Run a stream spec (kind: stream) here: read its source topic, write each window's result");
  stream_run_cmd->add_option("file", stream_run.file, "The stream spec (YAML; default: $MERIDIAN_STREAM_SPEC's text)");
  add_mqtt(stream_run_cmd, stream_run.mqtt);
  stream_run_cmd->add_option("--client-id", stream_run.client_id,
                             "MQTT client id of the source's connection (a clean session; with --state-dir the "
                             "directory keeps its own id)");
  stream_run_cmd->add_option("--state-dir", stream_run.state_dir,
                             "Exactly-once: the directory of the stream's checkpoint and ingest log, restored and "
                             "kept, with a persistent session at the broker (default: $MERIDIAN_STREAM_STATE_DIR, "
                             "which an agent gives a stream job; none: a run that dies loses what it held)");
  stream_run_cmd->add_option("--stop-after-idle", stream_run.stop_after_idle,
                             "End of input after this long with no record (once one came): write every open window and exit (e.g. 2s; "
                             "default: the spec's end_after_idle)");
  stream_run_cmd->add_option("--device", stream_run.device,
                             "Where windows' figures are computed: auto (the task's GPU when it has one), cpu or gpu")
      ->capture_default_str();
  stream_run_cmd->add_flag("--json", stream_run.json, "Print JSON for scripts");
  cli::BenchServeOptions bench_serve;
  CLI::App* bench_serve_cmd = bench_cmd->add_subcommand(
      "serve", "Requests/s and latency of a model replica (wrk), batching on and off, and the gateway's overhead");
  bench_serve_cmd->add_option("--hidden", bench_serve.hidden, "The MLP's hidden units")->capture_default_str();
  bench_serve_cmd->add_option("--connections", bench_serve.connections, "wrk's connections for the throughput runs")
      ->capture_default_str();
  bench_serve_cmd->add_option("--seconds", bench_serve.seconds, "Length of each run")->capture_default_str();
  bench_serve_cmd->add_option("--max-batch", bench_serve.max_batch, "Batching on: images a batch")->capture_default_str();
  bench_serve_cmd
      ->add_option("--device", bench_serve.device,
                   "Where the replicas' batches run: cpu, gpu (an error without one) or auto")
      ->capture_default_str();
  bench_serve_cmd->add_option("--max-wait-us", bench_serve.max_wait_us, "Batching on: the longest a request waits for a batch")
      ->capture_default_str();
  bench_serve_cmd->add_flag("--json", bench_serve.json, "Print JSON for scripts");

  cli::ReplicaCommandOptions replica;
  CLI::App* replica_cmd =
      app.add_subcommand("replica", "Serve a model (the digits MLP from a trainer's checkpoint) over HTTP/1.1 and HTTP/2, "
                                    "or front a command that serves HTTP");
  CLI::Option* replica_model = replica_cmd->add_option("--model", replica.model, "The checkpoint file");
  CLI::Option* replica_command =
      replica_cmd
          ->add_option("--command-env", replica.command_env,
                       "Or the environment variable holding a command (run by /bin/sh with $PORT set) that serves "
                       "HTTP on 127.0.0.1:$PORT: the replica checks callers' token and forwards to it")
          ->excludes(replica_model);
  replica_model->excludes(replica_command);
  replica_cmd->add_option("--health", replica.health_path, "The command's health path (200: healthy)")
      ->capture_default_str();
  replica_cmd->add_option("--listen", replica.listen, "HOST:PORT (port 0: a free one)")->capture_default_str();
  CLI::Option* replica_token_file =
      replica_cmd->add_option("--token-file", replica.token_file, "File holding the bearer token callers present");
  replica_cmd
      ->add_option("--token-env", replica.token_env,
                   "Or the environment variable holding it (a service's replicas get theirs so)")
      ->excludes(replica_token_file);
  replica_cmd->add_option("--tls-cert", replica.tls_cert, "HTTPS: the certificate chain (PEM; meridian certs issue)");
  replica_cmd->add_option("--tls-key", replica.tls_key, "HTTPS: its key (PEM)");
  replica_cmd->add_option("--tls-cert-env", replica.tls_cert_env,
                          "Or the environment variable holding the certificate as PEM text (a service's replicas)");
  replica_cmd->add_option("--tls-key-env", replica.tls_key_env, "And the one holding its key");
  replica_cmd->add_option("--max-batch", replica.max_batch, "Images a batch (1: batching off)")->capture_default_str();
  replica_cmd->add_option("--max-wait-us", replica.max_wait_us, "The longest the first image of a batch waits")
      ->capture_default_str();
  replica_cmd->add_option("--max-queued-images", replica.max_queued_images, "Images waiting before requests get 503")
      ->capture_default_str();
  replica_cmd
      ->add_option("--device", replica.device,
                   "Where the model's batches run: gpu (GPU 0 of those visible; an error without one), cpu, or auto "
                   "(the GPU when CUDA_VISIBLE_DEVICES names one and it answers, else the CPU)")
      ->capture_default_str();
  cli::GatewayCommandOptions gateway;
  CLI::App* gateway_cmd = app.add_subcommand(
      "gateway", "A region's gateway: routes requests to the nearest healthy replica, retries, sheds load");
  gateway_cmd->add_option("--listen", gateway.listen, "HOST:PORT (port 0: a free one)")->capture_default_str();
  gateway_cmd->add_option("--region", gateway.region, "This gateway's region");
  gateway_cmd->add_option("--replica", gateway.replicas, "A replica: HOST:PORT[@REGION] (repeat)");
  gateway_cmd->add_option("--token-file", gateway.token_file, "File holding the bearer token clients present")
      ->required();
  gateway_cmd->add_option("--replica-token-file", gateway.replica_token_file,
                          "File holding the bearer token the replicas ask for");
  gateway_cmd->add_option("--service", gateway.service,
                          "Or a service's replicas (meridian serve), as the coordinator places them");
  gateway_cmd->add_option("--site", gateway.site,
                          "Or a site's gateway: every service that runs, at /v1/services/NAME/ (meridian up starts "
                          "one per site)");
  gateway_cmd->add_option("--fleet", gateway.fleet,
                          "With --site: the fleet file the site is of; with --service, --region and --autoscale: the "
                          "fleet, to bring the region's replicas that run in their fallback home");
  gateway_cmd->add_option("--watch-interval-ms", gateway.watch_interval_ms,
                          "With --service or --site: how often the services' replicas are read")
      ->capture_default_str();
  gateway_cmd->add_flag("--autoscale", gateway.autoscale,
                        "With --service and --region: scale the region's replicas by the spec's autoscale (and with "
                        "--fleet bring them home); with --site: the regions whose first site of the fleet this is");
  add_target(gateway_cmd, gateway.target);
  gateway_cmd->add_option("--tls-cert", gateway.tls_cert, "HTTPS for clients: the certificate chain (PEM)");
  gateway_cmd->add_option("--tls-key", gateway.tls_key, "HTTPS for clients: its key (PEM)");
  gateway_cmd->add_option("--replica-ca", gateway.replica_ca,
                          "With --replica: speak HTTPS to the replicas, trusting this CA (PEM) alone");
  gateway_cmd->add_option("--replica-tls-name", gateway.replica_tls_name,
                          "With --replica-ca: the name the replicas' certificate must carry");
  gateway_cmd->add_option("--max-inflight", gateway.max_inflight, "Requests in flight to one replica before it is full")
      ->capture_default_str();
  gateway_cmd->add_option("--max-attempts", gateway.max_attempts, "Replicas tried for one request")->capture_default_str();
  gateway_cmd->add_option("--probe-interval-ms", gateway.probe_interval_ms, "Health probes of each replica")
      ->capture_default_str();

  cli::ServeOptions serve;
  CLI::App* serve_cmd = app.add_subcommand(
      "serve", "Start a service (kind: service): its replicas, each a job, in each of its regions");
  serve_cmd->add_option("file", serve.file, "The service spec (YAML)")->required();
  add_target(serve_cmd, serve.target);
  serve_cmd->add_flag("--json", serve.json, "Print JSON for scripts");
  cli::ServicesOptions services;
  CLI::App* services_cmd = app.add_subcommand("services", "List the services that run, by region");
  add_target(services_cmd, services.target);
  services_cmd->add_flag("--json", services.json, "Print JSON for scripts");
  CLI::App* service_cmd = app.add_subcommand("service", "One service: get, token, scale, delete");
  service_cmd->require_subcommand(1);
  cli::ServiceOptions service;
  CLI::App* service_get_cmd = service_cmd->add_subcommand("get", "A service's replicas: where they run, their endpoints");
  CLI::App* service_token_cmd = service_cmd->add_subcommand(
      "token", "The service's clients' token: it calls this service, and no other, at the sites' gateways");
  CLI::App* service_delete_cmd = service_cmd->add_subcommand("delete", "End a service: cancel its replica jobs");
  for (CLI::App* cmd : {service_get_cmd, service_token_cmd, service_delete_cmd}) {
    cmd->add_option("name", service.name, "The service")->required();
    add_target(cmd, service.target);
  }
  service_get_cmd->add_flag("--json", service.json, "Print JSON for scripts");
  service_token_cmd->add_flag("--json", service.json, "Print JSON for scripts");
  cli::ServiceScaleOptions service_scale;
  CLI::App* service_scale_cmd =
      service_cmd->add_subcommand("scale", "Set a region's replicas (within its min and max)");
  service_scale_cmd->add_option("name", service_scale.name, "The service")->required();
  service_scale_cmd->add_option("--region", service_scale.region, "One of the service's regions")->required();
  service_scale_cmd->add_option("--replicas", service_scale.replicas, "Replicas it should have")->required();
  add_target(service_scale_cmd, service_scale.target);

  CLI::App* sensors_cmd = app.add_subcommand("sensors", "Simulated sensors for stream jobs");
  sensors_cmd->require_subcommand(1);
  cli::SensorsSimulateOptions sensors;
  CLI::App* sensors_sim_cmd = sensors_cmd->add_subcommand(
      "simulate", "Publish (device, seq, event_time_ms, value) records to a broker, as sensors would");
  add_mqtt(sensors_sim_cmd, sensors.mqtt);
  sensors_sim_cmd->add_option("--site", sensors.site, "Publish to sensors/SITE/DEVICE");
  sensors_sim_cmd->add_option("--topic-prefix", sensors.topic_prefix, "Publish to PREFIX/DEVICE (default: sensors/SITE)");
  sensors_sim_cmd->add_option("--devices", sensors.devices, "Devices")->capture_default_str();
  sensors_sim_cmd->add_option("--records", sensors.records, "Records per device")->capture_default_str();
  sensors_sim_cmd->add_option("--rate", sensors.rate, "Records a second, all devices together (0: as fast as possible)")
      ->capture_default_str();
  sensors_sim_cmd->add_option("--period", sensors.period, "Event time between a device's records")->capture_default_str();
  sensors_sim_cmd->add_option("--jitter", sensors.jitter, "Event times moved by up to this, either way")
      ->capture_default_str();
  sensors_sim_cmd->add_option("--seed", sensors.seed, "Seed; the same seed publishes the same records")
      ->capture_default_str();
  sensors_sim_cmd->add_flag("--print", sensors.print, "Print TOPIC RECORD lines instead of publishing");

  CLI::App* certs_cmd = app.add_subcommand("certs", "The cluster's CA and certificates, as files");
  certs_cmd->require_subcommand(1);
  cli::CertsOptions certs;
  CLI::App* certs_init_cmd = certs_cmd->add_subcommand("init", "Make a cluster CA (ca.crt, ca.key) in --dir");
  CLI::App* certs_issue_cmd =
      certs_cmd->add_subcommand("issue", "Issue a coordinator's or a client's certificate from the CA in --dir");
  certs_issue_cmd->add_option("kind", certs.kind, "coordinator or client")->required();
  certs_issue_cmd->add_option("--host", certs.hosts, "coordinator: a host name or address clients reach it by (repeat)");
  CLI::App* certs_rotate_cmd = certs_cmd->add_subcommand(
      "rotate", "New keys and certificates for the coordinator and clients in --dir (with --ca, a new CA too)");
  certs_rotate_cmd->add_flag("--ca", certs.ca, "Replace the CA too; the old one stays trusted until nodes rejoin");
  CLI::App* certs_show_cmd = certs_cmd->add_subcommand("show", "The certificates in --dir: names, hosts, expiry");
  for (CLI::App* cmd : {certs_init_cmd, certs_issue_cmd, certs_rotate_cmd, certs_show_cmd}) {
    cmd->add_option("--dir", certs.dir, "The directory of the cluster's certificates")->required();
  }
  for (CLI::App* cmd : {certs_init_cmd, certs_issue_cmd, certs_rotate_cmd}) {
    cmd->add_option("--ttl", certs.ttl, "Lifetime (default: 3650d for a CA, 365d for others)");
  }
  certs_init_cmd->add_option("--name", certs.name, "The CA's name (default meridian-cluster-ca)");
  certs_issue_cmd->add_option("--name", certs.name, "client: the user it names");

  CLI::App* token_cmd = app.add_subcommand("token", "API tokens: create, list, revoke (an admin's)");
  token_cmd->require_subcommand(1);
  cli::TokenOptions token_create, token_list, token_revoke, whoami;
  CLI::App* token_create_cmd = token_cmd->add_subcommand("create", "A new token; printed once");
  token_create_cmd->add_option("--user", token_create.user, "Who it is for")->required();
  token_create_cmd->add_option("--tenant", token_create.tenant, "Their tenant: whose jobs they submit and see (default default)");
  token_create_cmd->add_option("--role", token_create.role,
                               "viewer, submitter (default), admin, or agent (a join token for nodes)");
  token_create_cmd->add_option("--ttl", token_create.ttl, "Lifetime, such as 90d or 1h (default 0: never expires)");
  CLI::App* token_list_cmd = token_cmd->add_subcommand("list", "Tokens: who, role, tenant, expiry (never secrets)");
  CLI::App* token_revoke_cmd = token_cmd->add_subcommand("revoke", "Revoke a token at once");
  token_revoke_cmd->add_option("id", token_revoke.id, "The token's id (from token list)")->required();
  CLI::App* whoami_cmd = app.add_subcommand("whoami", "Who the coordinator takes you for: user, role, tenant");
  CLI::App* tenant_cmd = app.add_subcommand("tenant", "Tenants: weights, quotas and what they use now");
  tenant_cmd->require_subcommand(1);
  cli::TokenOptions tenant_list;
  CLI::App* tenant_list_cmd = tenant_cmd->add_subcommand("list", "Each tenant's weight, quotas, use and jobs");
  for (auto [cmd, o] : {std::pair{token_create_cmd, &token_create}, {token_list_cmd, &token_list},
                        {token_revoke_cmd, &token_revoke}, {whoami_cmd, &whoami}, {tenant_list_cmd, &tenant_list}}) {
    add_target(cmd, o->target);
    cmd->add_flag("--json", o->json, "Print JSON for scripts");
  }

  CLI::App* nodes_cmd = app.add_subcommand("nodes", "Nodes: sites, devices (real or emulated), what they run");
  add_target(nodes_cmd, nodes.target);
  nodes_cmd->add_flag("--json", nodes.json, "Print JSON for scripts");
  cli::NodesOptions status_opts;
  CLI::App* status_cmd =
      app.add_subcommand("status", "The cluster at a glance: coordinator, nodes, jobs, metrics and dashboard URLs");
  add_target(status_cmd, status_opts.target);
  status_cmd->add_flag("--json", status_opts.json, "Print JSON for scripts (metrics_url, dashboard_url, ...)");

  cli::GangMpirunOptions gang_mpirun;
  CLI::App* gang_cmd = app.add_subcommand("gang", "Inside a gang's member: launch programs across the gang");
  gang_cmd->require_subcommand(1);
  CLI::App* gang_mpirun_cmd = gang_cmd->add_subcommand(
      "mpirun", "Every member's command: rank 0 runs mpirun over the gang's ranks, each rank is launched by it");
  gang_mpirun_cmd->add_option("--mpirun-arg", gang_mpirun.mpirun_args, "Passed to mpirun as it is (repeatable)");
  gang_mpirun_cmd->add_option("--mpirun", gang_mpirun.mpirun, "The mpirun program (default: mpirun on PATH)");
  gang_mpirun_cmd->add_option("command", gang_mpirun.command, "-- PROGRAM [ARGS...]")->required();
  cli::GangTrainOptions gang_train;
  CLI::App* gang_train_cmd = gang_cmd->add_subcommand(
      "train", "Every member's command: Meridian's data-parallel trainer (the digits MLP), gradients all-reduced");
  gang_train_cmd->add_option("--data", gang_train.data, "The digits file (csv or csv.gz: sklearn's digits.csv.gz)")
      ->required();
  gang_train_cmd->add_option("--epochs", gang_train.train.epochs, "Passes over the training images")->capture_default_str();
  gang_train_cmd->add_option("--hidden", gang_train.train.hidden, "Hidden units")->capture_default_str();
  gang_train_cmd->add_option("--batch", gang_train.train.batch, "Images a step, over all ranks")->capture_default_str();
  gang_train_cmd->add_option("--learning-rate", gang_train.train.learning_rate, "SGD's step")->capture_default_str();
  gang_train_cmd->add_option("--momentum", gang_train.train.momentum, "SGD's momentum")->capture_default_str();
  gang_train_cmd->add_option("--seed", gang_train.train.seed, "Initial weights, split and order")->capture_default_str();
  gang_train_cmd->add_option("--checkpoint-every", gang_train.train.checkpoint_every,
                             "Steps between checkpoints (0: none), kept as objects by the agent")
      ->capture_default_str();
  gang_train_cmd->add_option("--save-model", gang_train.save_model,
                             "Rank 0 writes the trained model to this file (meridian replica --model serves it)");
  gang_train_cmd->add_option("--algorithm", gang_train.algorithm, "auto, ring or hierarchical")->capture_default_str();
  gang_train_cmd
      ->add_option("--device", gang_train.device,
                   "where gradients are computed: auto (the task's GPU when it has one), cpu or gpu")
      ->capture_default_str();
  // `gang rsh rankK COMMAND...` is read before the parser (main's start): the command
  // is mpirun's, options and all, as ssh would take it. Listed here for --help.
  gang_cmd->add_subcommand("rsh", "mpirun's plm_rsh_agent: rsh rankK COMMAND... runs it in rank K of this gang");

  std::string completion_shell;
  CLI::App* completion_cmd =
      app.add_subcommand("completion", "Print a shell completion script: source <(meridian completion bash)");
  completion_cmd->add_option("shell", completion_shell, "bash")->required()->check(CLI::IsMember({"bash"}));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "meridian: " << e.what() << " (see meridian --help)\n";
    return cli::kExitBadRequest;
  }
  if (Status s = InitLogging(log_level); !s.ok()) {
    std::cerr << "meridian: " << cli::TerminalText(s.message(), true) << '\n';
    return 2;
  }
  Status status;
  int gang_exit = 0;
  if (gang_mpirun_cmd->parsed()) {
    status = cli::RunGangMpirun(gang_mpirun, &gang_exit);
    if (status.ok()) return gang_exit;
  } else if (bench_serve_cmd->parsed()) {
    status = cli::RunBenchServe(bench_serve, std::cout);
  } else if (replica_cmd->parsed()) {
    status = cli::RunReplicaCommand(replica, std::cout);
  } else if (gateway_cmd->parsed()) {
    status = cli::RunGatewayCommand(gateway, std::cout);
  } else if (serve_cmd->parsed()) {
    status = cli::RunServe(serve, std::cout);
  } else if (services_cmd->parsed()) {
    status = cli::RunServices(services, std::cout);
  } else if (service_get_cmd->parsed()) {
    status = cli::RunServiceGet(service, std::cout);
  } else if (service_token_cmd->parsed()) {
    status = cli::RunServiceToken(service, std::cout);
  } else if (service_delete_cmd->parsed()) {
    status = cli::RunServiceDelete(service, std::cout);
  } else if (service_scale_cmd->parsed()) {
    status = cli::RunServiceScale(service_scale, std::cout);
  } else if (bench_stream_cmd->parsed()) {
    status = cli::RunBenchStream(bench_stream, std::cout);
  } else if (stream_run_cmd->parsed()) {
    status = cli::RunStreamCommand(stream_run, std::cout, std::cerr);
  } else if (sensors_sim_cmd->parsed()) {
    status = cli::RunSensorsSimulate(sensors, std::cout);
  } else if (gang_train_cmd->parsed()) {
    status = cli::RunGangTrain(gang_train, std::cout);
  } else if (completion_cmd->parsed()) {
    std::cout << cli::BashCompletion(app);
  } else if (health_cmd->parsed()) {
    status = cli::RunHealth(health, std::cout);
  } else if (fleet_cmd->parsed()) {
    status = cli::RunFleetShow(fleet_show, std::cout);
  } else if (slurm_submit->parsed()) {
    status = cli::RunSlurmSubmit(slurm, std::cout);
  } else if (plan_cmd->parsed()) {
    status = cli::RunPlan(plan, std::cout);
  } else if (sim_cmd->parsed()) {
    status = cli::RunSim(sim, std::cout);
  } else if (bench_sim->parsed()) {
    status = cli::RunBenchSim(bench_sim_opts, std::cout);
  } else if (bench_sched->parsed()) {
    status = cli::RunBenchSched(bench, std::cout);
  } else if (bench_retention->parsed()) {
    status = cli::RunBenchRetention(bench_retention_opts, std::cout);
  } else if (bench_scale->parsed()) {
    status = cli::RunBenchScale(bench_scale_opts, std::cout);
  } else if (scale_agents->parsed()) {
    status = cli::RunBenchScaleAgents(scale_agents_opts);
  } else if (bench_tasks->parsed()) {
    status = cli::RunBenchTasks(bench_tasks_opts, std::cout);
  } else if (bench_py->parsed()) {
    status = cli::RunBenchPyTasks(bench_py_opts, std::cout);
  } else if (bench_transfer->parsed()) {
    StatusOr<int64_t> bytes =
        ParseBytes(!transfer_bytes.empty() ? transfer_bytes : bench_transfer_opts.netns ? "256MiB" : "1GiB");
    StatusOr<int64_t> rate = ParseBandwidthBps(transfer_rate);
    if (!bytes.ok()) {
      status = InvalidArgumentError(fmt::format("--bytes: {}", bytes.status().message()));
    } else if (!rate.ok()) {
      status = InvalidArgumentError(fmt::format("--rate: {}", rate.status().message()));
    } else {
      bench_transfer_opts.bytes = *bytes;
      bench_transfer_opts.rate_bps = *rate;
      status = cli::RunBenchTransfer(bench_transfer_opts, std::cout);
    }
  } else if (bench_allreduce->parsed()) {
    StatusOr<int64_t> bytes = ParseBytes(allreduce_bytes);
    if (!bytes.ok()) {
      status = InvalidArgumentError(fmt::format("--bytes: {}", bytes.status().message()));
    } else {
      bench_allreduce_opts.bytes = *bytes;
      status = cli::RunBenchAllReduce(bench_allreduce_opts, std::cout);
    }
  } else if (bench_gemm->parsed()) {
    status = cli::RunBenchGemm(bench_gemm_opts, std::cout);
  } else if (bench_qsim->parsed()) {
    status = cli::RunBenchQsim(bench_qsim_opts, std::cout);
  } else if (bench_verify->parsed()) {
    status = cli::RunBenchVerify(bench_verify_opts, std::cout);
  } else if (chain_gen_cmd->parsed()) {
    status = cli::RunChainGenerate(chain_gen, std::cout);
  } else if (coord_cmd->parsed()) {
    status = cli::RunCoordinator(coord);
  } else if (agent_cmd->parsed()) {
    status = cli::RunAgent(agent);
  } else if (up_cmd->parsed()) {
    status = cli::RunUp(up, std::cout);
  } else if (down_cmd->parsed()) {
    status = cli::RunDown(down, std::cout);
  } else if (submit_cmd->parsed()) {
    status = cli::RunSubmit(submit, std::cout);
  } else if (run_cmd->parsed()) {
    status = cli::RunRun(run, std::cout, std::cerr);
  } else if (jobs_cmd->parsed()) {
    status = cli::RunJobs(jobs, std::cout);
  } else if (job_get_cmd->parsed()) {
    status = cli::RunJobGet(job_get, std::cout);
  } else if (job_cancel_cmd->parsed()) {
    status = cli::RunJobCancel(job_cancel, std::cout);
  } else if (job_delete_cmd->parsed()) {
    status = cli::RunJobDelete(job_delete, std::cout);
  } else if (job_resubmit_cmd->parsed()) {
    status = cli::RunJobResubmit(job_resubmit, std::cout);
  } else if (job_logs_cmd->parsed()) {
    status = cli::RunJobLogs(job_logs, std::cout);
  } else if (objects_put_cmd->parsed()) {
    status = cli::RunObjectsPut(objects_put, std::cout);
  } else if (objects_get_cmd->parsed()) {
    status = cli::RunObjectsGet(objects_get, std::cout);
  } else if (objects_ls_cmd->parsed()) {
    status = cli::RunObjectsList(objects_ls, std::cout);
  } else if (objects_rm_cmd->parsed()) {
    status = cli::RunObjectsRemove(objects_rm, std::cout);
  } else if (data_put_cmd->parsed()) {
    status = cli::RunDataPut(data_put, std::cout);
  } else if (data_ls_cmd->parsed()) {
    status = cli::RunDataList(data_ls, std::cout);
  } else if (nodes_cmd->parsed()) {
    status = cli::RunNodes(nodes, std::cout);
  } else if (status_cmd->parsed()) {
    status = cli::RunStatus(status_opts, std::cout);
  } else if (certs_init_cmd->parsed()) {
    status = cli::RunCertsInit(certs, std::cout);
  } else if (certs_issue_cmd->parsed()) {
    status = cli::RunCertsIssue(certs, std::cout);
  } else if (certs_rotate_cmd->parsed()) {
    status = cli::RunCertsRotate(certs, std::cout);
  } else if (certs_show_cmd->parsed()) {
    status = cli::RunCertsShow(certs, std::cout);
  } else if (token_create_cmd->parsed()) {
    status = cli::RunTokenCreate(token_create, std::cout);
  } else if (token_list_cmd->parsed()) {
    status = cli::RunTokenList(token_list, std::cout);
  } else if (token_revoke_cmd->parsed()) {
    status = cli::RunTokenRevoke(token_revoke, std::cout);
  } else if (whoami_cmd->parsed()) {
    status = cli::RunWhoAmI(whoami, std::cout);
  } else if (tenant_list_cmd->parsed()) {
    status = cli::RunTenantList(tenant_list, std::cout);
  }
  if (!status.ok()) {
    std::cout.flush();
    std::cerr << "meridian: " << cli::TerminalText(status.message(), true) << '\n';
    return cli::ExitCode(status);
  }
  return 0;
}
