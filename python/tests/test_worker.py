"""The worker's side of a remote call, without a cluster: worker.py run as an agent
runs it (a task directory with its inputs, its arguments in the environment), and
the client reading what it wrote. Large buffers travel out of band both ways:
arguments mapped from the task's inputs, results after their pickles."""

from __future__ import annotations

import base64
import concurrent.futures
import os
import struct
import subprocess
import sys

import cloudpickle
import numpy as np
import pytest

import meridian
from meridian import _read_outcomes, _settle_one, worker
from meridian.errors import TaskError

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MiB = 1 << 20


def run_worker(tmp_path, payload: bytes, inputs: list[bytes], inline: bool = True, buffers: int = 0) -> bytes:
    """Runs worker.py as the agent would and returns its standard output."""
    inputs_dir = tmp_path / "inputs"
    inputs_dir.mkdir()
    if not inline:
        inputs = [payload] + inputs
    for k, data in enumerate(inputs):
        (inputs_dir / str(k)).write_bytes(data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MERIDIAN_")}
    env["MERIDIAN_INPUTS"] = str(inputs_dir)
    if inline:
        env["MERIDIAN_ARG_PAYLOAD"] = base64.b64encode(payload).decode()
    if buffers:
        env["MERIDIAN_ARG_BUFFERS"] = str(buffers)
    done = subprocess.run([sys.executable, worker.__file__], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def pickle_calls(fn, calls, at_least: int = meridian.ARG_OUT_OF_BAND_BYTES) -> tuple[bytes, list[memoryview]]:
    buffers: list[memoryview] = []
    payload = cloudpickle.dumps((fn, calls), protocol=5, buffer_callback=worker.out_of_band(buffers, at_least))
    return payload, buffers


def describe(a):
    """What the function saw: not a copy of its own, writable, and its sum."""
    before = float(a.sum())
    a[0] = -1.0  # copy-on-write: the task's input file is not changed
    return a.flags.owndata, a.flags.writeable, before, a.shape


def test_a_large_argument_is_mapped_from_its_input_not_copied(tmp_path):
    arr = np.arange(2 * MiB // 8, dtype=np.float64).reshape(512, 512)
    payload, buffers = pickle_calls(describe, [((arr,), {})])
    # The 2 MiB left the payload: one buffer, over the array's own memory.
    assert len(buffers) == 1 and buffers[0].nbytes == 2 * MiB
    assert np.shares_memory(np.frombuffer(buffers[0], dtype=np.float64), arr)
    assert len(payload) < 4096
    out = run_worker(tmp_path, payload, [bytes(buffers[0])], buffers=1)
    [(pickled, result_buffers)] = _read_outcomes(bytearray(out), "test")
    assert result_buffers == []
    status, (owndata, writeable, total, shape) = cloudpickle.loads(pickled)
    assert status == "ok"
    assert (owndata, writeable, total, shape) == (False, True, float(arr.size * (arr.size - 1) // 2), (512, 512))
    assert (tmp_path / "inputs" / "0").read_bytes() == bytes(buffers[0])  # not written back


def test_a_large_payload_and_its_buffers_are_inputs_in_order(tmp_path):
    # A payload over the inline limit is input 0; the buffers follow it.
    big_list = list(range(20_000))
    arrays = [np.full(MiB // 4, k, dtype=np.int32) for k in (3, 5)]
    payload, buffers = pickle_calls(lambda xs, a, b: (len(xs), int(a[0]), int(b[-1])), [((big_list, *arrays), {})])
    assert len(payload) > meridian.INLINE_PAYLOAD_BYTES and len(buffers) == 2
    out = run_worker(tmp_path, payload, [bytes(b) for b in buffers], inline=False, buffers=2)
    [(pickled, _)] = _read_outcomes(bytearray(out), "test")
    assert cloudpickle.loads(pickled) == ("ok", (20_000, 3, 5))


def fill(x):
    # One buffer the calls share, changed by each: every result is what it was when
    # its call returned.
    global shared
    if "shared" not in globals():
        shared = np.zeros(MiB // 8)
    shared[:] = x
    return shared


def test_results_travel_out_of_band_as_they_were_returned(tmp_path):
    payload, _ = pickle_calls(fill, [((k,), {}) for k in range(4)] + [(("x",), {})])
    out = bytearray(run_worker(tmp_path, payload, []))
    records = _read_outcomes(out, "test")
    # Four results of 1 MiB each after their pickles; the fifth call failed ("x").
    assert [[b.nbytes for b in bufs] for _, bufs in records] == [[MiB]] * 4 + [[]]
    assert len(out) - sum(len(p) + 12 + 8 * len(b) for p, b in records) - len(worker.OUTPUT_MAGIC) == 4 * MiB
    futures = [concurrent.futures.Future() for _ in records]
    for f, (pickled, buffers) in zip(futures, records):
        _settle_one(f, pickled, buffers, "test")
    results = [f.result() for f in futures[:4]]
    assert [float(r[0]) for r in results] == [0.0, 1.0, 2.0, 3.0]
    assert [float(r[-1]) for r in results] == [0.0, 1.0, 2.0, 3.0]
    # Views of the output's bytes, not copies, and writable.
    assert all(np.shares_memory(r, np.frombuffer(out, dtype=np.uint8)) for r in results)
    assert all(r.flags.writeable for r in results)
    with pytest.raises(ValueError, match="^could not convert string to float: 'x'$"):
        futures[4].result()


def test_an_output_that_is_not_a_workers_fails_its_calls_saying_why():
    with pytest.raises(TaskError, match=r"^task t: its output \(5 bytes\) is not a Meridian worker's$"):
        _read_outcomes(bytearray(b"hello"), "task t")
    magic = worker.OUTPUT_MAGIC
    with pytest.raises(TaskError, match="^task t: its output ends inside record 0$"):
        _read_outcomes(bytearray(magic + b"\x01\x00"), "task t")
    # A record that claims more buffers, or more bytes, than the output holds.
    with pytest.raises(TaskError, match="^task t: record 0 claims 1000000000 buffers, more than its output holds$"):
        _read_outcomes(bytearray(magic + struct.pack("<QI", 4, 1_000_000_000) + b"abcd"), "task t")
    ok = struct.pack("<QI", 1, 0) + b"x"
    with pytest.raises(TaskError, match="^task t: record 1 claims 18446744073709551615 bytes; 8 are left$"):
        _read_outcomes(bytearray(magic + ok + struct.pack("<QI1Q", 2, 1, (1 << 64) - 3) + b"12345678"), "task t")
    assert _read_outcomes(bytearray(magic), "task t") == []
