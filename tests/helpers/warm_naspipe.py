"""A warm ``naspipe`` for tests that run many commands: one interpreter imports torch, torch._dynamo and naspipe
once, then forks a child per command, instead of a fresh interpreter importing them again each time.

Why it exists: on the 2-core test machine a fresh ``naspipe`` spends 3-4 s of CPU importing torch and
torch._dynamo (the first torch.optim optimizer imports it) before it does anything; the docs' code blocks and
the your-own-supernet test run dozens of commands, and ``make test`` is CPU-bound. What a command then does is
the real thing: ``naspipe.cli.entry`` in a process of its own (the fork), with the caller's arguments, folder,
environment, ``PYTHONPATH`` (put first on ``sys.path``, as the interpreter does at start) and standard streams
(passed over the socket), its stage processes started by the launcher as always (the fork server and torchrun
ranks are fresh interpreters that import the user's module themselves), and its exit code returned. Not
covered: the interpreter's own start (``python -X``, ``PYTHON*`` variables other than ``PYTHONPATH``) and the
console script; tests of signals and process endings start the real ``naspipe`` (tests/runtime, tests/cli).

One file, stdlib only at the top, three roles: ``serve SOCKET`` (the warm interpreter), ``client SOCKET MODE
ARG...`` (what the shims on ``PATH`` run: ``naspipe`` and ``python``, modes ``naspipe`` and ``python``), and
``WarmNaspipe`` (the tests' handle: starts the server, writes the shims, ends both).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
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

def serve(path: str) -> None:
    """Import what every command needs, listen on ``path``, fork a child per connection (never returns)."""
    sys.path[0] = str(Path(sys.executable).parent)  # as the console script's (not this folder of test helpers)
    import ctypes
    import importlib

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: it ends with the test process that started it
    if os.getppid() == 1:
        return
    import pkgutil

    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401

    import naspipe
    import naspipe.cli

    naspipe.cli.build_parser()  # every command's module
    for info in pkgutil.walk_packages(naspipe.__path__, "naspipe."):
        if not info.name.endswith("__main__") and info.name != "naspipe.torchrun":
            try:
                importlib.import_module(info.name)
            except Exception:  # noqa: BLE001,S112 - an optional extra; the command imports what it needs itself
                continue
    import gc

    gc.collect()
    gc.freeze()  # what the children inherit stays out of their collections (and unwritten: no copy of its pages)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the children are reaped by the kernel (reset in each child)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        conn, _ = listener.accept()
        try:
            header, fds = _receive(conn)
        except (OSError, EOFError, ValueError):  # a caller that went away before it said what to run
            conn.close()
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            _child(conn, header, fds)  # ends the process
        conn.close()
        for fd in fds:
            os.close(fd)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    msg, fds, _flags, _addr = socket.recv_fds(conn, _INT.size, 3)
    while len(msg) < _INT.size:
        msg += _recv_exact(conn, _INT.size - len(msg))
    (n,) = _INT.unpack(msg)
    return json.loads(_recv_exact(conn, n)), list(fds)


def _child(conn: socket.socket, header: dict, fds: list[int]) -> None:
    import threading
    import traceback
    import types

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(header["cwd"])
    os.environ.clear()
    os.environ.update(header["env"])
    extra = [os.path.abspath(p) for p in header["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    conn.sendall(_INT.pack(os.getpid()))

    def client_gone() -> None:  # the caller was killed (a test's timeout): end this command as SIGTERM would
        try:
            conn.recv(1)
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=client_gone, daemon=True, name="warm-naspipe-client").start()
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    code = 0
    try:
        if header["mode"] == "naspipe":
            sys.path[1:1] = extra
            main.__file__ = sys.argv[0] = str(Path(sys.executable).parent / "naspipe")
            sys.argv[1:] = header["argv"]
            from naspipe.cli import entry

            entry()
        else:  # python -c CODE
            sys.path[0:1] = ["", *extra]
            sys.argv[:] = ["-c"]
            exec(compile(header["argv"][0], "<string>", "exec"), main.__dict__)  # noqa: S102
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, exit 1
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    conn.sendall(_INT.pack(code))
    sys.exit(code)  # the exit handlers run (multiprocessing's among them); the caller waits for the socket's end


# --- the shims' side ----------------------------------------------------------------------------------------

def client(path: str, mode: str, argv: list[str]) -> int:
    """Run ``argv`` in a child of the server at ``path`` with this process's folder, environment and streams."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    body = json.dumps({"mode": mode, "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(conn, [_INT.pack(len(body))], [0, 1, 2])
    conn.sendall(body)
    (pid,) = _INT.unpack(_recv_exact(conn, _INT.size))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda n, _f: os.kill(pid, n))
    try:
        (code,) = _INT.unpack(_recv_exact(conn, _INT.size))
    except EOFError:
        return 1  # the child died before it could say (a signal)
    while conn.recv(4096):  # the child's exit handlers
        pass
    return code


# --- the tests' handle --------------------------------------------------------------------------------------

class WarmNaspipe:
    """The server in a process of its own, and a folder of shims (``naspipe``, ``python``) to put first on ``PATH``."""

    def __init__(self, folder: Path) -> None:
        import subprocess

        folder.mkdir(parents=True, exist_ok=True)
        self.socket = str(folder / "warm.sock")
        self.bin = folder / "bin"
        self.bin.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "PYTHONPATH")}
        self._server = subprocess.Popen([sys.executable, __file__, "serve", self.socket], env=env,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        ready = self._server.stdout.readline()  # (the server prints "ready" once it listens)
        if ready.strip() != "ready":
            self.close()
            raise RuntimeError(f"the warm naspipe did not start (exit {self._server.poll()})")
        for mode in ("naspipe", "python"):
            shim = self.bin / mode
            shim.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S {__file__} client {self.socket} {mode} "$@"\n')
            shim.chmod(0o755)

    def run(self, mode: str, argv: list[str], cwd: Path, env: dict[str, str], timeout: float):  # noqa: ANN201
        """``subprocess.run`` of a shim, output captured as text."""
        import subprocess

        return subprocess.run([str(self.bin / mode), *argv], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)

    def close(self) -> None:
        self._server.terminate()
        try:
            self._server.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self._server.kill()
            self._server.wait(timeout=10)
        self._server.stdout.close()
        Path(self.socket).unlink(missing_ok=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif sys.argv[1] == "client":
        if sys.argv[3] == "python" and sys.argv[4:5] != ["-c"]:
            os.execv(sys.executable, [sys.executable, *sys.argv[4:]])  # only ``python -c CODE`` is served warm
        sys.exit(client(sys.argv[2], sys.argv[3], sys.argv[5:] if sys.argv[3] == "python" else sys.argv[4:]))
