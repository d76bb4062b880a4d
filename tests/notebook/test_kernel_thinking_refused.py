"""Refused thinking in a real kernel: a session on a model with the prefix check (claude-sonnet-5-5,
the default), whose history changed under its thinking, shows one line, goes on in the same cell,
and every later cell and `%compact` are accepted. Driven through jupyter_client against the
stand-in over HTTP, which runs the API's own prefix check (a new account: a 400)."""

from __future__ import annotations

import pytest
from kernel_rig import SETUP, kernel_env, start

from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread

pytestmark = pytest.mark.slow  # real kernels: minutes, not seconds

# Rewrites the first prompt of the live conversation after the answers to it were written, as a
# client that edits its history would; every thinking block after it then fails the check.
EDIT_HISTORY = """\
from ctx_magic.notebook.extension import controller_of
_session = controller_of(get_ipython()).host.session
_messages = list(_session.live.messages)
_messages[0] = _messages[0].with_content([{"type": "text", "text": _messages[0].text + " (edited)"}])
_session.live.replace(_messages)
print("edited", len(_messages))
"""


def test_a_refused_prefix_shows_one_line_and_every_later_cell_is_accepted(tmp_path, kernels):
    api = OfflineAPI(OfflineConfig())
    with serve_in_thread(api) as (url, _stop):
        kernel = start(kernels, tmp_path, kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url), SETUP)
        assert "claude-sonnet-5-5" in kernel.execute("%config CtxMagic.model")
        for text in ["%%agent\nhello", "%%agent\nrun\n```python\nprint(6 * 7)\n```"]:
            kernel.execute(text)
        assert {r.status for r in api.requests if r.path == "/v1/messages"} == {200}
        assert "edited" in kernel.execute(EDIT_HISTORY)
        before = len(api.requests)
        shown = kernel.execute("%%agent\nwhat did we find?")
        after_refusal = len(api.requests)
        later = [kernel.execute(cell) for cell in ["%compact", "%%agent\nand now?"]]
    refused = [r for r in api.requests[before:after_refusal] if r.status == 400]
    assert len(refused) == 1 and refused[0].thinking_mismatches
    assert shown.count("thinking block") == 1 and "the API refused" in shown and "Traceback" not in shown
    assert "Compacted" in later[0]
    assert all("Traceback" not in text and "refused the request" not in text for text in later), later
    assert all(r.status == 200 for r in api.requests[after_refusal:] if r.path == "/v1/messages")
