"""Meridian from Python: jobs, objects, datasets, and Python functions as tasks.

Connect to a cluster, then submit jobs (a YAML file, YAML text or a dict, as
``meridian run`` takes them) or run Python functions on its agents::

    import meridian

    client = meridian.connect()            # the local cluster of `meridian up`

    @meridian.remote(cpu=1)
    def square(x):
        return x * x

    print(square.remote(7).result())       # 49, computed on an agent
    futures = client.map(square, range(1000))
    print(sum(client.gather(futures)))

    ref = client.put_buffer(numpy_array)   # an object in an agent's store, no copy here
    client.dataset("frames", [ref])        # a dataset jobs read as dataset://frames

How a function travels: it and its arguments are pickled with cloudpickle; each task
runs this package's ``worker.py`` (by its path here, with this interpreter), which
calls the function and writes the pickled outcomes as the task's output. Large NumPy
arrays (and other protocol-5 buffers) in the arguments and results travel beside the
pickles, never copied into them: the task maps its arguments, the client unpickles
results as views of the bytes it fetched. Futures are
:class:`concurrent.futures.Future`: ``result(timeout)``, ``exception()``,
``add_done_callback``, :func:`concurrent.futures.as_completed` and
:func:`concurrent.futures.wait` all work. A function that raises makes its future
raise the same exception, with the remote traceback added as a note.

Errors are :class:`meridian.errors.MeridianError` subclasses (``NotFound``,
``Unavailable``, ``InvalidArgument``...), each with a message that says what is
wrong. docs/python.md has the whole story.
"""

from __future__ import annotations

import atexit
import base64
import concurrent.futures
import contextlib
import dataclasses
import json
import math
import os
import re
import struct
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import cloudpickle

from . import errors
from . import worker as _worker
from ._meridian import Client as _CClient
from .errors import MeridianError, RemoteError, TaskError

__all__ = [
    "Client",
    "Job",
    "Task",
    "Node",
    "ObjectRef",
    "RemoteFunction",
    "connect",
    "remote",
    "errors",
    "MeridianError",
]

# A call's pickled payload travels in the task's spec (as $MERIDIAN_ARG_PAYLOAD) up to
# this size; a larger one is put as an object and read as the task's input.
INLINE_PAYLOAD_BYTES = 32 * 1024
# An argument's buffer (a NumPy array...) this large or larger is put as an object of
# its own, read in place (pickle protocol 5's out-of-band buffers), never copied into
# the payload; a smaller one costs less to copy than a put.
ARG_OUT_OF_BAND_BYTES = 1 << 20
# At most this many tasks in one map's job (a larger map runs more calls per task).
MAX_TASKS_PER_MAP = 10_000
# Tasks run the worker as a script, so that they load neither this package nor the
# C++ module: only cloudpickle.
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


@dataclasses.dataclass(frozen=True)
class ObjectRef:
    """An object in the cluster's agents: its content-derived id and size."""

    id: str
    size: int
    name: str = ""


@dataclasses.dataclass(frozen=True)
class Task:
    """A task of a job, as the coordinator reports it."""

    name: str
    state: str
    attempts: int
    node: str
    site: str
    reason: str
    result: bool
    output_object: str


@dataclasses.dataclass(frozen=True)
class Node:
    """A node of the cluster, as `meridian nodes` shows it."""

    name: str
    site: str
    state: str
    running: int
    cpu_milli: int
    cpu_allocated_milli: int
    memory_bytes: int
    devices: tuple[str, ...]


class Job:
    """A submitted job: its id, its state, and what it left behind."""

    def __init__(self, client: Client, job_id: int, name: str = "") -> None:
        self._client = client
        self.id = job_id
        self.name = name

    def __repr__(self) -> str:
        return f"Job(id={self.id}, name={self.name!r})"

    def status(self) -> dict[str, Any]:
        """The job's summary now: state ("queued", "running", "succeeded", "failed",
        "cancelled"), reason, and its tasks counted by state."""
        return self._client._c.job(self.id, tasks=False)

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Blocks until the job ends (at most `timeout` seconds: then raises
        TimeoutError); returns its last summary."""
        return _run_in_thread(lambda: self._client._c.wait(self.id), timeout)

    def tasks(self) -> list[Task]:
        view = self._client._c.job(self.id, tasks=True)
        return [_task(t) for t in view["task_list"]]

    def outputs(self) -> dict[str, bytes]:
        """Each finished result task's whole output (a command's stdout, a kernel's
        result), by task name; fetched from the node that holds it when large."""
        view = self._client._c.job(self.id, tasks=True)
        out = {}
        for t in view["task_list"]:
            if t["result"] and t["state"] == "succeeded":
                out[t["name"]] = self._client._c.task_output(self.id, t["name"], t["output"], t["output_object"])
        return out

    def logs(self, task: str = "") -> list[dict[str, Any]]:
        """The tail of each task's stdout and stderr (of one task, when named)."""
        return self._client._c.logs(self.id, task)

    def cancel(self) -> dict[str, Any]:
        return self._client._c.cancel(self.id)


class Client:
    """A connection to a Meridian coordinator. Made by :func:`connect`."""

    def __init__(self, c: _CClient) -> None:
        self._c = c

    def __repr__(self) -> str:
        return f"meridian.Client({self._c.address!r})"

    @property
    def address(self) -> str:
        return self._c.address

    def whoami(self) -> dict[str, str]:
        """Who the coordinator takes this client for: user, tenant, role."""
        return self._c.whoami()

    # ---- jobs

    def submit_job(self, spec: str | os.PathLike | Mapping[str, Any]) -> Job:
        """Submits a job: a YAML file's path, YAML text, or a dict of the same fields
        (docs/job-spec.md). Returns once it is stored."""
        text, name = _spec_text(spec)
        r = self._c.submit(text, name)
        for w in r["warnings"]:
            print(f"meridian: warning: {w}", file=sys.stderr)
        return Job(self, r["id"], r["name"])

    def run_job(self, spec: str | os.PathLike | Mapping[str, Any], timeout: float | None = None) -> Job:
        """Submits a job and waits for it to end (at most `timeout` seconds). The job
        is returned whether it succeeded or not: see ``job.status()["state"]``."""
        text, name = _spec_text(spec)
        summary = _run_in_thread(lambda: self._c.submit_and_wait(text, name), timeout)
        return Job(self, summary["id"], summary["name"])

    def plan(self, spec: str | os.PathLike | Mapping[str, Any], *, order: str = "fifo", seed: int = 1) -> dict[
            str, Any]:
        """Where the job's tasks would run on the live nodes, when, and at what cost,
        as ``meridian plan`` says; nothing is submitted. Returns the plan: ``placed``,
        ``complete``, ``makespan_us``, costs in micro-dollars, and per task its
        ``outcome`` ("placed", "infeasible", "waiting", "blocked"), ``reason``, ``site``
        and ``node``."""
        text, name = _spec_text(spec)
        return self._c.plan(text, name, order, seed)

    def job(self, job_id: int) -> Job:
        s = self._c.job(job_id, tasks=False)
        return Job(self, s["id"], s["name"])

    def jobs(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest jobs' summaries."""
        return self._c.jobs(limit)

    def nodes(self) -> list[Node]:
        return [
            Node(n["name"], n["site"], n["state"], n["running"], n["cpu_milli"], n["cpu_allocated_milli"],
                 n["memory_bytes"], tuple(n["devices"]))
            for n in self._c.nodes()
        ]

    # ---- objects and datasets

    def put_buffer(self, data: Any, *, name: str = "", site: str = "") -> ObjectRef:
        """Puts the bytes of a contiguous buffer (bytes, bytearray, memoryview, a
        NumPy array...) as an object, read in place: nothing is copied here. `site`:
        on a node there; `name`: a name to find it by (never reused)."""
        loc = self._c.put(data, site, name)
        return ObjectRef(loc["id"], loc["size"], loc["name"])

    def get_buffer(self, ref: ObjectRef | str, *, site: str = "") -> bytes:
        """An object's bytes (by ObjectRef, id or name), from the replica at `site`
        when there is one."""
        return self._c.get(_ref_id(ref), site)

    def get_array(self, ref: ObjectRef | str, dtype: Any, shape: Sequence[int] | None = None, *, site: str = ""):
        """An object's bytes as a read-only NumPy array of `dtype` (and `shape`),
        over the fetched bytes without another copy."""
        import numpy

        arr = numpy.frombuffer(self.get_buffer(ref, site=site), dtype=dtype)
        return arr.reshape(shape) if shape is not None else arr

    def delete(self, ref: ObjectRef | str) -> None:
        """Undoes one put of an object by this client's tenant: the node it went to
        lets go of it, and it goes once nothing else holds it (another put, a task
        reading it). Refused (FailedPrecondition) for a dataset's shard, a named
        object, and the last put of one an unfinished job reads."""
        self._c.delete_object(_ref_id(ref))

    def put(self, value: Any, *, name: str = "", site: str = "") -> ObjectRef:
        """Puts any picklable value as an object (cloudpickle); :meth:`get` reads it."""
        return self.put_buffer(cloudpickle.dumps(value), name=name, site=site)

    def get(self, ref: ObjectRef | str, *, site: str = "") -> Any:
        """The value :meth:`put` stored."""
        return cloudpickle.loads(self.get_buffer(ref, site=site))

    def dataset(self, name: str, shards: Sequence[ObjectRef | str] | None = None) -> list[ObjectRef]:
        """With `shards`: defines dataset `name` of those objects, in order (jobs read
        it as dataset://NAME). Without: the dataset's shards."""
        view = self._c.define_dataset(name, [_ref_id(s) for s in shards]) if shards is not None else self._c.dataset(name)
        return [ObjectRef(s["id"], s["size"], s["name"]) for s in view["shards"]]

    def datasets(self) -> dict[str, list[ObjectRef]]:
        return {d["name"]: [ObjectRef(s["id"], s["size"], s["name"]) for s in d["shards"]] for d in self._c.datasets()}

    # ---- functions as tasks

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Runs ``fn(*args, **kwargs)`` as a task; its future (as Dask's
        ``client.submit``). A :class:`RemoteFunction` keeps its resources. An
        argument that is a future (of another call) is replaced by its result: the
        call is submitted once that is done (and fails with its exception if it
        failed)."""
        rf = fn if isinstance(fn, RemoteFunction) else RemoteFunction(fn)
        return self._run_calls(rf, [(args, kwargs)], 1)[0]

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any], chunk_size: int | None = None) -> list[
            concurrent.futures.Future]:
        """Runs ``fn`` over the items of `iterables` (zipped, as the builtin map),
        one future per item, in order. The calls are grouped into tasks of
        `chunk_size` calls each (default: about two tasks per core of the cluster's
        live nodes), which run where the scheduler places them; each call still has its
        own future, result and exception."""
        rf = fn if isinstance(fn, RemoteFunction) else RemoteFunction(fn)
        calls = [(args, {}) for args in zip(*iterables)]
        if not calls:
            return []
        if chunk_size is None:
            cores = sum(n.cpu_milli for n in self.nodes() if n.state == "alive") // 1000
            chunk_size = math.ceil(len(calls) / max(1, 2 * cores))
        if chunk_size < 1:
            raise errors.InvalidArgument(f"chunk_size: expected at least 1, got {chunk_size}")
        chunk_size = max(chunk_size, math.ceil(len(calls) / MAX_TASKS_PER_MAP))
        return self._run_calls(rf, calls, chunk_size)

    def gather(self, futures: Iterable[concurrent.futures.Future], timeout: float | None = None) -> list[Any]:
        """The results of `futures`, in order (the first exception raised)."""
        return [f.result(timeout) for f in futures]

    def map_dataset(self, fn: Callable[[bytes], Any], dataset: str) -> list[concurrent.futures.Future]:
        """Runs ``fn(shard_bytes)`` once per shard of `dataset`, each as a task the
        scheduler places by where that shard lives (moving the data only when that
        is cheaper than computing elsewhere); one future per shard, in order."""
        rf = fn if isinstance(fn, RemoteFunction) else RemoteFunction(fn)
        shards = self.dataset(dataset)
        payload = cloudpickle.dumps((rf.fn, None))  # None: the call's argument is the shard
        if len(payload) * 4 // 3 + 4 > INLINE_PAYLOAD_BYTES:
            raise errors.InvalidArgument(
                f"map_dataset: the pickled function is {len(payload)} bytes; at most about "
                f"{INLINE_PAYLOAD_BYTES * 3 // 4} travel with a dataset's map (pass large data as a put object)")
        task = self._call_task(rf, "call", payload, [], [])
        task["map"] = {"over": f"dataset://{dataset}"}
        futures = [concurrent.futures.Future() for _ in shards]
        return self._start(rf, [task], {f"call/{k}": [f] for k, f in enumerate(futures)}, futures)

    def _call_task(self, rf: RemoteFunction, name: str, payload: bytes, buffers: Sequence[memoryview],
                   puts: list[ObjectRef]) -> dict[str, Any]:
        """A task that runs the worker on `payload`: in its spec when small, else put
        as an object; each of `buffers` (the payload's out-of-band buffers) put as an
        object of its own, read in place. The objects are the task's inputs, in that
        order (object://ID), and are added to `puts`, which the job deletes when it
        ends."""
        task: dict[str, Any] = {
            "name": name,
            # An interpreter option before the script: the agent starts it cold.
            "command": [rf.python, _WORKER] if rf.warm else [rf.python, "-X", "meridian_cold", _WORKER],
            "resources": rf.resources(),
            "retries": rf.retries,
            "args": {},
        }
        if rf.timeout is not None:
            task["timeout"] = f"{int(math.ceil(rf.timeout))}s"
        inputs = []
        if len(payload) * 4 // 3 + 4 <= INLINE_PAYLOAD_BYTES:
            task["args"]["payload"] = base64.b64encode(payload).decode()
        else:
            inputs.append(payload)
        if buffers:
            task["args"]["buffers"] = len(buffers)
            inputs += buffers
        for data in inputs:
            puts.append(self.put_buffer(data))
        if inputs:
            task["inputs"] = [f"object://{ref.id}" for ref in puts[-len(inputs):]]
        return task

    def _run_calls(self, rf: RemoteFunction, calls: list, chunk_size: int) -> list[concurrent.futures.Future]:
        deps = [a for args, kwargs in calls for a in (*args, *kwargs.values()) if isinstance(a, concurrent.futures.Future)]
        if deps:
            return self._run_after(deps, rf, calls, chunk_size)
        return self._run_calls_now(rf, calls, chunk_size)

    def _run_after(self, deps: list[concurrent.futures.Future], rf: RemoteFunction, calls: list,
                   chunk_size: int) -> list[concurrent.futures.Future]:
        """Calls some of whose arguments are futures: submitted once every one of
        those is done, with their results in their place; if one failed, each call's
        future fails with its exception. Each call's future is returned at once (its
        ``job_id`` is set when its job is submitted)."""
        outer = [concurrent.futures.Future() for _ in calls]
        left = [len(deps)]
        lock = threading.Lock()

        def resolve(a: Any) -> Any:
            return a.result() if isinstance(a, concurrent.futures.Future) else a

        def chain(inner: concurrent.futures.Future, f: concurrent.futures.Future) -> None:
            f.job_id = getattr(inner, "job_id", None)  # type: ignore[attr-defined]
            if not f.set_running_or_notify_cancel():
                return  # cancelled while it waited
            e = inner.exception()
            if e is not None:
                f.set_exception(e)
            else:
                f.set_result(inner.result())

        def all_done() -> None:
            try:
                resolved = [(tuple(resolve(a) for a in args), {k: resolve(v) for k, v in kwargs.items()})
                            for args, kwargs in calls]
                inner = self._run_calls_now(rf, resolved, chunk_size)
            except BaseException as e:  # a dependency's exception, or the submission's
                for f in outer:
                    if f.set_running_or_notify_cancel():
                        f.set_exception(e)
                return
            for i, f in zip(inner, outer):
                i.add_done_callback(lambda i, f=f: chain(i, f))

        def one_done(_: concurrent.futures.Future) -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                # Not on the thread that settled the dependency: submitting makes RPCs.
                threading.Thread(target=all_done, daemon=True, name="meridian-after").start()

        for d in deps:
            d.add_done_callback(one_done)
        return outer

    def _run_calls_now(self, rf: RemoteFunction, calls: list, chunk_size: int) -> list[concurrent.futures.Future]:
        futures = [concurrent.futures.Future() for _ in calls]
        tasks = []
        by_task = {}
        puts: list[ObjectRef] = []
        try:
            for i, first in enumerate(range(0, len(calls), chunk_size)):
                name = f"call-{i}"
                buffers: list[memoryview] = []
                payload = cloudpickle.dumps((rf.fn, calls[first:first + chunk_size]), protocol=5,
                                            buffer_callback=_worker.out_of_band(buffers, ARG_OUT_OF_BAND_BYTES))
                tasks.append(self._call_task(rf, name, payload, buffers, puts))
                by_task[name] = futures[first:first + chunk_size]
        except BaseException:
            self._delete_puts(puts)
            raise
        return self._start(rf, tasks, by_task, futures, puts)

    def _delete_puts(self, puts: list[ObjectRef]) -> None:
        """Undoes the puts of a job's calls, once it has ended (or never started)."""
        for ref in puts:
            try:
                self._c.delete_object(ref.id)
            except MeridianError as e:  # the call's result stands; the object stays
                warnings.warn(f"meridian: could not delete call object {ref.id}: {e}", RuntimeWarning, stacklevel=2)

    def _start(self, rf: RemoteFunction, tasks: list[dict[str, Any]], by_task: dict[str, list],
               futures: list[concurrent.futures.Future], puts: Sequence[ObjectRef] = ()) -> list[
            concurrent.futures.Future]:
        spec: dict[str, Any] = {"name": rf.name, "tasks": tasks}
        if rf.site:
            spec["regions"] = [rf.site]
        try:
            job = self.submit_job(spec)
        except errors.InvalidArgument as e:
            self._delete_puts(list(puts))
            # Not the generated spec's line and column: the option that made it.
            raise errors.InvalidArgument(f"remote function {rf.name}: {re.sub(r'^[^:]*:[0-9]+:[0-9]+: ', '', str(e))}") \
                from None
        except BaseException:
            self._delete_puts(list(puts))
            raise
        for f in futures:
            f.set_running_or_notify_cancel()
            f.job_id = job.id  # type: ignore[attr-defined]
        threading.Thread(target=self._settle, args=(job, by_task, futures, list(puts)), daemon=True,
                         name=f"meridian-job-{job.id}").start()
        return futures

    def _settle(self, job: Job, by_task: dict[str, list], futures: list[concurrent.futures.Future],
                puts: list[ObjectRef]) -> None:
        """Waits for the job, gives each future its outcome, then deletes the objects
        its calls were put as."""
        try:
            self._c.wait(job.id)
        except BaseException as e:  # the futures say what went wrong
            for f in futures:
                f.set_exception(e)
            return
        with _finishing(threading.current_thread()):
            try:
                self._settle_futures(job, by_task, futures)
            finally:
                self._delete_puts(puts)

    def _settle_futures(self, job: Job, by_task: dict[str, list], futures: list[concurrent.futures.Future]) -> None:
        """Gives each future of an ended job its call's outcome."""
        try:
            view = self._c.job(job.id, tasks=True)
        except BaseException as e:
            for f in futures:
                f.set_exception(e)
            return
        for t in view["task_list"]:
            mine = by_task.get(t["name"], [])
            where = f"task {t['name']} of job {job.id}"
            try:
                if t["state"] != "succeeded":
                    raise TaskError(self._task_failure(job.id, t))
                # Writable: a result's arrays are views of these bytes, not copies.
                outcomes = _read_outcomes(
                    self._c.task_output(job.id, t["name"], t["output"], t["output_object"], writable=True), where)
                if len(outcomes) != len(mine):
                    raise TaskError(f"{where} returned {len(outcomes)} outcomes for {len(mine)} calls")
            except BaseException as e:
                for f in mine:
                    f.set_exception(e)
                continue
            for f, (pickled, buffers) in zip(mine, outcomes):
                _settle_one(f, pickled, buffers, f"{where} on node {t['node']}")
        for f in futures:  # none should be left; never leave one waiting forever
            if not f.done():
                f.set_exception(TaskError(f"job {job.id} ended without a task for this call"))

    def _task_failure(self, job_id: int, t: dict[str, Any]) -> str:
        why = f"task {t['name']} of job {job_id} {t['state']}"
        if t["reason"]:
            why += f": {t['reason']}"
        try:
            logs = self._c.logs(job_id, t["name"])
        except MeridianError:
            logs = []
        if logs and logs[-1]["stderr"]:
            tail = logs[-1]["stderr"].decode(errors="replace").rstrip().splitlines()[-10:]
            why += "\nits stderr ends with:\n  " + "\n  ".join(tail)
        return why


_RECORD = struct.Struct("<QI")

# Threads finishing a job's calls (results, deletes): the interpreter's exit waits for
# them. A daemon thread whose C++ call returns while Python shuts down is stopped as it
# takes the GIL back, which C++ cannot unwind from (the process aborts: "terminate
# called without an active exception"). One still waiting for its job holds no GIL.
_finishing_threads: set[threading.Thread] = set()
_finishing_lock = threading.Lock()
# How long the exit waits for them, in seconds.
EXIT_WAIT_SECONDS = 60.0


@contextlib.contextmanager
def _finishing(t: threading.Thread):
    with _finishing_lock:
        _finishing_threads.add(t)
    try:
        yield
    finally:
        with _finishing_lock:
            _finishing_threads.discard(t)


@atexit.register
def _wait_for_finishing_threads() -> None:
    deadline = time.monotonic() + EXIT_WAIT_SECONDS
    with _finishing_lock:
        threads = list(_finishing_threads)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))


def _read_outcomes(data: bytearray, where: str) -> list[tuple[memoryview, list[memoryview]]]:
    """The records of a worker's output (worker.write_outcome): each call's pickle and
    its buffers, as views of `data`. Every length is checked against what is there,
    so a damaged or foreign output fails with TaskError, never a huge allocation."""
    mv = memoryview(data)
    magic = _worker.OUTPUT_MAGIC
    if bytes(mv[:len(magic)]) != magic:
        raise TaskError(f"{where}: its output ({len(mv)} bytes) is not a Meridian worker's")
    at, records = len(magic), []
    while at < len(mv):
        if len(mv) - at < _RECORD.size:
            raise TaskError(f"{where}: its output ends inside record {len(records)}")
        size, count = _RECORD.unpack_from(mv, at)
        at += _RECORD.size
        if count > (len(mv) - at) // 8:
            raise TaskError(f"{where}: record {len(records)} claims {count} buffers, more than its output holds")
        sizes = struct.unpack_from(f"<{count}Q", mv, at)
        at += 8 * count
        if size + sum(sizes) > len(mv) - at:
            raise TaskError(f"{where}: record {len(records)} claims {size + sum(sizes)} bytes; "
                            f"{len(mv) - at} are left")
        pickled = mv[at:at + size]
        at += size
        buffers = []
        for n in sizes:
            buffers.append(mv[at:at + n])
            at += n
        records.append((pickled, buffers))
    return records


def _settle_one(f: concurrent.futures.Future, pickled: memoryview, buffers: list[memoryview], where: str) -> None:
    try:
        outcome = cloudpickle.loads(pickled, buffers=buffers)
    except BaseException as e:
        f.set_exception(RemoteError(type(e).__qualname__, f"the outcome cannot be unpickled here: {e}", ""))
        return
    if outcome[0] == "ok":
        f.set_result(outcome[1])
        return
    _, exc, type_name, message, tb = outcome
    if exc is None:
        f.set_exception(RemoteError(type_name, message, tb))
        return
    exc.add_note(f"Remote traceback ({where}):\n{tb.rstrip()}")
    f.set_exception(exc)


class RemoteFunction:
    """A Python function that runs as a task: ``f.remote(*args)`` returns its
    future; ``f(*args)`` still calls it here. Made by :func:`remote`."""

    def __init__(self, fn: Callable[..., Any], *, cpu: float = 1, memory: str | None = None,
                 accelerator: str | None = None, site: str | None = None, retries: int = 0,
                 timeout: float | None = None, python: str | None = None, warm: bool = True) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", "function")
        self.cpu = cpu
        self.memory = memory
        self.accelerator = accelerator
        self.site = site
        self.retries = retries
        self.timeout = timeout
        # The interpreter the agents start: this one, unless said (remote machines).
        self.python = python or os.environ.get("MERIDIAN_PYTHON") or sys.executable
        # Forked from the agent's warm interpreter (shared with the tenant's other
        # tasks there), or an interpreter of its own.
        self.warm = warm
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<meridian remote function {self.name}>"

    def resources(self) -> dict[str, Any]:
        r: dict[str, Any] = {"cpu": f"{int(round(self.cpu * 1000))}m"}
        if self.memory:
            r["memory"] = self.memory
        if self.accelerator:
            r["accelerator"] = self.accelerator
        return r

    def options(self, **overrides: Any) -> RemoteFunction:
        """A copy with other resources (cpu, memory, accelerator, site, retries,
        timeout, python, warm)."""
        kw = dict(cpu=self.cpu, memory=self.memory, accelerator=self.accelerator, site=self.site,
                  retries=self.retries, timeout=self.timeout, python=self.python, warm=self.warm)
        unknown = set(overrides) - set(kw)
        if unknown:
            raise TypeError(f"options: unknown {', '.join(sorted(unknown))}; expected some of {', '.join(kw)}")
        kw.update(overrides)
        return RemoteFunction(self.fn, **kw)

    def remote(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Runs the function with these arguments as a task on the connected cluster."""
        return _default().submit(self, *args, **kwargs)


def remote(fn: Callable[..., Any] | None = None, *, cpu: float = 1, memory: str | None = None,
           accelerator: str | None = None, site: str | None = None, retries: int = 0,
           timeout: float | None = None, python: str | None = None, warm: bool = True):
    """Makes a function a :class:`RemoteFunction`, as a decorator (``@remote`` or
    ``@remote(cpu=2, accelerator="A100", site="eu-west")``).

    cpu: cores per call's task (fractions allowed); memory: "512MiB"...; accelerator:
    a device type the task needs; site: a site, region or prefix it must run in;
    retries: attempts after a failed one; timeout: seconds per task; python: the
    interpreter the agents start (default: this one); warm: each task forks from the
    agent's warm interpreter, which has already started and imported cloudpickle
    (tens of milliseconds less a task), or, False, starts an interpreter of its own
    (nothing shared with the tenant's earlier tasks there, such as the hash seed)."""
    opts = dict(cpu=cpu, memory=memory, accelerator=accelerator, site=site, retries=retries, timeout=timeout,
                python=python, warm=warm)
    if fn is not None:
        return RemoteFunction(fn, **opts)
    return lambda f: RemoteFunction(f, **opts)


_default_client: Client | None = None
_default_lock = threading.Lock()


def connect(address: str | None = None, *, dir: str | None = None, tls_dir: str | None = None,
            token: str | None = None, insecure: bool = False, timeout: float = 10.0) -> Client:
    """Connects to a coordinator and makes it the one ``f.remote()`` uses.

    address: "HOST:PORT" or "meridian://HOST:PORT"; default $MERIDIAN_COORDINATOR,
    else the local cluster in `dir` (default $MERIDIAN_HOME, else ~/.meridian).
    tls_dir: the CA and client certificate (default $MERIDIAN_TLS_DIR, else the local
    cluster's); token: the user's API token (default $MERIDIAN_TOKEN, else the local
    cluster's admin token); insecure: plaintext, to a coordinator started so. The
    coordinator is asked who this client is, so a wrong address or credential fails
    here."""
    global _default_client
    if address and "://" in address:
        scheme, _, address = address.partition("://")
        if scheme not in ("meridian", "grpc", "grpcs"):
            raise errors.InvalidArgument(f"address: expected HOST:PORT or meridian://HOST:PORT, got scheme {scheme!r}")
    c = Client(_CClient(address or "", dir or "", tls_dir or "", token or "", insecure, timeout))
    c.whoami()
    with _default_lock:
        _default_client = c
    return c


def _default() -> Client:
    with _default_lock:
        if _default_client is None:
            raise MeridianError("not connected: call meridian.connect() first")
        return _default_client


def _spec_text(spec: str | os.PathLike | Mapping[str, Any]) -> tuple[str, str]:
    if isinstance(spec, Mapping):
        # JSON is YAML: the coordinator reads it as a spec file.
        return json.dumps(spec), f"{spec.get('name', 'job')}.yaml"
    s = os.fspath(spec)
    if "\n" not in s and (s.endswith((".yaml", ".yml", ".json")) or os.path.exists(s)):
        with open(s, encoding="utf-8") as f:
            return f.read(), os.path.basename(s)
    return s, "job.yaml"


def _ref_id(ref: ObjectRef | str) -> str:
    return ref.id if isinstance(ref, ObjectRef) else ref


def _task(t: dict[str, Any]) -> Task:
    return Task(t["name"], t["state"], t["attempts"], t["node"], t["site"], t["reason"], t["result"],
                t["output_object"])


def _run_in_thread(call: Callable[[], Any], timeout: float | None) -> Any:
    """Runs a blocking call on a daemon thread, so that the caller's wait can time out
    and Ctrl-C interrupts it; the call itself ends with its job."""
    box: concurrent.futures.Future = concurrent.futures.Future()

    def body() -> None:
        try:
            box.set_result(call())
        except BaseException as e:
            box.set_exception(e)

    threading.Thread(target=body, daemon=True).start()
    try:
        return box.result(timeout)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"not finished within {timeout} s") from None
