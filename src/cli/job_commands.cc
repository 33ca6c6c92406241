// meridian submit | run | jobs | job get|cancel|logs | nodes: the client commands.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <iostream>
#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "client/client.h"
#include "common/env.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "spec/yaml_reader.h"

namespace meridian::cli {
namespace {

using nlohmann::json;

// Tasks asked for in one call when a command reads all of a job's.
constexpr uint32_t kTasksPerPage = 2000;
// How often `job logs -f` asks for new output.
constexpr int kFollowPollMs = 500;

StatusOr<std::unique_ptr<client::Client>> Connect(const ClusterTarget& target) { return ConnectClient(target); }

std::string Ago(int64_t wall_us) {
  if (wall_us <= 0) return "-";
  int64_t now = Env::Default().clock().WallNow().us;
  return FormatDurationUs(std::max<int64_t>(0, now - wall_us)) + " ago";
}

std::string Elapsed(const model::JobRecord& j) {
  if (j.submitted_us <= 0) return "-";
  int64_t end = j.finished_us > 0 ? j.finished_us : Env::Default().clock().WallNow().us;
  return FormatDurationUs(std::max<int64_t>(0, end - j.submitted_us));
}

// Cut where a character starts: a cell escapes what is not UTF-8, and a character
// cut in two would read as bytes that are not.
std::string FirstLine(const std::string& s, size_t max) {
  std::string line = s.substr(0, s.find('\n'));
  if (line.size() > max) {
    size_t cut = max - 3;
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xc0) == 0x80) --cut;
    line = line.substr(0, cut) + "...";
  }
  return line;
}

json SummaryJson(const model::JobSummary& s) {
  return {{"id", s.job.id},
          {"name", s.job.name},
          {"tenant", s.job.tenant},
          {"state", model::JobStatusName(s.job.status)},
          {"reason", s.job.reason},
          {"submitted_us", s.job.submitted_us},
          {"finished_us", s.job.finished_us},
          {"tasks", {{"total", s.tasks_total},
                     {"waiting", s.waiting},
                     {"running", s.running},
                     {"succeeded", s.succeeded},
                     {"failed", s.failed},
                     {"cancelled", s.cancelled}}},
          {"retries", s.retries},
          {"running_by_site", s.running_by_site}};
}

json TaskJson(const model::TaskView& t) {
  json history = json::array();
  for (const model::AttemptRecord& a : t.history) {
    history.push_back({{"attempt", a.attempt}, {"node", a.node}, {"site", a.site}, {"outcome", a.outcome},
                       {"reason", a.reason}, {"exit_code", a.exit_code}, {"started_us", a.started_us},
                       {"ended_us", a.ended_us}});
  }
  return {{"name", t.name}, {"state", model::TaskStatusName(t.record.status)},
          {"attempts", t.record.attempt}, {"node", t.record.node}, {"site", t.record.site},
          {"device_type", t.record.device_type}, {"emulated", t.record.emulated},
          {"reason", t.record.reason}, {"output", t.record.output}, {"output_object", t.record.output_object},
          {"result", t.result},
          {"started_us", t.record.started_us}, {"finished_us", t.record.finished_us},
          {"history", history}};
}

// The job without its tasks: summary, traffic and where its input was.
json JobJson(const model::JobView& v) {
  json j = SummaryJson(v.summary);
  json traffic = json::array();
  for (const model::JobTraffic& t : v.traffic) {
    traffic.push_back({{"from_site", t.from_site}, {"to_site", t.to_site}, {"bytes", t.bytes}, {"reads", t.objects},
                       {"egress_micro_usd", t.egress_micro_usd}});
  }
  j["traffic"] = traffic;
  json input = json::object();
  for (const model::SiteBytes& b : v.input_bytes) input[b.site] = b.bytes;
  j["input_bytes_by_site"] = input;
  return j;
}

// Writes the job as JSON, its tasks as "task_list", read and written a page at a
// time: a job of a million tasks costs this process one page of memory.
Status StreamJobJson(client::Client& c, uint64_t id, std::ostream& out) {
  bool first_page = true;
  bool first_task = true;
  MERIDIAN_RETURN_IF_ERROR(c.ForEachTaskPage(id, kTasksPerPage, [&](const model::JobView& page) {
    if (first_page) {
      std::string head = JsonText(JobJson(page));
      head.resize(head.size() - 2);  // the closing "\n}"
      out << head << ",\n  \"task_list\": [";
      first_page = false;
    }
    for (const model::TaskView& t : page.tasks) {
      std::string task = JsonText(TaskJson(t));
      size_t at = 0;
      while ((at = task.find('\n', at)) != std::string::npos) task.replace(at, 1, "\n    "), at += 5;
      out << (first_task ? "\n    " : ",\n    ") << task;
      first_task = false;
    }
    return out ? OkStatus() : UnavailableError("cannot write the output");
  }));
  out << (first_task ? "]\n}\n" : "\n  ]\n}\n");
  return OkStatus();
}

std::string Counts(const model::JobSummary& s) {
  return fmt::format("{}/{} done, {} running, {} waiting{}{}{}", s.succeeded, s.tasks_total, s.running, s.waiting,
                     s.failed ? fmt::format(", {} failed", s.failed) : "",
                     s.cancelled ? fmt::format(", {} cancelled", s.cancelled) : "",
                     s.retries ? fmt::format(", {} retries", s.retries) : "");
}

std::string Sites(const std::map<std::string, int32_t>& by_site) {
  std::string out;
  for (const auto& [site, n] : by_site) out += (out.empty() ? "" : ", ") + fmt::format("{} {}", site, n);
  return out;
}

// The data the job's tasks read: from which site at which, and what crossing sites
// cost; then what moving all its raw input to one site first would have sent.
void PrintTraffic(const model::JobView& v, std::ostream& out) {
  if (v.traffic.empty()) return;
  out << "\ndata read by its tasks (input objects, and outputs of tasks at other sites):\n";
  Table t({"from", "to", "bytes", "reads", "egress"});
  int64_t wan = 0, wan_cost = 0;
  for (const model::JobTraffic& x : v.traffic) {
    t.Add({x.from_site, x.to_site == x.from_site ? x.to_site + " (local)" : x.to_site, FormatBytes(x.bytes),
           std::to_string(x.objects), FormatMicroUsd(x.egress_micro_usd)});
    if (x.from_site != x.to_site) {
      wan += x.bytes;
      wan_cost += x.egress_micro_usd;
    }
  }
  t.Print(out, "  ");
  int64_t total = 0;
  const model::SiteBytes* most = nullptr;
  for (const model::SiteBytes& b : v.input_bytes) {
    total += b.bytes;
    if (most == nullptr || b.bytes > most->bytes) most = &b;
  }
  out << fmt::format("WAN: {} crossed sites ({} egress).", FormatBytes(wan), FormatMicroUsd(wan_cost));
  if (most != nullptr && v.input_bytes.size() > 1) {
    const int64_t central = total - most->bytes;
    out << fmt::format(" Moving all {} of raw input to one site first ({}, which holds the most) would send {}",
                       FormatBytes(total), most->site, FormatBytes(central));
    if (central > wan) {
      out << fmt::format(": {} saved ({:.2f}%)", FormatBytes(central - wan),
                         100.0 * static_cast<double>(central - wan) / static_cast<double>(central));
    }
    out << '.';
  }
  out << '\n';
}

// Prints a job read a page at a time: its summary, its first `max_tasks` tasks, and
// the attempts that did not succeed (the first 50, and how many there were).
class JobPrinter {
 public:
  explicit JobPrinter(size_t max_tasks) : max_tasks_(max_tasks) {}

  Status Add(const model::JobView& page) {
    if (!started_) {
      head_ = page;
      head_.tasks.clear();
      started_ = true;
    }
    for (const model::TaskView& task : page.tasks) {
      ++tasks_;
      if (head_.tasks.size() < max_tasks_) head_.tasks.push_back(task);
      for (const model::AttemptRecord& a : task.history) {
        if (a.outcome == "succeeded" || a.outcome == "running") continue;
        if (++failed_attempts_ <= 50) {
          retries_.Add({task.name, std::to_string(a.attempt), a.node, a.outcome, FirstLine(a.reason, 80)});
        }
      }
    }
    return OkStatus();
  }

  void Print(std::ostream& out) {
    const model::JobSummary& s = head_.summary;
    out << fmt::format("job {} ({}), tenant {}: {}{}\n", s.job.id, s.job.name, s.job.tenant,
                       model::JobStatusName(s.job.status), s.job.reason.empty() ? "" : " - " + TerminalText(s.job.reason));
    out << fmt::format("tasks: {}\nsubmitted {}, {} {}\n", Counts(s), Ago(s.job.submitted_us),
                       model::IsTerminal(s.job.status) ? "took" : "running for", Elapsed(s.job));
    if (tasks_ == 0) return;
    out << '\n';
    Table t({"task", "state", "attempts", "node", "site", "device", "output / reason"});
    for (const model::TaskView& task : head_.tasks) {
      const model::TaskRecord& r = task.record;
      std::string device = r.device_type.empty() ? "-" : r.device_type + (r.emulated ? " (emulated)" : "");
      std::string note = r.status == model::TaskStatus::kSucceeded ? FirstLine(r.output, 48) : FirstLine(r.reason, 60);
      t.Add({task.name, std::string(model::TaskStatusName(r.status)), std::to_string(r.attempt),
             r.node.empty() ? "-" : r.node, r.site.empty() ? "-" : r.site, device, note});
    }
    t.Print(out);
    if (tasks_ > head_.tasks.size()) {
      out << fmt::format("... and {} more tasks (--json for all)\n", tasks_ - head_.tasks.size());
    }
    if (failed_attempts_ > 0) {
      out << fmt::format("\nattempts that did not succeed ({}):\n", failed_attempts_);
      retries_.Print(out);
    }
    PrintTraffic(head_, out);
  }

 private:
  const size_t max_tasks_;
  bool started_ = false;
  model::JobView head_;  // the summary and the first max_tasks_ tasks
  size_t tasks_ = 0;
  size_t failed_attempts_ = 0;
  Table retries_{{"task", "attempt", "node", "outcome", "reason"}};
};

// Writes each result's whole output to dir/<task> ('/' in names becomes '_'): fetched
// from the object on the node that made it, or the record's copy when there is none.
Status SaveResults(client::Client& c, uint64_t id, const std::string& dir, std::ostream& out) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return UnavailableError(fmt::format("{}: {}", dir, ec.message()));
  int written = 0;
  int64_t bytes = 0;
  MERIDIAN_RETURN_IF_ERROR(c.ForEachTaskPage(id, kTasksPerPage, [&](const model::JobView& v) -> Status {
  for (const model::TaskView& t : v.tasks) {
    if (!t.result || t.record.status != model::TaskStatus::kSucceeded) continue;
    std::string data = t.record.output;
    if (!t.record.output_object.empty()) {
      StatusOr<std::string> whole = FetchObjectBytes(c, t.record.output_object, "", nullptr, JobOutput{id, t.name});
      if (!whole.ok()) return whole.status().WithPrefix(fmt::format("the output of {}", t.name));
      data = std::move(*whole);
    }
    std::string file = t.name;
    std::replace(file.begin(), file.end(), '/', '_');
    const std::filesystem::path path = std::filesystem::path(dir) / file;
    MERIDIAN_RETURN_IF_ERROR(WriteOutputFile(path, data));
    ++written;
    bytes += static_cast<int64_t>(data.size());
  }
  return OkStatus();
  }));
  out << fmt::format("\n{} result{} ({}) written to {}\n", written, written == 1 ? "" : "s", FormatBytes(bytes), dir);
  return OkStatus();
}

}  // namespace

namespace {

// What submit and resubmit print of an accepted job.
void PrintSubmitted(const rpc::SubmitResult& r, bool as_json, const std::string& what, std::ostream& out) {
  for (const std::string& w : r.warnings) std::cerr << "warning: " << w << '\n';
  if (as_json) {
    out << json{{"id", r.job_id}, {"name", r.name}, {"tasks", r.tasks}, {"warnings", r.warnings}}.dump(2) << '\n';
  } else {
    out << fmt::format("{} job {} ({}, {} tasks); follow it with: meridian job get {}\n", what, r.job_id, r.name,
                       r.tasks, r.job_id);
  }
}

}  // namespace

Status RunSubmit(const SubmitOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string yaml, spec::ReadFileToString(o.job));
  MERIDIAN_ASSIGN_OR_RETURN(auto c, Connect(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(rpc::SubmitResult r, c->Submit(yaml, o.job));
  PrintSubmitted(r, o.json, "submitted", out);
  return OkStatus();
}

Status RunJobResubmit(const JobOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, Connect(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(auto spec, c->JobSpec(o.id));
  // The same spec, checked again against today's fleet and datasets: a new job.
  MERIDIAN_ASSIGN_OR_RETURN(rpc::SubmitResult r, c->Submit(spec.first, spec.second));
  PrintSubmitted(r, o.json, fmt::format("job {} resubmitted as", o.id), out);
  return OkStatus();
}

Status RunRun(const RunJobOptions& o, std::ostream& out, std::ostream& progress) {
  MERIDIAN_ASSIGN_OR_RETURN(std::string yaml, spec::ReadFileToString(o.job));
  StatusOr<int64_t> reconnect_for = ParseDurationUs(o.reconnect_for);
  if (!reconnect_for.ok()) return reconnect_for.status().WithPrefix("--reconnect-for");
  // Ctrl-C and SIGTERM are taken by a thread of ours (below), in every thread the
  // client starts from here on.
  BlockTerminationSignals();
  MERIDIAN_ASSIGN_OR_RETURN(auto c, Connect(o.target));
  const bool tty = isatty(STDERR_FILENO) != 0;
  const bool show = !o.no_progress && !o.json;
  // What the progress line, the ticker and the interrupt handler share.
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  rpc::SubmitResult r;
  std::optional<model::JobSummary> latest;
  const auto start = std::chrono::steady_clock::now();
  auto last_line = start - std::chrono::seconds(10);
  // The bar, the counts, where tasks run and the time so far: redrawn in place on a
  // terminal, else a line at a time. Called with mu held.
  auto draw = [&](const model::JobSummary& s, bool done) {
    const auto now = std::chrono::steady_clock::now();
    last_line = now;
    const int width = 30;
    const int filled = s.tasks_total > 0 ? static_cast<int>(int64_t{width} * s.succeeded / s.tasks_total) : 0;
    const double secs = std::chrono::duration<double>(now - start).count();
    std::string line = fmt::format("[{}{}] {}  {:.1f}s", std::string(filled, '#'), std::string(width - filled, '.'),
                                   Counts(s), secs);
    if (!s.running_by_site.empty()) line += "  at: " + Sites(s.running_by_site);
    progress << (tty ? "\r\033[K" : "") << line << (tty && !done ? "" : "\n") << std::flush;
  };
  auto on_accepted = [&](const rpc::SubmitResult& accepted) {
    std::lock_guard<std::mutex> lock(mu);
    r = accepted;
    for (const std::string& w : r.warnings) progress << "warning: " << w << '\n';
    if (show) progress << fmt::format("job {} ({}): {} tasks submitted to {}\n", r.job_id, r.name, r.tasks, c->address());
  };
  // The job is stored: a coordinator that restarts carries on with it, and so do we.
  auto on_lost = [&](const Status& why) {
    std::lock_guard<std::mutex> lock(mu);
    progress << (tty ? "\n" : "") << fmt::format("lost the coordinator ({}); reconnecting for up to {}\n", why.message(),
                                                   FormatDurationUs(*reconnect_for));
  };
  // The clock ticks though nothing happens: every second on a terminal, every ten
  // seconds in a log.
  std::thread ticker([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!finished) {
      cv.wait_for(lock, std::chrono::seconds(1));
      if (finished || !show || !latest || model::IsTerminal(latest->job.status)) continue;
      if (tty || std::chrono::steady_clock::now() - last_line >= std::chrono::seconds(10)) draw(*latest, false);
    }
  });
  // Ctrl-C leaves the job running (it is the coordinator's now) unless
  // --cancel-on-interrupt: either way the user is told, and the exit is 130.
  std::thread interrupter([&] {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (finished) return;
      }
      const int sig = WaitForTerminationSignalFor(200'000);
      if (sig == 0) continue;
      std::unique_lock<std::mutex> lock(mu);
      if (finished) return;
      std::string message;
      if (r.job_id == 0) {
        message = "interrupted before the coordinator accepted the job; 'meridian jobs' shows whether it did";
      } else if (o.cancel_on_interrupt) {
        const uint64_t id = r.job_id;
        lock.unlock();
        StatusOr<model::JobSummary> cancelled = c->Cancel(id);
        lock.lock();
        message = cancelled.ok() ? fmt::format("interrupted: job {} cancelled", id)
                                 : fmt::format("interrupted; cancelling job {} failed: {}", id,
                                               cancelled.status().message());
      } else {
        message = fmt::format(
            "interrupted: job {} goes on; follow it with 'meridian job get {}', stop it with 'meridian job cancel {}'",
            r.job_id, r.job_id, r.job_id);
      }
      progress << (tty ? "\n" : "") << "meridian: " << message << std::endl;
      out.flush();
      std::_Exit(128 + sig);
    }
  });
  auto stop_threads = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      finished = true;
    }
    cv.notify_all();
    ticker.join();
    interrupter.join();
  };
  // Submitted and followed in one call; the job is stored once accepted.
  StatusOr<model::JobSummary> followed = c->SubmitAndWatch(
      yaml, o.job, on_accepted,
      [&](const model::JobSummary& s) {
        std::lock_guard<std::mutex> lock(mu);
        latest = s;
        if (!show) return true;
        const bool done = model::IsTerminal(s.job.status);
        if (!tty && !done && std::chrono::steady_clock::now() - last_line < std::chrono::seconds(1)) return true;
        draw(s, done);
        return true;
      },
      *reconnect_for, on_lost);
  stop_threads();
  if (!followed.ok()) return followed.status();
  const model::JobSummary last = *followed;
  if (o.json) {
    MERIDIAN_RETURN_IF_ERROR(StreamJobJson(*c, r.job_id, out));
  } else {
    // Where the work ran, then the job's results (outputs no task consumed), read a
    // page of tasks at a time.
    std::map<std::pair<std::string, std::string>, int> placed;
    std::optional<model::JobView> head;
    size_t results = 0;
    std::string shown;
    MERIDIAN_RETURN_IF_ERROR(c->ForEachTaskPage(r.job_id, kTasksPerPage, [&](const model::JobView& page) {
      if (!head) head = page;
      for (const model::TaskView& t : page.tasks) {
        if (t.record.status != model::TaskStatus::kSucceeded) continue;
        placed[{t.record.site, t.record.device_type + (t.record.emulated ? " (emulated)" : "")}]++;
        if (!t.result || ++results > 5) continue;
        std::string output =
            t.record.output.size() > 4096 ? t.record.output.substr(0, 4096) + "\n..." : t.record.output;
        shown += fmt::format("\nresult of {}:\n{}{}", t.name, output,
                             output.empty() || output.back() != '\n' ? "\n" : "");
        if (!model::OutputWholeInline(t.record.output, t.record.output_object)) {
          shown += fmt::format("(the first {}; the whole output is object {}: meridian objects get {})\n",
                               FormatBytes(static_cast<int64_t>(t.record.output.size())), t.record.output_object,
                               t.record.output_object);
        }
      }
      return OkStatus();
    }));
    out << fmt::format("\njob {} ({}) {} in {}: {}\n", r.job_id, r.name, model::JobStatusName(last.job.status),
                       Elapsed(head->summary.job), Counts(head->summary));
    if (!last.job.reason.empty()) out << "reason: " << TerminalText(last.job.reason) << '\n';
    if (!placed.empty()) {
      out << '\n';
      Table t({"site", "device", "tasks"});
      for (const auto& [key, n] : placed) t.Add({key.first, key.second, std::to_string(n)});
      t.Print(out);
    }
    out << shown;
    if (results > 5) out << fmt::format("\n... {} more results (meridian job get {} --json)\n", results - 5, r.job_id);
    PrintTraffic(*head, out);
  }
  if (!o.output_dir.empty()) MERIDIAN_RETURN_IF_ERROR(SaveResults(*c, r.job_id, o.output_dir, out));
  if (last.job.status != model::JobStatus::kSucceeded) {
    return AbortedError(fmt::format("job {} {}{}", r.job_id, model::JobStatusName(last.job.status),
                                    last.job.reason.empty() ? "" : ": " + last.job.reason));
  }
  return OkStatus();
}

Status RunJobs(const JobsOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, Connect(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::JobSummary> jobs, c->ListJobs(o.limit));
  if (o.json) {
    json j = json::array();
    for (const model::JobSummary& s : jobs) j.push_back(SummaryJson(s));
    out << JsonText(j) << '\n';
    return OkStatus();
  }
  if (jobs.empty()) {
    out << "no jobs yet (meridian run JOB.yaml)\n";
    return OkStatus();
  }
  Table t({"id", "name", "state", "tasks", "retries", "submitted", "took"});
  for (const model::JobSummary& s : jobs) {
    t.Add({std::to_string(s.job.id), s.job.name, std::string(model::JobStatusName(s.job.status)),
           fmt::format("{}/{}", s.succeeded, s.tasks_total), std::to_string(s.retries), Ago(s.job.submitted_us),
           Elapsed(s.job)});
  }
  t.Print(out);
  return OkStatus();
}

Status RunJobGet(const JobOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, Connect(o.target));
  if (o.json) return StreamJobJson(*c, o.id, out);
  JobPrinter printer(100);
  MERIDIAN_RETURN_IF_ERROR(
      c->ForEachTaskPage(o.id, kTasksPerPage, [&](const model::JobView& page) { return printer.Add(page); }));
  printer.Print(out);
  return OkStatus();
}

Status RunJobDelete(const JobOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, Connect(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(model::JobSummary s, c->Delete(o.id));
  if (o.json) {
    out << JsonText(SummaryJson(s)) << '\n';
  } else {
    out << fmt::format("job {} ({}) deleted: {} tasks, their attempts and logs\n", s.job.id, s.job.name,
                       s.tasks_total);
  }
  return OkStatus();
}

Status RunJobCancel(const JobOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, Connect(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(model::JobSummary s, c->Cancel(o.id));
  if (o.json) {
    out << JsonText(SummaryJson(s)) << '\n';
  } else {
    out << fmt::format("job {} ({}) cancelled: {}\n", s.job.id, s.job.name, Counts(s));
  }
  return OkStatus();
}

namespace {

// A log stream's byte count as read: at least its tail (stores before schema 8 say 0,
// and a count below the tail would point before it).
int64_t StreamBytes(const std::string& tail, int64_t bytes) {
  return std::max<int64_t>(bytes, static_cast<int64_t>(tail.size()));
}

// `job logs -f`: prints each attempt's output as it comes, once, with a header (as
// tail -f gives one) whenever the stream printed changes; what scrolled out of a log's
// tail before it was read is counted, not hidden. Returns when the job has ended and
// its last output is printed.
Status FollowLogs(client::Client& c, const JobOptions& o, std::ostream& out) {
  // What was printed of each stream: (task, attempt, stderr?) -> bytes.
  std::map<std::tuple<uint32_t, int32_t, bool>, int64_t> printed;
  std::tuple<uint32_t, int32_t, bool> last_source{UINT32_MAX, 0, false};
  bool at_line_start = true;
  // Prints what is new of one attempt's log.
  auto print_new = [&](const rpc::TaskLog& l) {
    for (bool err : {false, true}) {
      const std::string& tail = err ? l.record.stderr_tail : l.record.stdout_tail;
      const int64_t total = StreamBytes(tail, err ? l.record.stderr_bytes : l.record.stdout_bytes);
      const auto key = std::make_tuple(l.record.task, l.record.attempt, err);
      int64_t& done = printed[key];
      if (total <= done) continue;
      if (key != last_source) {
        if (!at_line_start) out << '\n';
        out << fmt::format("==> {} attempt {} on {}{} <==\n", l.task, l.record.attempt, l.record.node,
                           err ? " (stderr)" : "");
        last_source = key;
      }
      const int64_t tail_start = total - static_cast<int64_t>(tail.size());
      if (done < tail_start) {
        out << fmt::format("[meridian: {} not shown: it scrolled out of the log's last {} before it was read]\n",
                           FormatBytes(tail_start - done), FormatBytes(static_cast<int64_t>(model::kMaxTaskLogTailBytes)));
        done = tail_start;
      }
      const std::string_view fresh = std::string_view(tail).substr(static_cast<size_t>(done - tail_start));
      out << fresh;
      at_line_start = fresh.empty() ? at_line_start : fresh.back() == '\n';
      done = total;
    }
  };
  bool ended = false;
  while (true) {
    // The job's state before its logs: once it reads ended, its last logs are stored.
    MERIDIAN_ASSIGN_OR_RETURN(model::JobView job, c.GetJob(o.id, false));
    ended = model::IsTerminal(job.summary.job.status);
    MERIDIAN_RETURN_IF_ERROR(c.ForEachLogPage(o.id, o.task, [&](std::vector<rpc::TaskLog>& logs) {
      for (const rpc::TaskLog& l : logs) print_new(l);
      return OkStatus();
    }));
    out.flush();
    if (ended) {
      if (!at_line_start) out << '\n';
      const model::JobRecord& j = job.summary.job;
      if (j.status == model::JobStatus::kSucceeded) return OkStatus();
      return AbortedError(
          fmt::format("job {} {}{}", j.id, model::JobStatusName(j.status), j.reason.empty() ? "" : ": " + j.reason));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kFollowPollMs));
  }
}

}  // namespace

Status RunJobLogs(const JobOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, Connect(o.target));
  if (o.follow) return FollowLogs(*c, o, out);
  // A page at a time (a job's logs may be gigabytes): each printed as it comes.
  size_t printed = 0;
  MERIDIAN_RETURN_IF_ERROR(c->ForEachLogPage(o.id, o.task, [&](std::vector<rpc::TaskLog>& logs) {
    for (const rpc::TaskLog& l : logs) {
      if (o.json) {
        const json j{{"task", l.task},
                     {"attempt", l.record.attempt},
                     {"node", l.record.node},
                     {"stdout", l.record.stdout_tail},
                     {"stderr", l.record.stderr_tail},
                     {"stdout_bytes", StreamBytes(l.record.stdout_tail, l.record.stdout_bytes)},
                     {"stderr_bytes", StreamBytes(l.record.stderr_tail, l.record.stderr_bytes)},
                     {"running", l.running}};
        // As one array's dump(2) would print it, an element at a time.
        std::string element = JsonText(j);
        for (size_t at = element.find('\n'); at != std::string::npos; at = element.find('\n', at + 1)) {
          element.insert(at + 1, "  ");
        }
        out << (printed == 0 ? "[\n  " : ",\n  ") << element;
      } else {
        out << fmt::format("==> {} attempt {} on {}{} <==\n", l.task, l.record.attempt, l.record.node,
                           l.running ? " (running)" : "");
        if (!l.record.stdout_tail.empty()) {
          out << l.record.stdout_tail << (l.record.stdout_tail.back() == '\n' ? "" : "\n");
        }
        if (!l.record.stderr_tail.empty()) {
          out << "--- stderr ---\n" << l.record.stderr_tail << (l.record.stderr_tail.back() == '\n' ? "" : "\n");
        }
      }
      ++printed;
    }
    out.flush();
    return OkStatus();
  }));
  if (o.json) {
    out << (printed == 0 ? "[]\n" : "\n]\n");
  } else if (printed == 0) {
    out << fmt::format("no logs for job {}{} (built-in kernels write none; a running command's output appears "
                       "here within about a second; -f follows it)\n",
                       o.id, o.task.empty() ? "" : " task " + o.task);
  }
  return OkStatus();
}

Status RunStatus(const NodesOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, Connect(o.target));
  rpc::HttpEndpoints http;
  MERIDIAN_ASSIGN_OR_RETURN(model::Caller me, c->WhoAmI(&http));
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::NodeView> nodes, c->Nodes());
  // The newest jobs the caller may see, counted by status.
  constexpr int32_t kNewest = 1000;
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::JobSummary> jobs, c->ListJobs(kNewest));
  std::map<std::string, int> by_status;
  for (const model::JobSummary& j : jobs) ++by_status[std::string(model::JobStatusName(j.job.status))];
  int alive = 0;
  std::set<std::string> sites;
  std::map<std::string, std::pair<int, double>> devices;  // type -> count, busy
  for (const model::NodeView& n : nodes) {
    sites.insert(n.site);
    if (!n.alive) continue;
    ++alive;
    for (const model::Device& d : n.node.devices) ++devices[d.type].first;
    if (!n.node.devices.empty()) devices[n.node.devices.front().type].second += n.devices_allocated_milli / 1000.0;
  }
  const std::string metrics_url = http.url.empty() ? "" : http.url + "/metrics";
  const std::string dashboard_url = http.url.empty() || !http.dashboard ? "" : http.url + "/";
  if (o.json) {
    json j{{"coordinator", c->address()},
           {"user", me.user},
           {"tenant", me.tenant},
           {"role", model::RoleName(me.role)},
           {"nodes", nodes.size()},
           {"nodes_alive", alive},
           {"sites", sites.size()},
           {"jobs", by_status},
           {"metrics_url", metrics_url.empty() ? json(nullptr) : json(metrics_url)},
           {"dashboard_url", dashboard_url.empty() ? json(nullptr) : json(dashboard_url)}};
    out << JsonText(j) << '\n';
    return OkStatus();
  }
  std::string device_text;
  for (const auto& [type, d] : devices) {
    device_text += fmt::format("{}{} {} ({:g} busy)", device_text.empty() ? "" : ", ", type, d.first, d.second);
  }
  std::string job_text;
  for (const auto& [status, n] : by_status) job_text += fmt::format("{}{} {}", job_text.empty() ? "" : ", ", n, status);
  out << fmt::format("coordinator  {} ({})\n", c->address(),
                     me.user == "(insecure coordinator)" ? "INSECURE" : fmt::format("you are {} ({}, tenant {})", me.user,
                                                                                    model::RoleName(me.role), me.tenant));
  out << fmt::format("nodes        {} alive of {}, at {} sites{}\n", alive, nodes.size(), sites.size(),
                     device_text.empty() ? "" : "; " + device_text);
  out << fmt::format("jobs         {}{}\n", job_text.empty() ? "none" : job_text,
                     jobs.size() == kNewest ? fmt::format(" (of the newest {})", kNewest) : "");
  out << fmt::format("metrics      {}\n", metrics_url.empty() ? "(no HTTPS listener)" : metrics_url);
  out << fmt::format("dashboard    {}\n", dashboard_url.empty()
                                                ? (http.url.empty() ? "(no HTTPS listener)"
                                                                    : "(not built: ./scripts/build-web.sh, then restart "
                                                                      "the coordinator)")
                                                : dashboard_url);
  return OkStatus();
}

Status RunNodes(const NodesOptions& o, std::ostream& out) {
  MERIDIAN_ASSIGN_OR_RETURN(auto c, Connect(o.target));
  MERIDIAN_ASSIGN_OR_RETURN(std::vector<model::NodeView> nodes, c->Nodes());
  if (o.json) {
    json j = json::array();
    for (const model::NodeView& n : nodes) {
      json devices = json::array();
      for (const model::Device& d : n.node.devices) {
        devices.push_back({{"type", d.type}, {"index", d.index}, {"memory_bytes", d.memory_bytes},
                           {"emulated", d.emulated}});
      }
      j.push_back({{"name", n.node.name}, {"site", n.site}, {"state", model::NodeStateName(n)},
                   {"cpu_milli", n.node.cpu_milli}, {"memory_bytes", n.node.memory_bytes}, {"devices", devices},
                   {"running", n.running}, {"cpu_allocated_milli", n.cpu_allocated_milli},
                   {"devices_allocated_milli", n.devices_allocated_milli}, {"load_average", n.load_average},
                   {"heartbeat_age_us", n.heartbeat_age_us},
                   {"price_micro_usd_per_hour", n.node.price_micro_usd_per_hour}});
      json sent = json::array();
      for (const model::LinkTraffic& x : n.sent) {
        sent.push_back({{"to_site", x.to_site}, {"bytes", x.bytes}, {"transfers", x.transfers},
                        {"requests", x.requests}, {"waited_us", x.waited_us},
                        {"egress_micro_usd", x.egress_micro_usd}});
      }
      j.back()["sent"] = sent;
      j.back()["metrics_url"] = n.metrics_url;
      j.back()["host"] = n.host;  // where its tasks listen (a service's replicas)
    }
    out << JsonText(j) << '\n';
    return OkStatus();
  }
  Table t({"node", "site", "state", "devices", "cpu used", "devices used", "tasks", "load", "sent to sites",
           "heartbeat"});
  for (const model::NodeView& n : nodes) {
    // Bytes its transfers sent to other sites (not its own site's reads, nor clients
    // that named no site).
    int64_t wan = 0;
    for (const model::LinkTraffic& x : n.sent) wan += x.to_site != n.site && !x.to_site.empty() ? x.bytes : 0;
    // "A100 x1, T4 x2 emulated": by type, in the node's order.
    std::vector<std::pair<std::string, int>> by_type;
    for (const model::Device& d : n.node.devices) {
      if (by_type.empty() || by_type.back().first != d.type) by_type.emplace_back(d.type, 0);
      ++by_type.back().second;
    }
    std::string devices;
    for (const auto& [type, count] : by_type) devices += fmt::format("{}{} x{}", devices.empty() ? "" : ", ", type, count);
    devices = devices.empty() ? "-" : devices + (n.node.devices.front().emulated ? " emulated" : " real");
    t.Add({n.node.name, n.site, model::NodeStateName(n), devices,
           fmt::format("{}/{}", FormatMilli(n.cpu_allocated_milli), FormatMilli(n.node.cpu_milli)),
           n.node.devices.empty() ? "-"
                                  : fmt::format("{}/{}", FormatMilli(n.devices_allocated_milli),
                                                n.node.devices.size()),
           std::to_string(n.running), fmt::format("{:.2f}", n.load_average), FormatBytes(wan),
           FormatDurationUs(n.heartbeat_age_us) + " ago"});
  }
  t.Print(out);
  return OkStatus();
}

}  // namespace meridian::cli
