"""Real processes for tests: a daphne server on the test database, workers, supervisors."""

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection
from django.utils import timezone

from recovery.supervisor.loop import supervise_once

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_url() -> str:
    """The URL of the test database this pytest process uses, for child processes."""
    sd = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{sd['NAME']}"
    user = sd.get("USER") or ""
    password = f":{sd['PASSWORD']}" if sd.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{sd.get('HOST') or '127.0.0.1'}:{sd.get('PORT') or 5432}/{sd['NAME']}"


def child_env(**extra) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DATABASE_URL": database_url(),
            "SECRET_KEY": settings.SECRET_KEY,
            "DEBUG": "0",
            "CONSOLE_HTTPS": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "CONSOLE_WORKSPACES": str(settings.CONSOLE_WORKSPACES),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


# Options of the Procfile's web line that belong to the caller, not to how daphne serves.
PLACE_OPTIONS = {"-b", "--bind", "-p", "--port", "--access-log"}


def web_options() -> list[str]:
    """The daphne options of the Procfile's web process (its handshake and ping limits) without its address,
    port and access log: test servers and the bench serve sockets as the deployed process does."""
    line = next(x for x in (ROOT / "Procfile").read_text().splitlines() if x.startswith("web:"))
    words = shlex.split(line.partition(":")[2])
    words = words[words.index("daphne") + 1 : -1]  # between the program and the application
    options = []
    while words:
        word = words.pop(0)
        if word in PLACE_OPTIONS:
            words.pop(0)
        else:
            options.append(word)
    return options


def connect_timeout() -> float:
    """Seconds daphne gives the application to accept a websocket handshake (the Procfile's, else daphne's 5)."""
    options = web_options()
    flag = "--websocket_connect_timeout"
    return float(options[options.index(flag) + 1]) if flag in options else 5.0


class Server:
    """`daphne config.asgi:application` with the Procfile's options, as a subprocess, polled until it answers."""

    def __init__(self, *, port: int | None = None, log: Path | None = None, **env):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env
        self.log = log or (ROOT / "var" / f"daphne-{self.port}.log")
        self.proc = None

    def start(self, timeout: float = 30) -> "Server":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                *web_options(),
                "config.asgi:application",
            ],
            cwd=ROOT,
            env=child_env(**self.env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daphne exited with {self.proc.returncode}; see {self.log}")
            try:
                httpx.get(self.url + "/accounts/login/", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"daphne did not answer within {timeout}s; see {self.log}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()


def manage(*args, env: dict | None = None, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run `manage.py <args>` as a real process against the test database."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=child_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"manage.py {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def wait_for(predicate, timeout: float = 30, interval: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class TcpProxy:
    """A TCP forwarder between a server process and PostgreSQL that the test can cut and restore: a real network
    outage of the database for that process (its connections drop, new ones are refused), nothing faked."""

    def __init__(self, target: tuple[str, int]):
        import threading

        self.target = target
        self.port = free_port()
        self._lock = threading.Lock()
        self._sockets: set = set()
        self._listener = None

    def url(self, database_url: str) -> str:
        """`database_url` through this proxy."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(database_url)
        auth = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{self.port}"))

    def start(self) -> "TcpProxy":
        import threading

        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def _accept(self, listener) -> None:
        import threading

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source, sink) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """The database becomes unreachable: open connections drop, new ones are refused."""
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        self.start()

    def stop(self) -> None:
        self.cut()


def start_worker(server, token, fault: str = "", *, label: str = "test", **env) -> subprocess.Popen:
    """A real `manage.py worker --once` against `server` (lease 3 s, heartbeat 1 s), with a fault if given."""
    defaults = {"CONSOLE_HEARTBEAT_SECONDS": 1, "CONSOLE_LEASE_SECONDS": 3, "WORKER_FAULT": fault}
    env = child_env(CONSOLE_URL=server.url, CONSOLE_WORKER_TOKEN=token, **{**defaults, **env})
    return subprocess.Popen(
        [sys.executable, "manage.py", "worker", "--once", "--label", label],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def run_worker(server, token, fault=""):
    proc = start_worker(server, token, fault=fault)
    out, _ = proc.communicate(timeout=90)
    return proc.returncode, out


def lapse_and_supervise(run):
    run.refresh_from_db()
    if run.lease_expires_at:
        time.sleep(max(0.0, (run.lease_expires_at - timezone.now()).total_seconds()) + 0.1)
    return supervise_once()
