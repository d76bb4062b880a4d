"""No dead ends, in real kernels: every fault of these classes leaves a working session.

A line cut off by a crash, secrets, images the API refuses, two kernels on one session, a huge
output, and the cells run just before a restart. Each test drives real ipykernels through
jupyter_client against the offline server over HTTP, and reads what reached the API and the disk.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_samples import jpeg, png
from kernel_rig import SETUP, Kernel, kernel_env, session_id, start

from ctx_magic.images import API_MAX_BASE64_CHARS, API_MAX_IMAGES, sniff_media_type
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread
from ctx_magic.store.session import SessionDir

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

RACE_ROUNDS = 8  # two kernels resuming one session at once, again and again: exactly one each time
OUTPUT_MB = 20
# 105 images are 210,000 tokens at the estimate's flat 2,000 each: a million-token window holds them uncompacted.
WINDOW = 1_000_000
IMAGES_SETUP = f"{SETUP}\n%config CtxMagic.image_max_bytes = 50000000\n%config CtxMagic.context_window = {WINDOW}"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[OfflineAPI, dict[str, str]]]:
    offline = OfflineAPI(OfflineConfig(window=WINDOW))
    with serve_in_thread(offline) as (url, _stop):
        yield offline, kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)


@pytest.fixture
def api(server) -> tuple[OfflineAPI, dict[str, str]]:
    return server


@pytest.fixture(scope="module")
def shared(server, tmp_path_factory) -> Iterator[tuple[Kernel, Path]]:
    """One kernel for the tests that need no restart (each opens a session of its own)."""
    folder = tmp_path_factory.mktemp("shared")
    kernel = Kernel(folder, server[1])
    try:
        assert "ERROR" not in kernel.execute(IMAGES_SETUP)
        yield kernel, folder
    finally:
        kernel.close()


@pytest.fixture
def kernels(tmp_path, api) -> Iterator[list[Kernel]]:
    """Kernels in tmp_path, started on demand with `kernels.append(...)`, all closed at the end."""
    started: list[Kernel] = []
    yield started
    for kernel in started:
        kernel.close()




def main_requests(api: OfflineAPI) -> list[dict]:
    return [r.body for r in api.requests if r.path == "/v1/messages" and r.kind == "normal" and r.body]


def request_images(body: dict) -> list[dict]:
    def walk(blocks: list) -> Iterator[dict]:
        for block in blocks:
            if block.get("type") == "image":
                yield block
            elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                yield from walk(block["content"])

    return [image for message in body["messages"] for image in walk(message["content"])]


# -- 1. a crash mid-write ---------------------------------------------------------------------------


def test_a_line_cut_off_by_a_crash_is_set_aside_and_every_whole_message_kept(tmp_path, api, kernels):
    offline, env = api
    first = start(kernels, tmp_path, env)
    first.execute("%%agent\nthe first question")
    sid = session_id(first)
    first.kill()
    store = SessionDir(tmp_path / ".ctx_magic", sid)
    cut = b'{"type":"message","uuid":"u-cut","role":"assistant","kind":"normal","content":[{"type":"te'
    with open(store.transcript_path, "ab") as transcript:  # what a kernel killed mid-append leaves
        transcript.write(cut)

    second = start(kernels, tmp_path, env)
    resumed = second.execute(f"%agent --resume {sid}")
    assert f"Resumed session {sid}" in resumed and "the last record is truncated" in resumed
    assert "Done" in second.execute("%%agent\nthe question after the crash")
    loaded = store.load_transcript()
    users = [m.text for m in loaded.messages() if m.role == "user"]
    assert users == ["the first question", "the question after the crash"]  # not glued onto the cut line
    assert loaded.problems == [f"A record cut off by a crash ({len(cut):,} bytes) was set aside in "
                               "transcript.damaged (from byte 0); every whole record is kept."]
    assert (store.root / "transcript.damaged").read_bytes() == cut + b"\n"
    assert "set aside in transcript.damaged" in second.execute(f"%agent --resume {sid}")  # said at every resume


# -- 2. secrets -----------------------------------------------------------------------------------


def test_secrets_said_in_words_are_refused_and_never_reach_the_next_prompt(api, shared):
    offline, _ = api
    kernel, folder = shared
    key_id = "AKIA" + "2OGYBAH6TP4WVLXZ"
    glued = "AKIA" + "IOSFODNN7EXAMPLE"  # a key glued to the word before it
    for text, kind, masked in [("the database password is Tr0ub4dor&3", "a password in plain words", "T**********"),
                               (f"aws_key_id {key_id} for the exports bucket", "an AWS access key id",
                                "AKIA************…"),
                               (f"aws_key_id{glued} for prod", "an AWS access key id", "AKIA************…")]:
        shown = kernel.execute(f"%memory add {text}")
        assert f"Refused to store this memory: {masked} looks like {kind}." in shown
        assert "Tr0ub4dor" not in shown and key_id not in shown and glued not in shown
    kernel.execute("%memory add Reports go out on Mondays.")
    kernel.execute("%%agent --new\nhello")
    system = json.dumps(main_requests(offline)[-1]["system"])
    assert "Reports go out on Mondays." in system
    assert "Tr0ub4dor" not in system and key_id not in system and glued not in system
    stored = "".join(p.read_text() for p in (folder / ".ctx_magic" / "memory").glob("*.md"))
    assert "Tr0ub4dor" not in stored and key_id not in stored and glued not in stored


# -- 3. images the API refuses ------------------------------------------------------------------


def test_images_are_sent_as_their_bytes_say_and_those_the_api_refuses_are_named_once(api, shared):
    offline, _ = api
    kernel, folder = shared
    (folder / "x.png").write_bytes(jpeg(64, 48))  # a JPEG with a .png name
    (folder / "big.png").write_bytes(png(1_200, 1_200, noise=True))  # 5.8 MB of base64
    kernel.execute("%agent --new")
    kernel.execute("from IPython.display import Image, display\ndisplay(Image(filename='x.png'))")
    shown = kernel.execute("display(Image(filename='big.png'))")
    assert shown.count("will not be sent to the agent") == 1 and "over the API's limit of 5 MB" in shown
    ran = kernel.execute("%%agent\nshow it again\n```python\ndisplay(Image(filename='x.png'))\n```")
    assert "Done" in ran
    kernel.execute("%%agent\nwhat did you see?")
    images = request_images(main_requests(offline)[-1])
    assert len(images) == 2  # the user's cell and the agent's run; the 5.8 MB one left out
    for image in images:
        data = image["source"]["data"]
        assert len(data) <= API_MAX_BASE64_CHARS
        assert image["source"]["media_type"] == sniff_media_type(base64.b64decode(data)) == "image/jpeg"
    assert "[image omitted: image/png of 5" in json.dumps(main_requests(offline)[-1])


def test_a_request_carries_at_most_100_images(api, shared):
    offline, _ = api
    kernel, _ = shared
    kernel.execute("%agent --new")
    payload = base64.b64encode(png(4, 4)).decode()
    kernel.execute("import base64\nfrom IPython.display import Image, display\n"
                   f"for _ in range(105):\n    display(Image(data=base64.b64decode('{payload}')))")
    before = len(main_requests(offline))
    shown = kernel.execute("%%agent\nhow many plots?")
    assert "Done" in shown and "too many images" not in shown  # the API refuses 101 or more
    sent = main_requests(offline)[before:]
    assert sent and all(0 < len(request_images(body)) <= API_MAX_IMAGES for body in sent)  # none compacted away


# -- 4. two kernels on one session ---------------------------------------------------------------


def test_two_kernels_resuming_one_session_at_once_exactly_one_holds_it(tmp_path, api, kernels):
    offline, env = api
    racers = [start(kernels, tmp_path, env), start(kernels, tmp_path, env)]
    racers[0].execute("%%agent\nhello")
    sid = session_id(racers[0])
    racers[0].execute("%agent --new")  # closes the session: free to resume
    for _ in range(RACE_ROUNDS):
        runs = [kernel.submit(f"%agent --resume {sid}") for kernel in racers]
        shown = [kernel.collect(run) for kernel, run in zip(racers, runs)]
        won = [f"Resumed session {sid}" in text for text in shown]
        assert won.count(True) == 1, shown
        loser, winner = (racers[won.index(False)], shown[won.index(False)]), racers[won.index(True)]
        assert f"Session {sid} is open in another kernel" in loser[1] and "Traceback" not in loser[1]
        assert "Done" in winner.execute("%%agent\nstill mine?")
        winner.execute("%agent --new")  # lets go of it: the next round races again
    lines = [json.loads(line) for line in SessionDir(tmp_path / ".ctx_magic", sid).transcript_path.open()]
    users = [r for r in lines if r.get("type") == "message" and r["role"] == "user"]
    assert len(users) == 1 + RACE_ROUNDS  # one writer each round, never two


# -- 5. size ------------------------------------------------------------------------------------


def test_a_20_mb_output_is_capped_in_the_cell_stored_once_and_resumed_byte_identical(tmp_path, api, kernels):
    offline, env = api
    kernel = start(kernels, tmp_path, env)
    code = f"for i in range({OUTPUT_MB * 1024 * 1024 // 64}):\n    print(f'{{i:>10}} ' + 'x' * 52)"
    outputs = kernel.outputs(f"%%agent\nprint a lot\n```python\n{code}\n```", timeout=600)
    shown = json.dumps(outputs)
    assert len(shown) < 400_000 and "MB more not shown; the full output is at" in shown  # not 20 MB in the .ipynb
    sid = session_id(kernel)
    store = SessionDir(tmp_path / ".ctx_magic", sid)
    on_disk = sum(p.stat().st_size for p in store.root.rglob("*") if p.is_file())
    assert OUTPUT_MB * 2**20 <= on_disk < 1.2 * OUTPUT_MB * 2**20  # once, not twice
    dump = ("import json\nfrom ctx_magic.notebook.extension import controller_of\n"
            "live = controller_of(get_ipython()).host.session.live\n"
            "json.dump([m.to_json() for m in live.messages], open('{}', 'w'))")
    kernel.execute(dump.format("before.json"))
    kernel.kill()
    again = start(kernels, tmp_path, env)
    assert f"Resumed session {sid}" in again.execute(f"%agent --resume {sid}")
    again.execute(dump.format("after.json"))
    assert (tmp_path / "after.json").read_bytes() == (tmp_path / "before.json").read_bytes()
    assert store.load_transcript().problems == []


# -- 6. the cells run just before a restart -------------------------------------------------------


def test_cells_run_before_a_kernel_restart_reach_the_next_turn(tmp_path, api, kernels):
    offline, env = api
    kernel = start(kernels, tmp_path, env)
    kernel.execute("%%agent\nhello")
    sid = session_id(kernel)
    kernel.execute("answer = 6 * 7\nprint('the answer is', answer)")
    kernel.kill()
    again = start(kernels, tmp_path, env)
    again.execute(f"%agent --resume {sid}")
    again.execute("%%agent\nwhat did I print?")
    assert "the answer is 42" in json.dumps(main_requests(offline)[-1]["messages"])
