"""The exceptions Meridian's Python client raises.

Every error from the coordinator or the data plane is a :class:`MeridianError`;
its class says what kind (the code of the C++ Status it came from), and its message
says what is wrong and, where it can, what to do.
"""

from __future__ import annotations


class MeridianError(RuntimeError):
    """An error from Meridian. ``code`` names its kind ("NOT_FOUND", ...)."""

    code = "UNKNOWN"


class InvalidArgument(MeridianError, ValueError):
    """A malformed spec, argument or reference."""

    code = "INVALID_ARGUMENT"


class NotFound(MeridianError, KeyError):
    """No such job, task, object or dataset."""

    code = "NOT_FOUND"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class AlreadyExists(MeridianError):
    code = "ALREADY_EXISTS"


class PermissionDenied(MeridianError, PermissionError):
    code = "PERMISSION_DENIED"


class Unauthenticated(MeridianError, PermissionError):
    """The coordinator does not know this client's certificate or token."""

    code = "UNAUTHENTICATED"


class FailedPrecondition(MeridianError):
    """The cluster cannot do it now (no nodes, a lost input, no credentials...)."""

    code = "FAILED_PRECONDITION"


class ResourceExhausted(MeridianError):
    code = "RESOURCE_EXHAUSTED"


class Unavailable(MeridianError, ConnectionError):
    """The coordinator or an agent cannot be reached."""

    code = "UNAVAILABLE"


class DeadlineExceeded(MeridianError, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class DataLoss(MeridianError):
    code = "DATA_LOSS"


class TaskError(MeridianError):
    """A remote function's task failed without raising a Python exception: its
    process was killed, timed out or could not start. The message says why."""

    code = "TASK_FAILED"


class RemoteError(MeridianError):
    """A remote function raised an exception that cannot be unpickled here (a class
    only the remote side has). ``remote_type`` names it; ``remote_traceback`` is its
    traceback as text."""

    code = "REMOTE_ERROR"

    def __init__(self, remote_type: str, message: str, remote_traceback: str) -> None:
        super().__init__(f"{remote_type}: {message}\n\nRemote traceback:\n{remote_traceback}")
        self.remote_type = remote_type
        self.remote_traceback = remote_traceback


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        Unauthenticated,
        FailedPrecondition,
        ResourceExhausted,
        Unavailable,
        DeadlineExceeded,
        DataLoss,
    )
}


def for_code(code: str) -> type[MeridianError]:
    """The exception class for a Status code's name (used by the C++ module)."""
    return _BY_CODE.get(code, MeridianError)
