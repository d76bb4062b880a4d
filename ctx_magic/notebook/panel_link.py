"""The context panel's link to a session: built from the transcript's events, refreshed with
the engine's figures, shown in the sidebar (JupyterLab) or inline (SPEC U1-U3)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctx_magic.agent.session import Session
from ctx_magic.events import DURABLE_EVENTS, event_from_json
from ctx_magic.ui.panel import ContextPanel
from ctx_magic.ui.sidebar import SidebarAnchor


def build_panel(session: Session, figures: Mapping[str, object],
                load_originals: Callable[[Sequence[str]], str]) -> ContextPanel:
    """A panel for this session, its timeline replayed from the transcript's events."""
    panel = ContextPanel(clock=time.monotonic, load_originals=load_originals)
    for record in session.store.load_transcript().records:
        if record.get("type") == "event" and record.get("event") in DURABLE_EVENTS:
            try:
                panel.handle(event_from_json(record))
            except (KeyError, TypeError, ValueError):
                continue
    panel.load({"session_id": session.session_id, **figures})
    return panel


def panel_figures(session: Session, *, session_memory: str, memories: list[dict[str, Any]]) -> dict[str, object]:
    """The engine's current figures, as the panel's traits name them."""
    status = session.status()
    results = status["tool_results"]
    return {
        "tokens": status["tokens"], "threshold": status["threshold"], "warning": status["warning"],
        "blocking": status["blocking"], "window": status["window"], "zone": status["zone"],
        "percent_left": status["percent_left"], "messages": status["messages"],
        "live_results": results["live"], "cleared_results": results["cleared"],
        "persisted_results": results["persisted"], "breaker_open": status["breaker_open"],
        "spend": {k: v for k, v in status["usage"].items() if k != "cache_hit_ratio"},
        "cache_hit_ratio": status["usage"]["cache_hit_ratio"],
        "cache_breaks": status["cache_breaks"],
        "session_memory": session_memory,
        "memories": memories,
    }


def in_jupyter_server(env: Mapping[str, str], user_ns: Mapping[str, Any]) -> bool:
    """JupyterLab (and Notebook 7) start kernels with JPY_SESSION_NAME; VS Code does not."""
    return bool(env.get("JPY_SESSION_NAME")) and "__vsc_ipynb_file__" not in user_ns


def sidebar_widget(panel: ContextPanel, *, sidebar: bool) -> Any:
    """The anchor that puts the panel in JupyterLab's right sidebar, or the panel itself."""
    return SidebarAnchor(panel=panel) if sidebar else panel
