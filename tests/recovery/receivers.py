"""A webhook receiver on 127.0.0.1 for the notification tests: a real HTTP server in a thread that keeps every
request it gets and answers each with the next status of its script (then 204)."""

import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict
    body: str
    answered: int


@dataclass
class Receiver:
    url: str
    script: deque
    got: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def accepted(self) -> list[Received]:
        with self.lock:
            return [r for r in self.got if 200 <= r.answered < 300]


def start_receiver(*statuses: int):
    """Start a receiver; returns (receiver, stop). `statuses` are the answers to its first requests, in order."""
    receiver = Receiver(url="", script=deque(statuses))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length).decode()
            with receiver.lock:
                status = receiver.script.popleft() if receiver.script else 204
                receiver.got.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, status))
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{httpd.server_address[1]}/hook"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()

    def stop():
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)

    return receiver, stop
