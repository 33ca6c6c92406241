"""A warm Python interpreter: an agent's Python tasks fork from it instead of starting
an interpreter each (see warm_python.h, which runs this as ``python -c``).

Run as ``python -c SOURCE UID GID MODULE...`` with its control socket (a Unix stream
socket whose other end is the agent's) as file descriptor 3. It drops to UID and GID
first (the agent starts it as the user the tasks run as, so this is only a check),
imports the MODULEs (what the tasks would import first: cloudpickle), says
``ready``, and then serves the agent, one request at a time:

- A request is a header ``<QQ`` (body length, sequence number), sent with three file
  descriptors (the task's stdout and stderr, and the read end of its go pipe), then the
  body: NUL-separated fields, the working directory, then ``argv`` (counted), the
  environment (counted) and the resource limits (counted, each ``RESOURCE LIMIT``).
- It forks. The parent answers ``started SEQ PID``; the child leads a process group
  of its own (made so before the answer), dies with this process, and waits for one
  byte ``g`` on the go pipe: the agent moves it into the task's cgroup first. Then it
  sets its limits, standard streams, working directory, environment and ``sys.argv``,
  and runs the script as ``python SCRIPT ARGS...`` would, exiting with the code it
  would.
- When a child ends it says ``exited PID STATUS`` (a raw wait status).

When the agent goes (end of file on the socket) it kills its children and exits.
Everything it reads is bounded; anything malformed ends it (the agent starts another).
"""

import atexit
import builtins
import ctypes
import gc
import importlib.machinery
import os
import resource
import select
import signal
import socket
import struct
import sys
import threading
import traceback
import types

CONTROL_FD = 3
HEADER = struct.Struct("<QQ")
MAX_REQUEST_BYTES = 64 << 20
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _exit_code(e):
    """What ``python SCRIPT`` exits with for SystemExit(e.code)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    try:
        print(e.code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _run_script(argv):
    script = argv[1]
    if not os.path.isfile(script):
        print(f"{argv[0]}: can't open file {os.path.abspath(script)!r}: [Errno 2] No such file or directory",
              file=sys.stderr)
        return 2
    sys.argv = argv[1:]
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    code = 0
    try:
        # What the interpreter does with a script (runpy.run_path is slower: it
        # imports pkgutil in each child): a fresh __main__, the file compiled as given.
        main = types.ModuleType("__main__")
        main.__file__ = script
        main.__cached__ = None
        main.__builtins__ = builtins
        main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
        sys.modules["__main__"] = main
        with open(script, "rb") as f:
            source = f.read()
        exec(compile(source, script, "exec"), main.__dict__)
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException as e:
        # As the interpreter reports it: from the script's first frame on (not this
        # file's), through sys.excepthook.
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        if tb is not None:
            e.__traceback__ = tb  # what the hook prints, whatever tb it is given
        try:
            sys.excepthook(type(e), e, e.__traceback__)
        except BaseException:
            traceback.print_exception(type(e), e, e.__traceback__)
        code = 1
    # What an interpreter's exit does: wait for non-daemon threads, run atexit hooks,
    # flush the streams.
    try:
        threading._shutdown()
    except BaseException:
        pass
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            code = code or 120
    return code


def _child(ctl, wakeup, fds, fields, parent):
    out_fd, err_fd, go_fd = fds
    code = 127
    try:
        os.setpgid(0, 0)
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(127)
        ctl.close()
        signal.set_wakeup_fd(-1)
        for fd in wakeup:
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        if os.read(go_fd, 1) != b"g":  # the agent could not place it: not run
            os._exit(127)
        os.close(go_fd)
        cwd = fields[0]
        n = int(fields[1])
        argv = fields[2:2 + n]
        m = int(fields[2 + n])
        env = fields[3 + n:3 + n + m]
        k = int(fields[3 + n + m])
        for item in fields[4 + n + m:4 + n + m + k]:
            res, limit = item.split(b" ")
            resource.setrlimit(int(res), (int(limit), int(limit)))
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in (devnull, out_fd, err_fd):
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        for e in env:
            name, _, value = e.partition(b"=")
            os.environb[name] = value
        os.chdir(cwd)
        code = _run_script([os.fsdecode(a) for a in argv])
    except BaseException as e:
        try:
            os.write(2, f"meridian: the warm interpreter could not start the task: {e!r}\n".encode())
        except BaseException:
            pass
    os._exit(code)


def _read_exactly(ctl, n):
    data = bytearray()
    while len(data) < n:
        chunk = ctl.recv(min(n - len(data), 1 << 20))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def main():
    uid, gid = int(sys.argv[1]), int(sys.argv[2])
    if gid >= 0 and os.getgid() != gid:
        os.setgroups([])
        os.setgid(gid)
    if uid >= 0 and os.getuid() != uid:
        os.setuid(uid)
    for module in sys.argv[3:]:
        try:
            __import__(module)
        except ImportError:
            pass
    # What is here now stays as it is: the collector never walks it in a child (which
    # would copy every page it touches).
    gc.freeze()
    ctl = socket.socket(fileno=CONTROL_FD)
    wakeup = os.pipe()
    for fd in wakeup:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children = set()
    parent = os.getpid()
    ctl.sendall(b"ready\n")
    try:
        while True:
            ready, _, _ = select.select([ctl, wakeup[0]], [], [])
            if wakeup[0] in ready:
                try:
                    while os.read(wakeup[0], 512):
                        pass
                except BlockingIOError:
                    pass
                while children:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    children.discard(pid)
                    ctl.sendall(f"exited {pid} {status}\n".encode())
            if ctl not in ready:
                continue
            header, fds, _, _ = socket.recv_fds(ctl, HEADER.size, 3)
            if not header:
                break
            if len(header) < HEADER.size:
                header += _read_exactly(ctl, HEADER.size - len(header))
            size, seq = HEADER.unpack(header)
            if len(fds) != 3 or size > MAX_REQUEST_BYTES:
                break
            fields = _read_exactly(ctl, size).split(b"\0")
            pid = os.fork()
            if pid == 0:
                _child(ctl, wakeup, fds, fields, parent)
            try:
                os.setpgid(pid, pid)  # as the child does: a group of its own before anyone hears of it
            except OSError:
                pass
            for fd in fds:
                os.close(fd)
            children.add(pid)
            ctl.sendall(f"started {seq} {pid}\n".encode())
    except (EOFError, OSError, ValueError):
        pass
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)


main()
