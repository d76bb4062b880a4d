"""A local stand-in for the Anthropic Messages API, with a deterministic policy instead of a model.

It lets the real SDK, the agent loop and every context layer run end to end with no network:
`offline_client()` for an in-process SDK client, `serve_in_thread()` or
`python -m ctx_magic.offline` for a real HTTP server. See app.py for the endpoints.
"""

from ctx_magic.offline.app import HttpReply, OfflineAPI, OfflineConfig, RecordedRequest
from ctx_magic.offline.policy import Answer, Policy, Rule
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.offline.transport import OfflineTransport, offline_client

__all__ = [
    "Answer",
    "HttpReply",
    "OfflineAPI",
    "OfflineConfig",
    "OfflineTransport",
    "Policy",
    "RecordedRequest",
    "Rule",
    "offline_client",
    "serve_in_thread",
]
