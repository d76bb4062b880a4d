"""Which server answers the agent: the Anthropic API when a key is set, else the offline
stand-in. Chosen here, at the top, so the agent package never knows the stand-in exists."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctx_magic.errors import CtxMagicError
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.transport import offline_client
from ctx_magic.settings import MAX_RETRIES

OFFLINE_NOTICE = (
    "No ANTHROPIC_API_KEY is set: ctx_magic is using its offline stand-in, a deterministic local "
    "server that speaks the Messages API (not Claude). Set ANTHROPIC_API_KEY to talk to Claude."
)
OFFLINE_WINDOW = 200_000  # the stand-in reports the API's standard window


@dataclass(frozen=True)
class Backend:
    """An SDK client and what it talks to."""

    client: Any
    """An anthropic.Anthropic client (over HTTP, or over the in-process stand-in)."""
    name: str
    """'anthropic' or 'offline'."""
    notice: str
    """The line that tells the user which server answers."""
    stand_in: OfflineAPI | None = None
    """The offline stand-in itself, when it is the backend (its request log can be read)."""

    @property
    def offline(self) -> bool:
        return self.stand_in is not None

    def with_retries(self, max_retries: int) -> Backend:
        return Backend(self.client.with_options(max_retries=max_retries), self.name, self.notice, self.stand_in)


def choose_backend(env: Mapping[str, str] | None = None, *, max_retries: int = MAX_RETRIES,
                   offline_window: int = OFFLINE_WINDOW) -> Backend:
    """The real API when ANTHROPIC_API_KEY is set (ANTHROPIC_BASE_URL honored), else the stand-in.

    A base URL without a key is refused: silently answering from the stand-in instead of the
    server someone pointed ctx_magic at would be a surprise.
    """
    import anthropic

    env = os.environ if env is None else env
    key = env.get("ANTHROPIC_API_KEY", "").strip()
    base_url = env.get("ANTHROPIC_BASE_URL", "").strip() or None
    if key:
        client = anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=max_retries)
        where = f" at {base_url}" if base_url else ""
        return Backend(client, "anthropic", f"Using the Anthropic Messages API{where}.")
    if base_url:
        raise CtxMagicError(f"ANTHROPIC_BASE_URL is set ({base_url}) but ANTHROPIC_API_KEY is not: set the key to "
                            "use that server, or unset ANTHROPIC_BASE_URL to use the offline stand-in.")
    stand_in = OfflineAPI(OfflineConfig(window=offline_window))
    return Backend(offline_client(stand_in, max_retries=max_retries), "offline", OFFLINE_NOTICE, stand_in)
