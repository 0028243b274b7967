"""A warm ``naspipe`` for tests that run many commands: one interpreter imports torch, torch._dynamo and the
command line once, then forks a process per command, instead of a fresh interpreter importing them again.

Why it exists: on the 2-core test machine a fresh ``naspipe`` spends 3-4 s of CPU importing torch and
torch._dynamo (the first torch.optim optimizer imports it) before it does anything; the docs' code blocks and
the your-own-supernet test run dozens of commands, and ``make test`` is CPU-bound. What a command then does is
the real thing: ``naspipe.cli.entry`` in a process of its own, with the caller's arguments, folder, environment,
``PYTHONPATH`` (put first on ``sys.path``, as the interpreter does at start), standard streams (passed over the
socket) and fresh random state; its stage processes are started by the launcher as always (the fork server and
torchrun's ranks are fresh interpreters that import the user's module themselves); the caller gets the
command's real exit status (a waiter process between the server and the command ``waitpid``s it: exit handlers,
``os._exit`` and signals included).

Not the same as a fresh process, so not used where it matters: the interpreter's own start (the console script,
``python -X``), variables read at import (``OMP_NUM_THREADS``, ``PYTHON*``, ``TORCH*`` take the server's values),
the string hash seed (shared by a worker's commands), the process group, and torch and the command line already
imported. Tests of signals, endings and the console script start the real ``naspipe`` (tests/runtime, tests/cli).

One file, stdlib only at the top, four roles: ``serve SOCKET ROOT PARENT`` (the warm interpreter), ``client
SOCKET ARG...`` (what the ``naspipe`` shim runs), ``script SOCKET SCRIPT ARG...`` (``python SCRIPT ARG...``, for
the benchmarks' smoke tests: ``WarmNaspipe.python``), and ``WarmNaspipe`` (the tests' handle: starts the server,
writes the shim, ends both).
"""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import socket
import struct
import sys
import tempfile
from pathlib import Path

_INT = struct.Struct("!i")
READY_TIMEOUT_S = 120


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


# --- the warm interpreter -------------------------------------------------------------------------------------

def serve(path: str, root: str, parent: int) -> None:
    """Import what every command needs, listen on ``path``, fork a waiter per connection (never returns)."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: it ends with the test process that started it
    if os.getppid() != parent:
        return
    # as the console script's path (its folder first), with the checkout under test before the installed one
    sys.path[0:1] = [str(Path(sys.executable).parent), root]
    from naspipe.lifecycle.startup import collector_paused

    with collector_paused():  # frozen: what the children inherit stays out of their collections (and unwritten)
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401

        import naspipe.cli

        naspipe.cli.build_parser()  # every command's module, as the console script imports them at start
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped by the kernel (reset in each)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        conn, _ = listener.accept()
        fds: list[int] = []
        try:
            header, fds = _receive(conn)
        except (OSError, EOFError, ValueError):  # a caller that went away before it said what to run
            for fd in fds:
                os.close(fd)
            conn.close()
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            _wait_for_command(conn, header, fds)  # ends the process
        conn.close()
        for fd in fds:
            os.close(fd)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    msg, fds, _flags, _addr = socket.recv_fds(conn, _INT.size, 3)
    fds = list(fds)
    try:
        while len(msg) < _INT.size:
            msg += _recv_exact(conn, _INT.size - len(msg))
        (n,) = _INT.unpack(msg)
        return json.loads(_recv_exact(conn, n)), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _wait_for_command(conn: socket.socket, header: dict, fds: list[int]) -> None:
    """The waiter: fork the command, tell the caller its pid, then its exit status (-N: signal N)."""
    import threading

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _command(header, fds)  # ends the process
    for fd in fds:
        os.close(fd)
    code = 1
    try:
        conn.sendall(_INT.pack(pid))

        def client_gone() -> None:  # the caller was killed (a test's timeout): end the command as SIGTERM would
            try:
                conn.recv(1)
            except OSError:
                pass
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

        threading.Thread(target=client_gone, daemon=True).start()
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        conn.sendall(_INT.pack(code))
    finally:
        os._exit(0)


def _command(header: dict, fds: list[int]) -> None:
    import types

    import numpy
    import torch

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(header["cwd"])
    os.environ.clear()
    os.environ.update(header["env"])
    sys.path[1:1] = [os.path.abspath(p) for p in header["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    numpy.random.seed()  # each command's own global random state, as a fresh process has (random reseeds itself
    torch.seed()  # after a fork)
    script = header.get("script")
    if script is not None:  # ``python SCRIPT ARG...``: its folder first on sys.path, as the interpreter puts it
        import runpy

        sys.path[0] = os.path.dirname(os.path.abspath(script))
        sys.argv[:] = [script, *header["argv"]]
        runpy.run_path(script, run_name="__main__")
        sys.exit(0)  # (the script ended without sys.exit: status 0, after the exit handlers, as the interpreter's)
    main = types.ModuleType("__main__")
    main.__file__ = sys.argv[0] = str(Path(sys.executable).parent / "naspipe")
    sys.modules["__main__"] = main
    sys.argv[1:] = header["argv"]
    from naspipe.cli import entry

    entry()  # its SystemExit ends the process as the console script's would: exit handlers, then the status
    sys.exit(0)  # (never reached: entry() always exits; were it not, this keeps the command out of the server loop)


# --- the shim's side ----------------------------------------------------------------------------------------

def client(path: str, argv: list[str], script: str | None = None) -> int:
    """Run ``naspipe ARGV`` (with ``script``: ``python SCRIPT ARGV``) as a grandchild of the server at ``path`` with
    this process's folder, environment and streams; its exit status becomes this process's (a signal is raised
    again here)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    body = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "script": script}).encode()
    socket.send_fds(conn, [_INT.pack(len(body))], [0, 1, 2])
    conn.sendall(body)
    try:
        (pid,) = _INT.unpack(_recv_exact(conn, _INT.size))
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda n, _f: os.kill(pid, n))
        (code,) = _INT.unpack(_recv_exact(conn, _INT.size))
    except EOFError:
        print("warm naspipe: the server ended before the command did", file=sys.stderr)
        return 1
    if code < 0:  # killed by signal -code: end the same way
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):  # (SIGKILL, SIGSTOP: always their default)
            pass
        os.kill(os.getpid(), -code)
    return code


# --- the tests' handle --------------------------------------------------------------------------------------

class WarmNaspipe:
    """The server in a process of its own, and a folder with a ``naspipe`` shim to put first on ``PATH``."""

    def __init__(self, folder: Path) -> None:
        import subprocess

        folder.mkdir(parents=True, exist_ok=True)
        self._sockdir = tempfile.mkdtemp(prefix="warm-")  # short: a Unix socket's path has at most 107 bytes
        self.socket = os.path.join(self._sockdir, "s")
        self.bin = folder / "bin"
        self.bin.mkdir(exist_ok=True)
        root = str(Path(__file__).resolve().parents[2])
        env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "PYTHONPATH")}
        self._server = subprocess.Popen([sys.executable, __file__, "serve", self.socket, root, str(os.getpid())],
                                        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self._server.stdout], [], [], READY_TIMEOUT_S)
        if not ready or self._server.stdout.readline().strip() != "ready":
            self.close()
            raise RuntimeError(f"the warm naspipe did not start within {READY_TIMEOUT_S} s")
        shim = self.bin / "naspipe"
        cmd = " ".join(shlex.quote(x) for x in (sys.executable, "-I", "-S", __file__, "client", self.socket))
        shim.write_text(f'#!/bin/sh\nexec {cmd} "$@"\n')
        shim.chmod(0o755)

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float):  # noqa: ANN201
        """``subprocess.run`` of the shim, output captured as text."""
        import subprocess

        return subprocess.run([str(self.bin / "naspipe"), *argv], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)

    def python(self, script: Path, argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
               timeout: float = 600):  # noqa: ANN201
        """``subprocess.run([sys.executable, script, *argv])``, output captured as text, run by the warm server:
        for the benchmarks' scripts, whose smoke tests check what they write, not how the interpreter starts."""
        import subprocess

        env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTEST_CURRENT_TEST"}
        shim = [sys.executable, "-I", "-S", __file__, "script", self.socket, str(script)]  # (not ``client`` above)
        return subprocess.run([*shim, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)

    def stdout_of(self, argv: list[str], cwd: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> str:
        """The command's standard output, once it ended with a status in ``ok`` (else an assertion naming it)."""
        p = self.run(argv, cwd, env, timeout=240)
        assert p.returncode in ok, (argv, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
        return p.stdout

    def close(self) -> None:
        import shutil

        self._server.terminate()
        try:
            self._server.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self._server.kill()
            self._server.wait(timeout=10)
        self._server.stdout.close()
        shutil.rmtree(self._sockdir, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "client":
        sys.exit(client(sys.argv[2], sys.argv[3:]))
    elif sys.argv[1] == "script":
        sys.exit(client(sys.argv[2], sys.argv[4:], script=sys.argv[3]))
