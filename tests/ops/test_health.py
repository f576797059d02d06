"""/healthz for load balancers and /api/health/ for people."""

import socket
import threading

import httpx
import pytest
from django.db import connection

from console.live.relay import relay
from recovery.supervisor.loop import supervise_once
from tests.processes import Server, free_port, wait_for

pytestmark = pytest.mark.django_db


def test_healthz_answers_without_auth_and_without_data(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.content == b"ok\n"
    assert response["Content-Type"].startswith("text/plain") and "no-cache" in response["Cache-Control"]


def test_healthz_is_exempt_from_the_https_redirect(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/healthz").status_code == 200
    assert client.get("/accounts/login/").status_code == 301


def test_api_health_reports_database_supervisor_and_relay(api, client):
    assert client.get("/api/health/").status_code in (401, 403)
    body = api.get("/api/health/").json()
    assert body == {
        "database": "ok",
        "supervisor": {"last_pass_at": None, "alive": False, "interval_seconds": 5.0},
        "relay": {"status": "idle", "sockets": 0, "last_event_id": relay.last_id},
    }
    supervise_once(label="sup-a")
    supervisor = api.get("/api/health/").json()["supervisor"]
    assert supervisor["alive"] is True and supervisor["last_pass_at"]


# --- a real server whose database goes away and comes back ---------------------------------


class Forwarder:
    """A TCP port that forwards to PostgreSQL while open: closing it is the database becoming unreachable."""

    def __init__(self, port: int, target: tuple[str, int]):
        self.port, self.target = port, target
        self.server: socket.socket | None = None
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()

    def open(self) -> "Forwarder":
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.server,), daemon=True).start()
        return self

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                if self.server is not server:  # closed (or reopened) while this one was being accepted
                    client.close()
                    upstream.close()
                    return
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self.lock:
            if self.server is not None:
                self.server.close()
                self.server = None
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.close()
            except OSError:
                pass


def postgres_target() -> tuple[str, int, str, str]:
    """(host, port, user, database) of a PostgreSQL to forward to: the suite's own, or the machine's."""
    if connection.vendor == "postgresql":
        sd = connection.settings_dict
        return sd.get("HOST") or "127.0.0.1", int(sd.get("PORT") or 5432), sd.get("USER") or "postgres", sd["NAME"]
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 5432)) != 0:
            pytest.skip("needs a PostgreSQL on 127.0.0.1:5432 to stand in for a database that comes and goes")
    return "127.0.0.1", 5432, "postgres", "postgres"


def status(server: Server) -> int:
    return httpx.get(server.url + "/healthz", timeout=10).status_code


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_healthz_is_503_while_the_database_is_unreachable_and_200_again_once_it_answers():
    host, port, user, name = postgres_target()
    db_port = free_port()  # nothing listens here yet: a closed port
    server = Server(DATABASE_URL=f"postgres://{user}@127.0.0.1:{db_port}/{name}").start()
    forwarder = Forwarder(db_port, (host, port))
    try:
        assert status(server) == 503
        assert httpx.get(server.url + "/healthz").text == "unavailable\n"
        forwarder.open()
        wait_for(lambda: status(server) == 200, timeout=15, what="healthz 200 once the database answers")
        forwarder.close()
        wait_for(lambda: status(server) == 503, timeout=15, what="healthz 503 once it is gone again")
    finally:
        forwarder.close()
        server.stop()
