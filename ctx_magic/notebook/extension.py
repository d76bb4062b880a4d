"""`%load_ext ctx_magic` and `%unload_ext ctx_magic`."""

from __future__ import annotations

import atexit
from typing import Any

from ctx_magic.agent.status import ContextReport
from ctx_magic.context.model_families import warm_up
from ctx_magic.errors import NoSession
from ctx_magic.notebook.agent_cells import marker_before_cell_magic
from ctx_magic.notebook.controller import Controller
from ctx_magic.notebook.magics import AgentMagics, agent_line_with_question

_TRANSFORMERS = (agent_line_with_question, marker_before_cell_magic)
"""IPython input transformers of ours, run before IPython looks for magics."""
_CONTROLLER_ATTR = "_ctx_magic_controller"
_CARRIED_ATTR = "_ctx_magic_carried"
"""What an unload leaves on the shell for the next load in this kernel: the session id and the
cells recorded since the last turn, so `%reload_ext ctx_magic` goes on with the same session."""


def load(shell: Any) -> Controller:
    existing = getattr(shell, _CONTROLLER_ATTR, None)
    if existing is not None:
        return existing
    controller = Controller(shell)
    carried = getattr(shell, _CARRIED_ATTR, None)
    if carried:
        controller.carry_on(carried.get("session_id"), carried.get("pending") or [])
        delattr(shell, _CARRIED_ATTR)
    shell.register_magics(AgentMagics(shell, controller))
    shell.configurables.append(controller.settings)
    shell.events.register("pre_run_cell", controller.pre_run_cell)
    shell.events.register("post_run_cell", controller.post_run_cell)
    cleanup = getattr(shell, "input_transformers_cleanup", None)
    for transformer in _TRANSFORMERS:
        if cleanup is not None and transformer not in cleanup:
            cleanup.append(transformer)
    setattr(shell, _CONTROLLER_ATTR, controller)
    atexit.register(controller.close)  # a clean kernel exit ends the session (memories extracted)
    warm_up(controller.settings.current.model)
    return controller


def unload(shell: Any) -> None:
    controller = getattr(shell, _CONTROLLER_ATTR, None)
    if controller is None:
        return
    for name, callback in (("pre_run_cell", controller.pre_run_cell), ("post_run_cell", controller.post_run_cell)):
        try:
            shell.events.unregister(name, callback)
        except ValueError:
            pass
    if controller.settings in shell.configurables:
        shell.configurables.remove(controller.settings)
    cleanup = getattr(shell, "input_transformers_cleanup", None)
    for transformer in _TRANSFORMERS:
        if cleanup is not None and transformer in cleanup:
            cleanup.remove(transformer)
    magics = shell.magics_manager.magics
    for kind, names in (("cell", ["agent"]), ("line", ["agent", "compact", "memory", "ctx", "pin"])):
        for name in names:
            magics[kind].pop(name, None)
    atexit.unregister(controller.close)
    session = controller.host.session
    session_id = session.session_id if session is not None else controller.host.carried
    setattr(shell, _CARRIED_ATTR, {"session_id": session_id, "pending": list(controller.cells.pending)})
    controller.close()
    controller.panel.close()  # a reloaded extension makes a new panel; the old one would go stale
    delattr(shell, _CONTROLLER_ATTR)


def controller_of(shell: Any) -> Controller | None:
    return getattr(shell, _CONTROLLER_ATTR, None)


def current_context() -> ContextReport:
    """The current session's figures in this IPython (`ctx_magic.context()`)."""
    from IPython import get_ipython

    shell = get_ipython()
    controller = controller_of(shell) if shell is not None else None
    if controller is None:
        raise NoSession("ctx_magic is not loaded here: run %load_ext ctx_magic, then a %%agent cell.")
    return controller.context_report()
