"""Team memory in real kernels: two members, each in an ipykernel process of their own with their
own storage and user folders, write 50 team memories each into one team folder at the same time;
none is lost or corrupt, the index lists exactly them, and each member's next session reads the
other's as a note from a colleague, with who added it (a name nothing confirms marked as claimed)
and when."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_rig import SETUP, kernel_env, start

from ctx_magic.memory.record import Memory
from ctx_magic.memory.store import INDEX_NAME, account_name
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread

pytestmark = pytest.mark.slow  # real kernels, a browser or a whole benchmark: minutes, not seconds

EACH = 50
MEMBERS = ("alice", "bob")

WRITE = r"""
import pathlib, time
root = pathlib.Path(r"{root}")
(root / "ready-{name}").write_text("ready")
deadline = time.monotonic() + 60
while not (root / "go").exists() and time.monotonic() < deadline:  # both kernels start together
    time.sleep(0.002)
began = time.monotonic()
for i in range({each}):
    get_ipython().run_line_magic("memory", f"add --team Table {name}_t{{i}} holds the {name} export number {{i}}.")
print("window", began, time.monotonic())
"""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[OfflineAPI, dict[str, str]]]:
    offline = OfflineAPI(OfflineConfig(window=200_000))
    with serve_in_thread(offline) as (url, _stop):
        yield offline, kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url)


def member_setup(name: str, shared: Path) -> str:
    return "\n".join([SETUP, f"%config CtxMagic.storage_dir = '{name}-store'",
                      f"%config CtxMagic.user_memory_dir = '{name}-user'", f"%config CtxMagic.author = '{name}'",
                      "%config CtxMagic.team = 'analytics'", f"%config CtxMagic.team_memory_dir = r'{shared}'"])


def window(output: str) -> tuple[float, float]:
    line = next(line for line in output.splitlines() if line.startswith("window "))
    began, ended = line.split()[1:]
    return float(began), float(ended)


def test_two_kernels_write_fifty_team_memories_each_at_once_and_none_is_lost(tmp_path, server, kernels):
    offline, env = server
    shared = tmp_path / "shared"
    shared.mkdir()
    members = {}
    for name in MEMBERS:
        (tmp_path / name).mkdir()
        members[name] = start(kernels, tmp_path / name, env, setup=member_setup(name, shared))
    runs = {name: kernel.submit(WRITE.format(root=tmp_path, name=name, each=EACH)) for name, kernel in members.items()}
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"ready-{name}").exists() for name in MEMBERS):  # both are in their cells
        assert time.monotonic() < deadline and all(k.manager.is_alive() for k in kernels), "a kernel is not ready"
        time.sleep(0.01)
    (tmp_path / "go").write_text("go")
    outputs = {name: members[name].collect(runs[name], timeout=300) for name in MEMBERS}
    for output in outputs.values():
        assert "ERROR" not in output and output.count("for the team (added by ") == EACH, output[-2_000:]
    (a_began, a_ended), (b_began, b_ended) = window(outputs["alice"]), window(outputs["bob"])
    assert a_began < b_ended and b_began < a_ended  # the two members' writes overlapped in time

    folder = shared / "analytics"
    files = sorted(p for p in folder.glob("*.md") if p.name != INDEX_NAME)
    memories = [Memory.from_markdown(p.read_text(encoding="utf-8"), scope="team") for p in files]  # none corrupt
    expected = {f"Table {n}_t{i} holds the {n} export number {i}." for n in MEMBERS for i in range(EACH)}
    assert {m.text for m in memories} == expected  # none lost
    assert all(m.author == m.text.split("_")[0].split()[-1] for m in memories)
    assert all("\nscope: team\n" in p.read_text(encoding="utf-8") for p in files)
    assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == []  # nothing half-written left
    index = (folder / INDEX_NAME).read_text(encoding="utf-8")
    listed = [line for line in index.splitlines() if line.startswith("- [")]
    assert sorted(line.split("]")[0][3:] for line in listed) == sorted(m.id for m in memories)
    assert "Unreadable" not in index

    # The 100 memories do not all fit the prompt's budget, and which fit depends on who wrote last;
    # one memory from each member that does not decay is the most relevant of the folder, so both
    # members' next prompts must carry both of them.
    for name in MEMBERS:
        added = members[name].execute(f"%memory add --team --no-decay The {name} dashboard reads the exports.")
        assert "for the team (added by " in added, added
    for name, other in (("alice", "bob"), ("bob", "alice")):
        members[name].execute("%%agent --new\nWhich tables hold the exports?")
        system = json.dumps([r for r in offline.requests if r.kind == "normal"][-1].body["system"])
        when = memories[0].created.date().isoformat()
        for who in (other, name):  # both kernels run as this OS account: the names are claims
            signed = f'\\"{who}\\" (claimed; the file belongs to OS user {account_name(os.getuid())})'
            assert f"- [project] from {signed} on {when}: The {who} dashboard reads the exports." in system
