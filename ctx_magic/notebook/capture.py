"""Cell capture: what a run prints, displays, returns and raises, recorded as it happens.

The recorder patches the streams' `write`, the display publisher and (for the agent's quiet
runs) the display hook for the length of one run, and puts each back when it stops; what it
keeps is a `CellRecord` (outputs.py), which turns it into the tool result the model reads.
"""

from __future__ import annotations

import html
import sys
import threading
from collections.abc import Callable
from typing import Any

from ctx_magic.notebook.config import CtxMagic
from ctx_magic.notebook.outputs import OWN_DISPLAY, CellRecord, formatted, left_out_line, strip_ansi


class OutputRecorder:
    """Records what runs print, display, return and raise.

    Pass-through mode (the user's cells) lets everything reach the notebook as usual and keeps
    a copy. Quiet mode (the agent's runs) keeps the outputs back so the display can show them
    in a collapsible block; nothing reaches the notebook on its own. The streams are patched
    at their `write` method, as IPython does, because ipykernel checks the stream classes.
    """

    def __init__(self, shell: Any, settings: CtxMagic, *,
                 owned_elsewhere: Callable[[], bool] = lambda: False) -> None:
        self.shell = shell
        self._settings = settings
        """The user's cap on an image (`image_max_bytes`): the images over it are named in the cell."""
        self._owned_elsewhere = owned_elsewhere
        """Whether the calling thread's output belongs to a run of the agent's code (its own log),
        not to the cell being recorded: such output passes through unrecorded."""
        self.current: CellRecord | None = None
        self._restore: list[Callable[[], None]] = []
        self._lock = threading.RLock()

    def start(self, source: str, *, quiet: bool = False, on_output: Callable[[str], None] | None = None,
              cell_id: str | None = None) -> CellRecord:
        """Begin recording (the frontend's `cell_id` when it sent one); `on_output` hears each piece
        printed while it runs (progress)."""
        with self._lock:
            self._stop_locked()
            record = CellRecord(source, cell_id=cell_id)
            self.current = record
            for stream, sink in ((sys.stdout, record.stdout), (sys.stderr, record.stderr)):
                self._patch_write(stream, sink, quiet, on_output)
            pub = getattr(self.shell, "display_pub", None)
            if pub is not None:
                self._patch(pub, "publish", self._publisher(pub.publish, record, quiet))
            if quiet:
                self._quiet_displayhook(record)
                self._patch(self.shell, "_showtraceback", lambda *args, **kwargs: None)
            return record

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        had_own = name in getattr(owner, "__dict__", {})
        original = getattr(owner, name)
        setattr(owner, name, replacement)

        def restore() -> None:
            if had_own:
                setattr(owner, name, original)
            else:
                try:
                    delattr(owner, name)
                except AttributeError:
                    setattr(owner, name, original)

        self._restore.append(restore)

    def _patch_write(self, stream: Any, sink: list[str], quiet: bool,
                     on_output: Callable[[str], None] | None = None) -> None:
        original = stream.write

        def write(data: str, *args: Any, **kwargs: Any) -> Any:
            if self._owned_elsewhere():
                return original(data, *args, **kwargs)
            if isinstance(data, str) and data:
                sink.append(data)
                if on_output is not None:
                    try:
                        on_output(data)
                    except Exception:  # noqa: BLE001 - progress display must never break the run
                        pass
            return len(data) if quiet else original(data, *args, **kwargs)

        try:
            self._patch(stream, "write", write)
        except (AttributeError, TypeError):  # a stream whose write cannot be replaced: not recorded
            pass

    def _publisher(self, original: Callable[..., Any], record: CellRecord, quiet: bool) -> Callable[..., Any]:
        shown_at: dict[str, int] = {}  # display_id -> index in record.displays

        def publish(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            if self._owned_elsewhere():
                return original(data, *args, **kwargs)
            metadata = kwargs.get("metadata", args[0] if args else None)
            if isinstance(metadata, dict) and "ctx_magic" in metadata:
                return original(data, *args, **kwargs)  # our own status line, shown as it is
            if isinstance(data, dict):
                display_id = (kwargs.get("transient") or {}).get("display_id")
                if kwargs.get("update") and display_id in shown_at:
                    record.displays[shown_at[display_id]] = dict(data)  # an update: its latest state only
                else:
                    if display_id:
                        shown_at[display_id] = len(record.displays)
                    record.displays.append(dict(data))
            return None if quiet else original(data, *args, **kwargs)

        return publish

    def _quiet_displayhook(self, record: CellRecord) -> None:
        """The value of the run's last expression, kept instead of shown as Out[]."""
        previous = sys.displayhook

        def hook(value: Any) -> None:
            if value is not None:
                record.returned(self._format(value))

        sys.displayhook = hook
        self._restore.append(lambda: setattr(sys, "displayhook", previous))

    def stop(self) -> CellRecord | None:
        with self._lock:
            return self._stop_locked()

    def _stop_locked(self) -> CellRecord | None:
        record, self.current = self.current, None
        while self._restore:
            self._restore.pop()()
        return record

    def _format(self, value: Any) -> dict[str, Any]:
        return formatted(self.shell, value)

    def finish(self, record: CellRecord, result: Any) -> CellRecord:
        """Add the returned value and the error from IPython's ExecutionResult."""
        record.ran_as(getattr(result, "execution_count", None))
        value = getattr(result, "result", None)
        if value is not None and record.result is None:
            record.returned(self._format(value))
        error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        if error is not None:
            record.failed(self.format_error(error))
        self._say_left_out(record)
        return record

    def _say_left_out(self, record: CellRecord) -> None:
        """Once, in the cell that showed them: the images the agent will not get, and why."""
        try:
            line = left_out_line(record.image_checks(self._settings.current.image_max_bytes))
            if line is None:
                return
            from IPython.display import display

            shown = f'<div class="ctx-magic-notice" style="color:#a15c00">{html.escape(line)}</div>'
            display({"text/html": shown, "text/plain": line}, raw=True, metadata=OWN_DISPLAY)
        except Exception:  # noqa: BLE001 - a note about images must never break the cell
            pass

    def format_error(self, error: BaseException) -> str:
        try:
            lines = self.shell.InteractiveTB.structured_traceback(type(error), error, error.__traceback__)
            return strip_ansi("\n".join(lines))
        except Exception:  # noqa: BLE001
            return f"{type(error).__name__}: {error}"
