"""What a remote function's task runs on an agent: ``python3 PATH/meridian/worker.py``.

It reads its calls, a cloudpickle of ``(function, [(args, kwargs), ...])``, from
``$MERIDIAN_ARG_PAYLOAD`` (base64, for small ones) or the file ``$MERIDIAN_INPUTS/0``
(an object the client put, for large ones); in a dataset's map (calls None) the one
call's argument is the shard, ``$MERIDIAN_INPUTS/0``. It runs the function once per call in
order, and writes a cloudpickle of one outcome per call to its standard output (the
task's output), each pickled on its own: ``("ok", value)`` or ``("error",
exception or None, type name, message, traceback text)``. What the function prints goes to the task's stderr log, so it
never mixes with the outcomes. Only a payload that cannot be read fails the task
(exit code 2, the reason on stderr).

Run as a script, it imports nothing of the package or its C++ module: a task needs
only cloudpickle (and whatever the function imports).
"""

from __future__ import annotations

import base64
import os
import sys
import traceback

import cloudpickle

PAYLOAD_ARG = "MERIDIAN_ARG_PAYLOAD"


def read_input() -> bytes:
    inputs = os.environ.get("MERIDIAN_INPUTS", "")
    path = os.path.join(inputs, "0")
    if not inputs or not os.path.isfile(path):
        raise RuntimeError("no input: $MERIDIAN_INPUTS/0 is missing")
    with open(path, "rb") as f:
        return f.read()


def read_calls():
    """The function and its calls. A payload whose calls are None is a dataset
    map's: the one call's argument is the shard, the task's first input."""
    inline = os.environ.get(PAYLOAD_ARG)
    fn, calls = cloudpickle.loads(base64.b64decode(inline, validate=True) if inline else read_input())
    if calls is None:
        calls = [((read_input(),), {})]
    return fn, calls


def _failure(e: BaseException, tb: str) -> bytes:
    try:
        return cloudpickle.dumps(("error", e, type(e).__qualname__, str(e), tb))
    except Exception:  # the client raises RemoteError with its type and text
        return cloudpickle.dumps(("error", None, type(e).__qualname__, str(e), tb))


def run_calls(fn, calls) -> list[bytes]:
    """One pickled outcome per call, in order."""
    outcomes = []
    for args, kwargs in calls:
        try:
            value = fn(*args, **kwargs)
        except BaseException as e:  # the caller gets it, whatever it is
            outcomes.append(_failure(e, traceback.format_exc()))
            continue
        try:
            outcomes.append(cloudpickle.dumps(("ok", value)))
        except Exception as e:
            err = TypeError(f"the function's result ({type(value).__qualname__}) cannot be pickled: {e}")
            outcomes.append(_failure(err, traceback.format_exc()))
    return outcomes


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
    data = cloudpickle.dumps(run_calls(fn, calls))
    out.write(data)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
