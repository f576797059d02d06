"""A small websocket client (RFC 6455, text frames) for talking to a real daphne process.

Neither `websockets` nor `aiohttp` is installed, and autobahn's asyncio client
cannot be used once Django is set up (daphne's app selects txaio's Twisted
flavour), so this is the handful of lines a client needs: the upgrade
handshake, masked client frames, unmasked server frames, ping/pong, close.
`WebSocket` is for asyncio code; `LiveSocket` runs one in a thread for sync tests.
"""

import asyncio
import base64
import hashlib
import json
import os
import queue
import struct
import threading
import time
from urllib.parse import urlsplit

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0


class Refused(Exception):
    """The server answered the upgrade with an HTTP status instead of 101."""

    def __init__(self, status: int):
        super().__init__(f"websocket upgrade refused with HTTP {status}")
        self.status = status


class WebSocket:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.close_code: int | None = None

    @classmethod
    async def connect(cls, url: str, *, origin: str, cookie: str = "", timeout: float = 10) -> "WebSocket":
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or 80
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=2**24), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {host}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            f"Origin: {origin}",
        ]
        if cookie:
            lines.append(f"Cookie: {cookie}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)).decode("latin1")
        status = int(head.split(" ", 2)[1])
        if status != 101:
            writer.close()
            raise Refused(status)
        accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()  # RFC 6455's SHA-1
        if f"sec-websocket-accept: {accept.lower()}" not in head.lower():
            writer.close()
            raise ConnectionError("bad Sec-WebSocket-Accept")
        return cls(reader, writer)

    async def _send_frame(self, opcode: int, payload: bytes) -> None:
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 2**16:
            header += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.writer.write(header + mask + masked)
        await self.writer.drain()

    async def send(self, text: str) -> None:
        await self._send_frame(TEXT, text.encode())

    async def send_json(self, message: dict) -> None:
        await self.send(json.dumps(message))

    async def _read_frame(self) -> tuple[bool, int, bytes]:
        b1, b2 = await self.reader.readexactly(2)
        n = b2 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", await self.reader.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
        mask = await self.reader.readexactly(4) if b2 & 0x80 else b""
        payload = await self.reader.readexactly(n)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bool(b1 & 0x80), b1 & 0x0F, payload

    async def recv(self) -> str | None:
        """The next text message; None once the connection is closed (see close_code)."""
        parts: list[bytes] = []
        while True:
            try:
                fin, opcode, payload = await self._read_frame()
            except (asyncio.IncompleteReadError, ConnectionError):
                self.close_code = self.close_code or 1006
                return None
            if opcode == PING:
                await self._send_frame(PONG, payload)
            elif opcode == CLOSE:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                try:
                    await self._send_frame(CLOSE, payload[:2])
                except ConnectionError:
                    pass
                await self._shut()
                return None
            elif opcode in (TEXT, BINARY, CONTINUATION):
                parts.append(payload)
                if fin:
                    return b"".join(parts).decode()

    async def _shut(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass

    async def close(self, code: int = 1000) -> None:
        if self.close_code is None:
            try:
                await self._send_frame(CLOSE, struct.pack("!H", code))
            except ConnectionError:
                pass
        await self._shut()


class LiveSocket:
    """A WebSocket on an event loop in its own thread; received messages queue up for a sync test."""

    def __init__(self, url: str, *, origin: str, cookie: str = ""):
        self.url, self.origin, self.cookie = url, origin, cookie
        self.messages: queue.Queue[str | None] = queue.Queue()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name=f"ws {url}")
        self.ws: WebSocket | None = None
        self.pump: asyncio.Task | None = None

    def _call(self, coro, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def open(self) -> "LiveSocket":
        self.thread.start()
        try:
            self.ws = self._call(WebSocket.connect(self.url, origin=self.origin, cookie=self.cookie))
        except BaseException:
            self._stop_loop()
            raise
        self.pump = self._call(self._start_pump())
        return self

    async def _start_pump(self) -> asyncio.Task:
        return asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        while (message := await self.ws.recv()) is not None:
            self.messages.put(message)
        self.messages.put(None)

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code if self.ws else None

    def send_json(self, message: dict) -> None:
        self._call(self.ws.send_json(message))

    def receive(self, timeout: float = 5) -> str | None:
        return self.messages.get(timeout=timeout)

    def receive_until(self, predicate, timeout: float = 10) -> list[str]:
        """Every message up to and including the first that satisfies predicate."""
        received, deadline = [], time.monotonic() + timeout
        while True:
            try:
                message = self.messages.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no matching message within {timeout}s; received {received!r}") from None
            if message is None:
                raise AssertionError(f"socket closed ({self.close_code}) before a matching message; got {received!r}")
            received.append(message)
            if predicate(message):
                return received

    async def _shutdown(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.pump is not None:
            self.pump.cancel()
            try:
                await self.pump
            except asyncio.CancelledError:
                pass

    def close(self) -> None:
        try:
            self._call(self._shutdown(), timeout=5)
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()
