"""The offline API over real HTTP on 127.0.0.1 (stdlib ThreadingHTTPServer).

Plain answers carry a Content-Length; streams go out with chunked transfer encoding, one
flush per server-sent event, so a client sees them arrive one by one. A dropped connection
(an injected "drop" fault) stops mid-body without the final chunk, which a client reads as
an incomplete message, exactly like a real network failure; a reset one ("reset") closes the
socket with SO_LINGER 0, so the kernel sends a TCP RST and the client reads "connection reset". Every reply closes its
connection (`Connection: close`): simple, and fast enough on the loopback.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ctx_magic.offline.app import HttpReply, OfflineAPI
from ctx_magic.offline.faults import ConnectionDropped, ConnectionReset

HOST = "127.0.0.1"  # loopback only: the stand-in is for this machine's tests and notebooks
POLL_SECONDS = 0.05  # how often serve_forever checks for shutdown: stopping takes no longer
JOIN_SECONDS = 5.0  # bound on waiting for the server thread when stopping


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: OfflineHTTPServer

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        reply = self.server.api.handle(self.command, self.path, dict(self.headers.items()), body)
        self.close_connection = True
        if reply.dropped:
            self._drop(reset=reply.reset)
            return
        if dict(reply.headers).get("content-type") == "text/event-stream":
            self._send_stream(reply)
        else:
            self._send_whole(reply)

    do_GET = do_POST = do_DELETE = _serve

    def _start(self, reply: HttpReply, framing: tuple[str, str]) -> None:
        self.send_response(reply.status)
        for name, value in (*reply.headers, framing, ("connection", "close")):
            self.send_header(name, value)
        self.end_headers()

    def _send_whole(self, reply: HttpReply) -> None:
        data = b"".join(reply.body)
        self._start(reply, ("content-length", str(len(data))))
        self.wfile.write(data)

    def _send_stream(self, reply: HttpReply) -> None:
        self._start(reply, ("transfer-encoding", "chunked"))
        try:
            for chunk in reply.body:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        except ConnectionDropped as dropped:
            self._drop(reset=isinstance(dropped, ConnectionReset))
            return
        self.wfile.write(b"0\r\n\r\n")

    def _drop(self, *, reset: bool = False) -> None:
        """Close the socket now, whatever was sent so far: an orderly shutdown, or a reset."""
        self.wfile.flush()
        with contextlib.suppress(OSError):
            if reset:  # linger on, for 0 seconds: closing discards the socket and sends RST, never FIN
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            else:
                self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: tests and notebooks do not want a line per request on stderr."""


class OfflineHTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that answers with one OfflineAPI."""

    daemon_threads = True  # a hung client never keeps the process alive

    def __init__(self, api: OfflineAPI, port: int = 0) -> None:
        self.api = api
        super().__init__((HOST, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


def start_server(api: OfflineAPI, port: int = 0) -> tuple[OfflineHTTPServer, Callable[[], None]]:
    """Serve `api` in a background thread; returns the server and an idempotent stop()."""
    server = OfflineHTTPServer(api, port)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, name="ctx-magic-offline", daemon=True
    )
    thread.start()
    stopped = threading.Event()

    def stop() -> None:
        if stopped.is_set():
            return
        stopped.set()
        api.endpoint.stall_release.set()  # a stalled stream must not hold the server open
        server.shutdown()
        server.server_close()
        thread.join(JOIN_SECONDS)

    return server, stop


@contextlib.contextmanager
def serve_in_thread(api: OfflineAPI, port: int = 0) -> Iterator[tuple[str, Callable[[], None]]]:
    """`with serve_in_thread(api) as (url, stop):` a live server that always stops on exit."""
    server, stop = start_server(api, port)
    try:
        yield server.url, stop
    finally:
        stop()
