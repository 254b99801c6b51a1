"""llama-server on 127.0.0.1 for one measurement: started, probed, and always stopped.

The server runs in its own process group; leaving the ``with`` block (normally, on an error,
on KeyboardInterrupt) kills the whole group and waits for it. A port that is already taken, or a
server that exits or never becomes ready, raises a LadderError that says which.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ladder.core.errors import LadderError


class PortTaken(LadderError):
    """The port is not free: an environment fault, never a rung's result."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@dataclass
class Server:
    url: str
    port: int
    pid: int
    log: str

    def post(self, path: str, body: Mapping[str, Any], timeout_s: float) -> tuple[dict[str, Any], float]:
        """POST JSON; the parsed reply and the wall time in ms."""
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                data = json.loads(resp.read())
        except (urllib.error.URLError, TimeoutError, ValueError) as exc:
            raise LadderError(f"llama-server {self.url}{path} failed: {exc} (log: {self.log})") \
                from exc
        return data, (time.monotonic() - t0) * 1000.0


def _tail(path: str, n: int = 3) -> str:
    try:
        lines = [ln for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[:400]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
    else:
        try:  # the leader exited; anything it left in its group goes too
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def llama_server(bin_dir: str, model: str, *, threads: int, ctx: int, log: str,
                 port: int | None = None, env: Mapping[str, str] | None = None,
                 args: Sequence[str] = (), ready_timeout_s: float = 120,
                 slots: int = 1, cpus: Sequence[int] | None = None) -> Iterator[Server]:
    """``slots``: parallel sequences (-np; -c is split among them). ``cpus``: the server and
    every thread it starts run only there (sched_setaffinity before exec; read it back with
    ``machine.task_cpus(server.pid)``)."""
    exe = Path(bin_dir) / "llama-server"
    if not exe.exists():
        raise LadderError(f"{exe} does not exist: add llama-server to build.targets")
    port = port or free_port()
    if port_taken(port):
        raise PortTaken(f"llama-server: port {port} on 127.0.0.1 is already taken")
    argv = [str(exe), "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
            "-c", str(ctx), "-np", str(slots), *args]
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as log_f:
        log_f.write(f"$ {' '.join(argv)}\n".encode())
        log_f.flush()
        proc = subprocess.Popen(argv, stdout=log_f, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, start_new_session=True,
                                preexec_fn=None if cpus is None
                                else partial(os.sched_setaffinity, 0, list(cpus)))
    server = Server(f"http://127.0.0.1:{port}", port, proc.pid, log)
    try:
        deadline = time.monotonic() + ready_timeout_s
        while True:
            code = proc.poll()
            if code is not None:
                why = _tail(log)
                if "bind" in why.lower() or "address already in use" in why.lower():
                    raise PortTaken(f"llama-server: port {port} on 127.0.0.1 is already taken "
                                    f"({why})")
                raise LadderError(f"llama-server exited with code {code} before it was ready: "
                                  f"{why} (log: {log})")
            try:
                with urllib.request.urlopen(server.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise LadderError(f"llama-server on port {port} not ready after "
                                  f"{ready_timeout_s:.0f} s (log: {log})")
            time.sleep(0.2)
        yield server
    finally:
        _stop(proc)
