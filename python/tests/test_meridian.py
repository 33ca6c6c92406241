"""The meridian package against a real local cluster (conftest.py): connecting,
jobs, remote functions and map, exceptions, objects with NumPy arrays, datasets."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import time

import cloudpickle
import numpy as np
import pytest

import meridian
from meridian import errors

# The functions below are defined in this test module, which the agents' worker
# cannot import: they travel by value, as functions of a script's __main__ do.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

TIMEOUT = 120


class Odd(Exception):
    pass


def add(a, b):
    return a + b


def fail_on_three(x):
    if x == 3:
        raise ValueError(f"bad {x}")
    return x


def where():
    return os.environ["MERIDIAN_SITE"], os.environ["MERIDIAN_NODE"]


def test_connect_whoami_and_nodes(client):
    assert client.whoami()["role"] == "admin"
    nodes = sorted(client.nodes(), key=lambda n: n.name)
    assert [(n.name, n.site, n.state, n.cpu_milli) for n in nodes] == [
        ("east-cpu", "east", "alive", 2000),
        ("west-a100", "west", "alive", 2000),
    ]
    assert nodes[1].devices == ("A100",)


def test_connect_errors_name_what_is_wrong(cluster_dir, tmp_path):
    with pytest.raises(errors.Unavailable, match=f"no local cluster in {tmp_path}"):
        meridian.connect(dir=str(tmp_path))
    with pytest.raises(errors.Unauthenticated):
        meridian.connect(dir=cluster_dir, token="mrd_0123456789abcdef_" + "x" * 43)
    with pytest.raises(errors.InvalidArgument, match="scheme 'http'"):
        meridian.connect("http://127.0.0.1:1")


def test_remote_function_runs_on_an_agent(client):
    square = meridian.remote(lambda x: x * x)
    f = square.remote(7)
    assert f.result(TIMEOUT) == 49
    # Called here, it is the plain function.
    assert square(8) == 64


def test_site_places_the_task(client):
    for site in ("east", "west"):
        got_site, node = meridian.remote(where, site=site).remote().result(TIMEOUT)
        assert got_site == site
        assert node == {"east": "east-cpu", "west": "west-a100"}[site]


def test_map_keeps_order_and_groups_calls_into_tasks(client):
    futures = client.map(add, range(100), range(100, 200))
    assert client.gather(futures, TIMEOUT) == [i + 100 + i for i in range(100)]
    # 4 cores in the cluster: two tasks a core, 13 calls each, the last 9.
    job = client.job(futures[0].job_id)
    tasks = job.tasks()
    assert len(tasks) == 8
    assert all(t.state == "succeeded" for t in tasks)
    assert job.status()["succeeded"] == 8


def test_futures_as_arguments_pass_their_results(client):
    a = meridian.remote(add).remote(1, 2)
    b = client.submit(add, a, b=10)  # submitted once a is done, with a's result
    assert b.result(TIMEOUT) == 13
    assert b.job_id != a.job_id
    assert client.gather(client.map(add, [a, b], [100, 200]), TIMEOUT) == [103, 213]
    # A failed argument fails the call that needs it, with its exception; no job runs.
    bad = client.submit(fail_on_three, 3)
    after = client.submit(add, bad, 1)
    with pytest.raises(ValueError, match="^bad 3$"):
        after.result(TIMEOUT)
    assert getattr(after, "job_id", None) is None


def test_a_script_that_exits_right_after_a_result_exits_cleanly(cluster_dir):
    # The call's argument was put as an object, deleted after the result is given:
    # the exit waits for that (a daemon thread stopped inside the C++ call aborted it).
    script = ("import numpy as np, meridian\n"
              f"meridian.connect(dir={cluster_dir!r})\n"
              "print(meridian.remote(lambda a: float(a.sum())).remote(np.ones(1 << 19)).result(60))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))
    assert (done.returncode, done.stdout, done.stderr) == (0, "524288.0\n", "")


def test_exceptions_come_back_with_their_traceback(client):
    futures = client.map(fail_on_three, range(6), chunk_size=6)
    done, _ = concurrent.futures.wait(futures, TIMEOUT)
    assert len(done) == 6
    assert [f.result() for i, f in enumerate(futures) if i != 3] == [0, 1, 2, 4, 5]
    e = futures[3].exception()
    assert type(e) is ValueError
    assert str(e) == "bad 3"
    note = "\n".join(e.__notes__)
    assert "Remote traceback (task call-0 of job" in note
    assert 'raise ValueError(f"bad {x}")' in note


def test_an_exception_class_only_the_remote_side_has(client):
    def raise_local_class():
        class Private(Exception):
            def __reduce__(self):
                raise TypeError("not picklable")

        raise Private("only here")

    e = client.submit(raise_local_class).exception(TIMEOUT)
    assert type(e) is errors.RemoteError
    assert e.remote_type == "test_an_exception_class_only_the_remote_side_has.<locals>.raise_local_class.<locals>.Private"
    assert "only here" in str(e)
    assert "raise Private(\"only here\")" in e.remote_traceback


def test_a_task_that_dies_fails_its_futures_saying_why(client):
    def die():
        print("about to exit", file=sys.stderr)
        os._exit(3)

    e = client.submit(die).exception(TIMEOUT)
    assert type(e) is errors.TaskError
    assert "failed: exit code 3" in str(e)
    assert "about to exit" in str(e)


def test_large_arguments_and_results_travel_as_objects(client):
    arr = np.arange(1 << 18, dtype=np.float64)  # 2 MiB: more than a spec carries

    def stats(a):
        # A 2 MiB result: more than a task's record.
        return float(a.sum()), a.flags.owndata, a.flags.writeable, a * 2

    before = set(client.datasets())
    f = client.submit(stats, arr)
    total, owndata, writeable, doubled = f.result(TIMEOUT)
    assert total == float((1 << 18) * ((1 << 18) - 1) // 2)
    # The array was put as an object of its own, read in place (the small payload
    # rode in the spec), and the task mapped it: a view, not a copy, still writable.
    [task] = client.job(f.job_id).tasks()
    assert task.state == "succeeded"
    assert (owndata, writeable) == (False, True)
    # Read by id (object://), with no dataset defined for it; deleted once the job
    # ended: the same bytes put and deleted here leave nothing behind.
    assert set(client.datasets()) == before
    mine = client.put_buffer(arr)
    assert mine.size == 1 << 21
    client.delete(mine)
    gone = False
    for _ in range(100):
        try:
            client._c.locate(mine.id)
        except errors.NotFound:
            gone = True
            break
        time.sleep(0.1)
    assert gone, f"object {mine.id} is still held after its puts were deleted"
    assert doubled.shape == (1 << 18,)
    assert np.array_equal(doubled, arr * 2)
    assert doubled.flags.writeable and not doubled.flags.owndata
    # Two equal arrays are one object (ids come from content), still two arguments.
    assert client.submit(lambda a, b: float((a - b).sum()) + len({id(a), id(b)}), arr, arr.copy()).result(
        TIMEOUT) == 2.0


def test_objects_and_numpy_arrays(client):
    arr = np.arange(1 << 20, dtype=np.float32)
    ref = client.put_buffer(arr)
    assert ref.size == 4 * (1 << 20)
    back = client.get_array(ref, np.float32)
    assert back.dtype == np.float32
    assert np.array_equal(back, arr)
    assert client.get_array(ref.id, np.float32, (1024, 1024))[1023, 1023] == float((1 << 20) - 1)
    value = {"weights": [1.5, 2.5], "name": "mlp"}
    assert client.get(client.put(value)) == value
    with pytest.raises(errors.NotFound):
        client.get_buffer("0" * 32)
    # Deleting undoes one put: a second delete of an object put once is refused (no
    # put left; or, once the node's heartbeat said it dropped it, no such object).
    client.delete(ref)
    with pytest.raises((errors.FailedPrecondition, errors.NotFound),
                       match=f"^(tenant '[^']+' has no put of object {ref.id} to undo|no object {ref.id} in the cluster)"):
        client.delete(ref)


def test_datasets_read_by_jobs(client, tmp_path):
    refs = [client.put_buffer(b"a" * 1000, site="east"), client.put_buffer(b"b" * 3000, site="west")]
    assert [s.id for s in client.dataset("pyparts", refs)] == [r.id for r in refs]
    assert [s.size for s in client.dataset("pyparts")] == [1000, 3000]
    assert [s.size for s in client.datasets()["pyparts"]] == [1000, 3000]
    job = client.run_job({
        "name": "count-parts",
        "tasks": [{"name": "count", "map": {"over": "dataset://pyparts"},
                   "command": ["sh", "-c", 'wc -c < "$MERIDIAN_INPUTS/0"']}],
    }, timeout=TIMEOUT)
    assert job.status()["state"] == "succeeded"
    assert {k: v.strip() for k, v in job.outputs().items()} == {"count/0": b"1000", "count/1": b"3000"}
    with pytest.raises(errors.FailedPrecondition, match="is a shard of a dataset; datasets are kept for good"):
        client.delete(refs[0])


def test_yaml_jobs_and_their_errors(client, tmp_path):
    spec = tmp_path / "hello.yaml"
    spec.write_text("name: hello\ntasks:\n  - {name: hi, command: [echo, hi]}\n")
    job = client.run_job(str(spec), timeout=TIMEOUT)
    assert job.outputs() == {"hi": b"hi\n"}
    assert [l["stdout"] for l in job.logs("hi")] == [b"hi\n"]
    with pytest.raises(errors.InvalidArgument, match="unknown field 'comand'"):
        client.submit_job("name: bad\ntasks:\n  - {name: x, comand: [true]}\n")
    with pytest.raises(errors.NotFound):
        client.job(999_999)


def test_the_cli_sees_what_python_submitted(client, cluster_dir, meridian_bin):
    job = client.submit_job({"name": "seen", "tasks": [{"name": "t", "command": ["true"]}]})
    job.wait(TIMEOUT)
    out = subprocess.run([meridian_bin, "job", "get", str(job.id), "--dir", cluster_dir], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "seen" in out.stdout and "succeeded" in out.stdout


def test_map_over_a_datasets_shards(client):
    refs = [client.put_buffer(bytes([65 + k]) * (100 * (k + 1)), site=("east", "west")[k % 2]) for k in range(3)]
    client.dataset("pyshards", refs)

    def describe(shard: bytes):
        return len(shard), shard[:1].decode(), os.environ["MERIDIAN_TASK"]

    futures = client.map_dataset(describe, "pyshards")
    assert client.gather(futures, TIMEOUT) == [(100, "A", "call/0"), (200, "B", "call/1"), (300, "C", "call/2")]
    with pytest.raises(errors.NotFound):
        client.map_dataset(describe, "no-such-dataset")


def test_the_example_runs_as_the_readme_says(cluster_dir):
    example = os.path.join(os.environ.get("MERIDIAN_SOURCE_DIR", "."), "examples", "python", "parallel.py")
    env = dict(os.environ, MERIDIAN_HOME=cluster_dir)
    out = subprocess.run([sys.executable, example], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    # The same figures, computed here.
    import importlib.util

    spec = importlib.util.spec_from_file_location("parallel_example", example)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    inside = sum(ex.darts(s) for s in range(32))
    _, trace = ex.matmul_trace(256, 7)
    lines = out.stdout.splitlines()
    assert lines[0].startswith("connected to ") and lines[0].endswith(": 2 nodes at 2 sites")
    assert lines[1] == f"pi is about {4 * inside / (32 * ex.SAMPLES):.5f} ({inside} of {32 * ex.SAMPLES} darts inside)"
    assert lines[2] == f"trace(A A^T) = {trace:.1f} on CPU (device A100, emulated)"


def test_a_remote_function_the_cluster_cannot_run_is_refused_saying_why(client):
    def one():
        return 1

    with pytest.raises(errors.InvalidArgument) as e:
        meridian.remote(one, accelerator="H100").remote()
    assert str(e.value) == ("remote function one: task 'call-0' can never run on this cluster: 0 of 2 nodes can run "
                            "it: 2 nodes have no H100")
    with pytest.raises(errors.InvalidArgument) as e:
        meridian.remote(one, site="nowhere").remote()
    assert str(e.value) == "remote function one: regions: 'nowhere' matches no site, region or region prefix of the fleet"
    with pytest.raises(TypeError, match="options: unknown gpu"):
        meridian.remote(one).options(gpu=1)


def _parent():
    import os
    return os.getppid()


def test_calls_fork_from_the_agents_warm_interpreter_unless_told_not_to(client):
    warm = meridian.remote(_parent, site="east")
    cold = warm.options(warm=False)
    first, second = warm.remote().result(TIMEOUT), warm.remote().result(TIMEOUT)
    own = cold.remote().result(TIMEOUT)

    def cmdline(pid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")

    # Both warm calls' parent is the one interpreter (python -c ...); the cold call's
    # is the agent itself.
    assert first == second
    assert cmdline(first)[1] == b"-c"
    assert own != first
    assert b"agent" in cmdline(own)


def test_bench_py_tasks_prints_both_figures_from_one_run(meridian_bin):
    import json
    import math

    out = subprocess.run([meridian_bin, "bench", "py-tasks", "--tasks", "200", "--repeat", "1", "--ungrouped", "4",
                          "--single", "3", "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    m, d = j["meridian"], j["dask"]
    assert j["tasks"] == 200
    # One agent with this machine's cores: two tasks a core.
    assert m["job_tasks"] == math.ceil(200 / math.ceil(200 / (2 * j["cores"])))
    assert d["job_tasks"] == 200
    assert m["one_call_per_task"]["calls"] == 4
    assert m["tasks_per_second"] == 200 / m["best_seconds"]
    assert d["tasks_per_second"] == 200 / d["best_seconds"]
    assert j["ratio"] == m["tasks_per_second"] / d["tasks_per_second"]
    warm, cold = m["single_call_warm"], m["single_call_cold"]
    assert (warm["calls"], cold["calls"]) == (3, 3)
    assert j["single_call_p50_ms"] == warm["p50_ms"] and j["single_call_cold_p50_ms"] == cold["p50_ms"]
    assert j["warm_ratio"] == cold["p50_ms"] / warm["p50_ms"]
    bad = subprocess.run([meridian_bin, "bench", "py-tasks", "--tasks", "0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--tasks: expected 1 to 10,000,000" in bad.stderr


def test_plan_says_where_tasks_would_run_and_submits_nothing(client):
    before = len(client.jobs(1000))
    plan = client.plan({"name": "planned", "tasks": [
        {"name": "gpu", "command": ["true"], "resources": {"accelerator": "A100"}},
        {"name": "big", "command": ["true"], "resources": {"cpu": 64}},
    ]})
    assert (plan["job"], plan["nodes"], plan["sites"], plan["placed"], plan["complete"]) == ("planned", 2, 2, 1, False)
    gpu, big = plan["tasks"]
    assert (gpu["name"], gpu["outcome"], gpu["site"], gpu["node"]) == ("gpu", "placed", "west", "west-a100")
    assert (big["name"], big["outcome"]) == ("big", "infeasible")
    assert "64" in big["reason"]
    assert len(client.jobs(1000)) == before
