"""What a remote function's task runs on an agent: ``python3 PATH/meridian/worker.py``.

Its calls are a cloudpickle (protocol 5) of ``(function, [(args, kwargs), ...])``,
read from ``$MERIDIAN_ARG_PAYLOAD`` (base64, for small ones) or the file
``$MERIDIAN_INPUTS/0`` (an object the client put, for large ones). Large buffers in the
arguments (NumPy arrays, bytearrays, anything with pickle protocol 5's out-of-band
buffers) are not in the payload: the client put each as an object of its own, and the
task reads them, ``$MERIDIAN_ARG_BUFFERS`` of them, as its next inputs, mapped
copy-on-write (no copy is read, and the function may still write to its arrays). In a
dataset's map (calls None) the one call's argument is the shard, ``$MERIDIAN_INPUTS/0``.

It runs the function once per call in order, and writes to its standard output (the
task's output) :data:`OUTPUT_MAGIC`, then one record per call (:func:`write_outcome`)
as soon as the call returns: the outcome pickled on its own, ``("ok", value)`` or
``("error", exception or None, type name, message, traceback text)``, followed by the
value's large buffers, written straight from the value's memory. What the function
prints goes to the task's stderr log, so it never mixes with the outcomes. Only a
payload that cannot be read fails the task (exit code 2, the reason on stderr).

Run as a script, it imports nothing of the package or its C++ module: a task needs
only cloudpickle (and whatever the function imports).
"""

from __future__ import annotations

import base64
import mmap
import os
import pickle
import struct
import sys
import traceback
from collections.abc import Callable

import cloudpickle

PAYLOAD_ARG = "MERIDIAN_ARG_PAYLOAD"
BUFFERS_ARG = "MERIDIAN_ARG_BUFFERS"
# A result's buffer this large or larger travels out of band: after its pickle in the
# output, never copied into it. (An argument's, put as an object of its own, from 1 MiB:
# the client's ARG_OUT_OF_BAND_BYTES.)
OUT_OF_BAND_BYTES = 64 * 1024
# The start of a worker's output; one record per call follows (write_outcome).
OUTPUT_MAGIC = b"MRDPY01\n"


def _input_path(k: int) -> str:
    inputs = os.environ.get("MERIDIAN_INPUTS", "")
    path = os.path.join(inputs, str(k))
    if not inputs or not os.path.isfile(path):
        raise RuntimeError(f"no input: $MERIDIAN_INPUTS/{k} is missing")
    return path


def read_input(k: int = 0) -> bytes:
    with open(_input_path(k), "rb") as f:
        return f.read()


def map_input(k: int) -> memoryview:
    """Input k mapped copy-on-write: read in place, writable, never written back."""
    with open(_input_path(k), "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return memoryview(bytearray())
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))


def out_of_band(buffers: list[memoryview], at_least: int = OUT_OF_BAND_BYTES) -> Callable[[pickle.PickleBuffer], bool]:
    """A pickler's buffer_callback: contiguous buffers of `at_least` bytes go to
    `buffers` (out of band, as flat byte views of their memory), the rest stay in the
    pickle."""
    def keep(b: pickle.PickleBuffer) -> bool:
        try:
            raw = b.raw()
        except BufferError:  # not contiguous: pickled in band
            return True
        if raw.nbytes < at_least:
            return True
        buffers.append(raw)
        return False
    return keep


def read_calls():
    """The function and its calls. A payload whose calls are None is a dataset
    map's: the one call's argument is the shard, the task's first input."""
    inline = os.environ.get(PAYLOAD_ARG)
    count = int(os.environ.get(BUFFERS_ARG, "0"))
    first = 0 if inline else 1
    buffers = [map_input(first + k) for k in range(count)]
    payload = base64.b64decode(inline, validate=True) if inline else read_input(0)
    fn, calls = cloudpickle.loads(payload, buffers=buffers)
    if calls is None:
        calls = [((read_input(0),), {})]
    return fn, calls


def _failure(e: BaseException, tb: str) -> bytes:
    try:
        return cloudpickle.dumps(("error", e, type(e).__qualname__, str(e), tb))
    except Exception:  # the client raises RemoteError with its type and text
        return cloudpickle.dumps(("error", None, type(e).__qualname__, str(e), tb))


def run_calls(fn, calls, out) -> None:
    """Runs the calls in order, writing each one's outcome to `out` as soon as it is
    known (so a value is what it was when the function returned it, even if a later
    call changes it): the record :func:`write_outcome` describes."""
    for args, kwargs in calls:
        try:
            value = fn(*args, **kwargs)
        except BaseException as e:  # the caller gets it, whatever it is
            write_outcome(out, _failure(e, traceback.format_exc()), [])
            continue
        buffers: list[memoryview] = []
        try:
            pickled = cloudpickle.dumps(("ok", value), protocol=5, buffer_callback=out_of_band(buffers))
        except Exception as e:
            err = TypeError(f"the function's result ({type(value).__qualname__}) cannot be pickled: {e}")
            write_outcome(out, _failure(err, traceback.format_exc()), [])
            continue
        write_outcome(out, pickled, buffers)
        del value, buffers


def write_outcome(out, pickled: bytes, buffers: list[memoryview]) -> None:
    """One call's record: the pickle's length and the count of buffers
    (``<QI``), each buffer's length (``<Q``), the pickle, then the buffers, written
    from the value's own memory. The output is OUTPUT_MAGIC, then one record per call."""
    out.write(struct.pack(f"<QI{len(buffers)}Q", len(pickled), len(buffers), *(b.nbytes for b in buffers)))
    out.write(pickled)
    for b in buffers:
        out.write(b)


def main() -> int:
    # Not this folder's modules (errors.py...) in place of the function's imports.
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path.pop(0)
    try:
        fn, calls = read_calls()
    except Exception as e:
        print(f"meridian.worker: cannot read the calls: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # the function's prints go to the log, not the outcomes
    out.write(OUTPUT_MAGIC)
    run_calls(fn, calls, out)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
