"""A TCP proxy for SDK tests: forwards HTTP/1.1 requests to the console and can cut or drop them.

`cut(method, path, key)` → True: the request is forwarded and the console answers, but the answer is thrown
away and the client's connection closed (the client saw a write it cannot know was applied).
`drop(method, path)` → True: the request never reaches the console; the connection is closed at once.
Each request goes upstream on a connection of its own (`Connection: close`), so nothing is pipelined.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Seen:
    method: str
    path: str
    key: str | None
    status: int | None  # the console's answer (None when dropped)
    delivered: bool


def _read_head(conn: socket.socket, buffer: bytearray) -> bytes | None:
    while b"\r\n\r\n" not in buffer:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buffer.extend(chunk)
    end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:end])
    del buffer[:end]
    return head


def _headers(head: bytes) -> tuple[str, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    pairs = []
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            pairs.append((name.strip(), value.strip()))
    return lines[0], pairs


def _rebuild(first: str, pairs: list[tuple[str, str]]) -> bytes:
    kept = [(n, v) for n, v in pairs if n.lower() not in ("connection", "keep-alive")]
    kept.append(("Connection", "close"))
    return (first + "\r\n" + "".join(f"{n}: {v}\r\n" for n, v in kept) + "\r\n").encode("latin-1")


class Proxy:
    def __init__(
        self,
        upstream: str,
        *,
        cut: Callable[[str, str, str | None], bool] | None = None,
        drop: Callable[[str, str], bool] | None = None,
    ) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.cut = cut or (lambda method, path, key: False)
        self.drop = drop or (lambda method, path: False)
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> Proxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                buffer = bytearray()
                head = _read_head(conn, buffer)
                if head is None:
                    return
                first, pairs = _headers(head)
                method, path = first.split(" ")[:2]
                fields = {n.lower(): v for n, v in pairs}
                length = int(fields.get("content-length") or 0)
                while len(buffer) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer.extend(chunk)
                body = bytes(buffer[:length])
                key = fields.get("idempotency-key")
                if self.drop(method, path):
                    self._note(Seen(method, path, key, None, False))
                    return
                answer = self._forward(_rebuild(first, pairs) + body)
                status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else None
                if self.cut(method, path, key):
                    self._note(Seen(method, path, key, status, False))
                    conn.shutdown(socket.SHUT_RDWR)
                    return
                self._note(Seen(method, path, key, status, True))
                end = answer.find(b"\r\n\r\n")
                reply_first, reply_pairs = _headers(answer[: end + 4])
                conn.sendall(_rebuild(reply_first, reply_pairs) + answer[end + 4 :])
            except (OSError, ValueError, IndexError):
                return  # a client or console that went away mid-request: the connection just ends

    def _forward(self, request: bytes) -> bytes:
        with socket.create_connection(self.upstream, timeout=30) as up:
            up.sendall(request)
            chunks = []
            while True:
                chunk = up.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        return b"".join(chunks)

    def _note(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def writes(self, fragment: str = "") -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.method == "POST" and fragment in s.path]


def first_attempt_of_each_key() -> Callable[[str, str, str | None], bool]:
    """Cut the answer to the first attempt of every write (each Idempotency-Key once)."""
    keys: set[str] = set()
    lock = threading.Lock()

    def cut(method: str, path: str, key: str | None) -> bool:
        if method != "POST" or not key:
            return False
        with lock:
            if key in keys:
                return False
            keys.add(key)
            return True

    return cut
