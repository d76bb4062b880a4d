"""An in-process httpx2 transport that runs the offline API: the real SDK, no socket.

`offline_client()` returns an `anthropic.Anthropic` whose every request is answered by an
`OfflineAPI` in the same process. A stream is handed over chunk by chunk, and a dropped
connection surfaces as the same `httpx2.RemoteProtocolError` a real socket would give (a reset
one as the `httpx2.ReadError` of a reset socket).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import anthropic
import httpx2

from ctx_magic.offline.app import OfflineAPI
from ctx_magic.offline.faults import ConnectionDropped, ConnectionReset

RESET_BY_PEER = "[Errno 104] Connection reset by peer"  # what a reset socket's read raises, as httpx2 words it

OFFLINE_BASE_URL = "http://offline.invalid"  # .invalid never resolves: nothing leaves the process
OFFLINE_API_KEY = "offline"


class _ChunkStream(httpx2.SyncByteStream):
    """The reply body, chunk by chunk; a dropped connection becomes a transport error."""

    def __init__(self, chunks: Iterable[bytes], request: httpx2.Request) -> None:
        self._chunks = chunks
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._chunks
        except ConnectionReset as reset:
            raise httpx2.ReadError(RESET_BY_PEER, request=self._request) from reset
        except ConnectionDropped as dropped:
            message = f"peer closed connection without sending complete message body ({dropped})"
            raise httpx2.RemoteProtocolError(message, request=self._request) from dropped

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


class OfflineTransport(httpx2.BaseTransport):
    """Answers httpx2 requests with an OfflineAPI, in the calling thread."""

    def __init__(self, api: OfflineAPI) -> None:
        self.api = api

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        body = request.read()
        target = request.url.raw_path.decode("ascii")
        reply = self.api.handle(request.method, target, dict(request.headers), body)
        if reply.reset:
            raise httpx2.ReadError(RESET_BY_PEER, request=request)
        if reply.dropped:
            raise httpx2.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        return httpx2.Response(
            reply.status,
            headers=list(reply.headers),
            stream=_ChunkStream(reply.body, request),
            request=request,
        )


def offline_client(api: OfflineAPI | None = None, **kwargs: Any) -> anthropic.Anthropic:
    """An SDK client bound to `api` (a fresh OfflineAPI if None) through OfflineTransport.

    Keyword arguments go to `anthropic.Anthropic` (e.g. max_retries=0). Pass your own `api`
    to read its recorded requests or inject faults.
    """
    transport = OfflineTransport(api if api is not None else OfflineAPI())
    kwargs.setdefault("api_key", OFFLINE_API_KEY)
    kwargs.setdefault("base_url", OFFLINE_BASE_URL)
    return anthropic.Anthropic(http_client=httpx2.Client(transport=transport), **kwargs)
