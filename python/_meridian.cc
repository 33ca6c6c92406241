// meridian._meridian: the C++ client (src/client) for Python, through pybind11. A
// thin layer: each method is one client call, made with the GIL released, its answer
// turned into plain Python values (dicts, lists, bytes). The package around it
// (python/meridian/) gives them types and adds futures and remote functions.
//
// Errors: a non-OK Status raises the class of meridian.errors named after its code
// (meridian.errors.NotFound for kNotFound...), with the Status's message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/client.h"
#include "client/connect.h"
#include "client/objects.h"
#include "common/status.h"
#include "model/plan_report.h"
#include "model/run_state.h"

namespace py = pybind11;

namespace meridian::python {
namespace {

// A Status as the exception a Python caller catches.
struct StatusError {
  Status status;
};

[[noreturn]] void Raise(const Status& s) { throw StatusError{s}; }

template <typename T>
T Take(StatusOr<T> v) {
  if (!v.ok()) Raise(v.status());
  return *std::move(v);
}

int64_t Micros(double seconds) {
  if (!(seconds > 0) || seconds > 1e6) {
    Raise(InvalidArgumentError("timeout: expected seconds above 0 and at most 1,000,000"));
  }
  return static_cast<int64_t>(seconds * 1e6);
}

py::dict SummaryDict(const model::JobSummary& s) {
  py::dict d;
  d["id"] = s.job.id;
  d["name"] = s.job.name;
  d["tenant"] = s.job.tenant;
  d["state"] = std::string(model::JobStatusName(s.job.status));
  d["reason"] = s.job.reason;
  d["submitted_us"] = s.job.submitted_us;
  d["finished_us"] = s.job.finished_us;
  d["total"] = s.tasks_total;
  d["waiting"] = s.waiting;
  d["running"] = s.running;
  d["succeeded"] = s.succeeded;
  d["failed"] = s.failed;
  d["cancelled"] = s.cancelled;
  d["retries"] = s.retries;
  return d;
}

py::dict TaskDict(const model::TaskView& t) {
  py::dict d;
  d["name"] = t.name;
  d["state"] = std::string(model::TaskStatusName(t.record.status));
  d["attempts"] = t.record.attempt;
  d["node"] = t.record.node;
  d["site"] = t.record.site;
  d["device_type"] = t.record.device_type;
  d["reason"] = t.record.reason;
  d["output"] = py::bytes(t.record.output);
  d["output_object"] = t.record.output_object;
  d["output_whole"] = model::OutputWholeInline(t.record.output, t.record.output_object);
  d["result"] = t.result;
  d["started_us"] = t.record.started_us;
  d["finished_us"] = t.record.finished_us;
  return d;
}

py::dict LocationDict(const model::ObjectLocation& l) {
  py::list replicas;
  for (const model::ObjectReplica& r : l.replicas) {
    py::dict rd;
    rd["node"] = r.node;
    rd["site"] = r.site;
    replicas.append(rd);
  }
  py::dict d;
  d["id"] = l.id;
  d["name"] = l.name;
  d["size"] = l.size;
  d["replicas"] = replicas;
  return d;
}

py::dict NodeDict(const model::NodeView& n) {
  py::dict d;
  d["name"] = n.node.name;
  d["site"] = n.site;
  d["state"] = std::string(model::NodeStateName(n));
  d["running"] = n.running;
  d["cpu_milli"] = n.node.cpu_milli;
  d["cpu_allocated_milli"] = n.cpu_allocated_milli;
  d["memory_bytes"] = n.node.memory_bytes;
  d["memory_allocated_bytes"] = n.memory_allocated_bytes;
  py::list devices;
  for (const model::Device& dev : n.node.devices) devices.append(dev.type);
  d["devices"] = devices;
  d["heartbeat_age_us"] = n.heartbeat_age_us;
  return d;
}

py::dict DatasetDict(const model::DatasetView& v) {
  py::list shards;
  for (const model::ObjectLocation& l : v.shards) shards.append(LocationDict(l));
  py::dict d;
  d["name"] = v.name;
  d["shards"] = shards;
  return d;
}

// Runs `call` without the GIL; its value, or its Status raised.
template <typename F>
auto Blocking(F&& call) {
  auto result = [&] {
    py::gil_scoped_release release;
    return call();
  }();
  return Take(std::move(result));
}

py::dict PlanDict(const model::PlanReport& r) {
  py::list tasks;
  for (const model::PlannedTask& t : r.tasks) {
    py::dict d;
    d["name"] = t.name;
    d["outcome"] = t.outcome;
    d["reason"] = t.reason;
    d["site"] = t.site;
    d["node"] = t.node;
    d["device_type"] = t.device_type;
    d["emulated"] = t.emulated;
    d["start_us"] = t.start_us;
    d["transfer_us"] = t.transfer_us;
    d["compute_us"] = t.compute_us;
    d["finish_us"] = t.finish_us;
    d["cost_micro_usd"] = t.compute_cost_micro_usd + t.egress_cost_micro_usd;
    tasks.append(d);
  }
  py::dict d;
  d["job"] = r.job;
  d["objective"] = r.objective;
  d["nodes"] = r.fleet_nodes;
  d["sites"] = r.fleet_sites;
  d["placed"] = r.placed;
  d["complete"] = r.complete();
  d["makespan_us"] = r.makespan_us;
  d["compute_cost_micro_usd"] = r.compute_cost_micro_usd;
  d["egress_cost_micro_usd"] = r.egress_cost_micro_usd;
  d["tasks"] = tasks;
  d["warnings"] = r.warnings;
  return d;
}

class PyClient {
 public:
  PyClient(const std::string& coordinator, const std::string& dir, const std::string& tls_dir,
           const std::string& token, bool insecure, double timeout_s) {
    client::ClusterTarget target{coordinator, dir, tls_dir, token, insecure};
    const int64_t timeout_us = Micros(timeout_s);
    py::gil_scoped_release release;
    client_ = Take(client::ConnectClient(target, timeout_us));
  }

  std::string address() const { return client_->address(); }

  py::dict WhoAmI() {
    model::Caller c = Blocking([&] { return client_->WhoAmI(); });
    py::dict d;
    d["user"] = c.user;
    d["tenant"] = c.tenant;
    d["role"] = std::string(model::RoleName(c.role));
    return d;
  }

  py::dict Submit(const std::string& spec_yaml, const std::string& spec_name) {
    rpc::SubmitResult r = Blocking([&] { return client_->Submit(spec_yaml, spec_name); });
    py::dict d;
    d["id"] = r.job_id;
    d["name"] = r.name;
    d["tasks"] = r.tasks;
    d["warnings"] = r.warnings;
    return d;
  }

  // Where the spec's tasks would run on the live nodes, when and at what cost; nothing
  // is submitted.
  py::dict Plan(const std::string& spec_yaml, const std::string& spec_name, const std::string& order, uint64_t seed) {
    return PlanDict(Blocking([&] { return client_->Plan(spec_yaml, spec_name, order, seed); }));
  }

  // Follows the job until it ends; the last summary.
  py::dict Wait(uint64_t id) {
    model::JobSummary s = Blocking([&] {
      return client_->Watch(id, [](const model::JobSummary&) { return true; }, kReconnectForUs);
    });
    return SummaryDict(s);
  }

  // Submits and follows the job to its end, in one call; the last summary.
  py::dict SubmitAndWait(const std::string& spec_yaml, const std::string& spec_name) {
    model::JobSummary s = Blocking([&] {
      return client_->SubmitAndWatch(
          spec_yaml, spec_name, [](const rpc::SubmitResult&) {}, [](const model::JobSummary&) { return true; },
          kReconnectForUs);
    });
    return SummaryDict(s);
  }

  py::dict Job(uint64_t id, bool with_tasks) {
    std::vector<model::JobView> pages;
    model::JobSummary summary;
    {
      py::gil_scoped_release release;
      Status s = with_tasks ? client_->ForEachTaskPage(id, kTasksPerPage,
                                                       [&](const model::JobView& v) {
                                                         pages.push_back(v);
                                                         return OkStatus();
                                                       })
                            : OkStatus();
      if (s.ok() && !with_tasks) {
        StatusOr<model::JobView> v = client_->GetJob(id, false);
        if (!v.ok()) s = v.status();
        else pages.push_back(*std::move(v));
      }
      if (!s.ok()) Raise(s);
    }
    py::dict d = SummaryDict(pages.empty() ? summary : pages.back().summary);
    if (with_tasks) {
      py::list tasks;
      for (const model::JobView& v : pages) {
        for (const model::TaskView& t : v.tasks) tasks.append(TaskDict(t));
      }
      d["task_list"] = tasks;
    }
    return d;
  }

  py::list Jobs(int32_t limit) {
    std::vector<model::JobSummary> all = Blocking([&] { return client_->ListJobs(limit); });
    py::list out;
    for (const model::JobSummary& s : all) out.append(SummaryDict(s));
    return out;
  }

  py::dict Cancel(uint64_t id) { return SummaryDict(Blocking([&] { return client_->Cancel(id); })); }
  py::dict Delete(uint64_t id) { return SummaryDict(Blocking([&] { return client_->Delete(id); })); }

  py::list Logs(uint64_t id, const std::string& task) {
    std::vector<rpc::TaskLog> logs = Blocking([&] { return client_->Logs(id, task); });
    py::list out;
    for (const rpc::TaskLog& l : logs) {
      py::dict d;
      d["task"] = l.task;
      d["attempt"] = l.record.attempt;
      d["node"] = l.record.node;
      d["stdout"] = py::bytes(l.record.stdout_tail);
      d["stderr"] = py::bytes(l.record.stderr_tail);
      d["stdout_bytes"] = l.record.stdout_bytes;
      d["stderr_bytes"] = l.record.stderr_bytes;
      d["running"] = l.running;
      out.append(d);
    }
    return out;
  }

  py::list Nodes() {
    std::vector<model::NodeView> nodes = Blocking([&] { return client_->Nodes(); });
    py::list out;
    for (const model::NodeView& n : nodes) out.append(NodeDict(n));
    return out;
  }

  // The whole output of a finished task: its record's copy, or the object on the node
  // that made it when the record holds only its start. As bytes, or with `writable` a
  // bytearray (what NumPy arrays unpickled over it may be written through), copied
  // once from the fetched object.
  py::object TaskOutput(uint64_t job, const std::string& task, const std::string& output,
                        const std::string& output_object, bool writable) {
    auto make = [writable](std::string_view data) -> py::object {
      if (writable) return py::bytearray(data.data(), data.size());
      return py::bytes(data.data(), data.size());
    };
    if (model::OutputWholeInline(output, output_object)) return make(output);
    std::unique_ptr<client::FetchedObject> f = Blocking(
        [&] { return client::FetchObject(*client_, output_object, "", client::JobOutput{job, task}); });
    return make(f->data());
  }

  // Puts the bytes of any contiguous buffer (bytes, bytearray, a NumPy array...) as an
  // object, read in place: no copy is made on this side.
  py::dict Put(const py::buffer& data, const std::string& site, const std::string& name) {
    py::buffer_info info = data.request();
    if (!PyBuffer_IsContiguous(info.view(), 'C')) {
      Raise(InvalidArgumentError("put: the buffer is not contiguous (copy it first, e.g. numpy.ascontiguousarray)"));
    }
    std::string_view bytes(static_cast<const char*>(info.ptr), static_cast<size_t>(info.size * info.itemsize));
    model::ObjectLocation l = Blocking([&] { return client::PutObject(*client_, bytes, site, name, ""); });
    return LocationDict(l);
  }

  py::bytes Get(const std::string& ref, const std::string& site) {
    std::unique_ptr<client::FetchedObject> f = Blocking([&] { return client::FetchObject(*client_, ref, site); });
    return py::bytes(f->data().data(), f->data().size());
  }

  py::dict Locate(const std::string& ref) { return LocationDict(Blocking([&] { return client_->Locate(ref); })); }

  py::dict DeleteObject(const std::string& id) {
    return LocationDict(Blocking([&] { return client_->DeleteObject(id); }));
  }

  py::dict DefineDataset(const std::string& name, const std::vector<std::string>& ids) {
    std::vector<model::HeldObject> shards;
    shards.reserve(ids.size());
    {
      py::gil_scoped_release release;
      for (const std::string& id : ids) {
        model::ObjectLocation l = Take(client_->Locate(id));
        shards.push_back(model::HeldObject{l.id, l.size});
      }
    }
    return DatasetDict(Blocking([&] { return client_->DefineDataset(name, shards); }));
  }

  py::dict Dataset(const std::string& name) { return DatasetDict(Blocking([&] { return client_->GetDataset(name); })); }

  py::list Datasets() {
    std::vector<model::DatasetView> all = Blocking([&] { return client_->Datasets(); });
    py::list out;
    for (const model::DatasetView& d : all) out.append(DatasetDict(d));
    return out;
  }

 private:
  static constexpr uint32_t kTasksPerPage = 1'000;
  // How long a wait keeps trying while the coordinator cannot be reached (it
  // restarts, say) before it gives up with kUnavailable.
  static constexpr int64_t kReconnectForUs = 30'000'000;

  std::unique_ptr<client::Client> client_;
};

}  // namespace
}  // namespace meridian::python

PYBIND11_MODULE(_meridian, m) {
  using meridian::python::PyClient;
  using meridian::python::StatusError;
  m.doc() = "The C++ client of a Meridian coordinator (use the meridian package rather than this module).";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object errors = py::module_::import("meridian.errors");
      py::object cls = errors.attr("for_code")(std::string(meridian::StatusCodeName(e.status.code())));
      PyErr_SetObject(cls.ptr(), py::str(e.status.message()).ptr());
    }
  });

  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string&, const std::string&, const std::string&, const std::string&, bool, double>(),
           py::arg("coordinator") = "", py::arg("dir") = "", py::arg("tls_dir") = "", py::arg("token") = "",
           py::arg("insecure") = false, py::arg("timeout_s") = 10.0)
      .def_property_readonly("address", &PyClient::address)
      .def("whoami", &PyClient::WhoAmI)
      .def("submit", &PyClient::Submit, py::arg("spec_yaml"), py::arg("spec_name") = "python")
      .def("plan", &PyClient::Plan, py::arg("spec_yaml"), py::arg("spec_name") = "python", py::arg("order") = "fifo",
           py::arg("seed") = 1)
      .def("wait", &PyClient::Wait, py::arg("job_id"))
      .def("submit_and_wait", &PyClient::SubmitAndWait, py::arg("spec_yaml"), py::arg("spec_name") = "python")
      .def("job", &PyClient::Job, py::arg("job_id"), py::arg("tasks") = true)
      .def("jobs", &PyClient::Jobs, py::arg("limit") = 100)
      .def("cancel", &PyClient::Cancel, py::arg("job_id"))
      .def("delete", &PyClient::Delete, py::arg("job_id"))
      .def("logs", &PyClient::Logs, py::arg("job_id"), py::arg("task") = "")
      .def("nodes", &PyClient::Nodes)
      .def("task_output", &PyClient::TaskOutput, py::arg("job_id"), py::arg("task"), py::arg("output"),
           py::arg("output_object"), py::arg("writable") = false)
      .def("put", &PyClient::Put, py::arg("data"), py::arg("site") = "", py::arg("name") = "")
      .def("get", &PyClient::Get, py::arg("ref"), py::arg("site") = "")
      .def("locate", &PyClient::Locate, py::arg("ref"))
      .def("delete_object", &PyClient::DeleteObject, py::arg("id"))
      .def("define_dataset", &PyClient::DefineDataset, py::arg("name"), py::arg("object_ids"))
      .def("dataset", &PyClient::Dataset, py::arg("name"))
      .def("datasets", &PyClient::Datasets);
}
