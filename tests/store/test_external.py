"""The transcript and session folder: a large output is stored once (its tool-results file), the transcript line keeps a
reference, loading gives the message back byte for byte, and a missing file is reported."""

from __future__ import annotations

import json

from ctx_magic.messages import Message, tool_result_block, user_text
from ctx_magic.store.external import EXTERNAL_MIN_CHARS, STORED_KEY
from ctx_magic.store.files import hashed_path, write_once
from ctx_magic.store.session import SessionDir
from ctx_magic.store.transcript import Transcript

PNG = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


def big(n: int = 0) -> str:
    return "".join(f"line {i} of output {n}\n" for i in range(EXTERNAL_MIN_CHARS // 10))


def results(tool_use_id: str, content) -> Message:
    return Message("user", (tool_result_block(tool_use_id, content),))


def folder_bytes(store: SessionDir) -> int:
    return sum(p.stat().st_size for p in store.root.rglob("*") if p.is_file())


def test_a_large_output_is_stored_once_and_loads_back_byte_identical(tmp_path):
    store = SessionDir(tmp_path, "s").create()
    message = results("toolu_1", big())
    t = store.transcript()
    t.append_message(user_text("go"))
    t.append_message(message)
    t.close()
    line = store.transcript_path.read_text().splitlines()[1]
    assert len(line) < 1_000 and STORED_KEY in line and "tool-results/toolu_1.txt" in line
    assert store.tool_result_path("toolu_1").read_text() == big()
    loaded = store.load_transcript()
    assert list(loaded.messages())[1] == message and loaded.problems == []
    before = store.tool_result_path("toolu_1").stat()
    store.write_tool_result("toolu_1", big())  # the budget persisting the same output: nothing written again
    after = store.tool_result_path("toolu_1").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert folder_bytes(store) < len(big()) * 1.05  # once on disk, not twice


def test_an_output_beside_images_is_stored_and_the_images_stay_in_the_line(tmp_path):
    store = SessionDir(tmp_path, "s").create()
    message = results("toolu_2", [{"type": "text", "text": big()}, PNG])
    store.transcript().append_message(message)
    record = json.loads(store.transcript_path.read_text())
    assert record["content"][0]["content"][1] == PNG
    assert list(store.load_transcript().messages()) == [message]


def test_small_outputs_and_several_text_parts_stay_in_the_line(tmp_path):
    store = SessionDir(tmp_path, "s").create()
    small = results("toolu_3", "short")
    parts = results("toolu_4", [{"type": "text", "text": big(1)}, {"type": "text", "text": big(2)}])
    t = store.transcript()
    t.append_message(small)
    t.append_message(parts)
    assert list(store.tool_results_dir.iterdir()) == []
    assert list(store.load_transcript().messages()) == [small, parts]


def test_lone_surrogates_in_a_large_output_stay_in_the_line(tmp_path):
    store = SessionDir(tmp_path, "s").create()
    message = results("toolu_5", big() + "\udcff")
    store.transcript().append_message(message)
    assert list(store.tool_results_dir.iterdir()) == []
    assert list(store.load_transcript().messages()) == [message]


def test_a_missing_output_file_is_reported_and_the_message_stays_valid(tmp_path):
    store = SessionDir(tmp_path, "s").create()
    store.transcript().append_message(results("toolu_6", big()))
    store.tool_result_path("toolu_6").unlink()
    loaded = store.load_transcript()
    [message] = loaded.messages()
    assert "tool-results/toolu_6.txt, which is missing" in message.content[0]["content"]
    assert STORED_KEY not in json.dumps(message.to_json())
    assert loaded.problems == [f"line 1: the output of toolu_6 ({len(big()):,} characters) should be in "
                               "tool-results/toolu_6.txt, but that file is missing or was changed; the agent "
                               "sees a note in its place"]


def test_an_output_file_written_again_with_other_content_keeps_the_old_one_at_its_hash(tmp_path):
    store = SessionDir(tmp_path, "s").create()
    first = results("cell_1_1", big(1))
    store.transcript().append_message(first)
    store.write_tool_result("cell_1_1", big(2))  # the same id again (a restarted count): nothing lost
    assert store.tool_result_path("cell_1_1").read_text() == big(2)
    assert list(store.load_transcript().messages()) == [first]


def test_write_once_moves_other_content_aside_and_skips_identical_content(tmp_path):
    path = tmp_path / "out.txt"
    write_once(path, b"a")
    write_once(path, b"a")
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    write_once(path, b"b")
    sha_a = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"
    assert path.read_bytes() == b"b" and hashed_path(path, sha_a).read_bytes() == b"a"


def test_a_reference_never_reads_outside_its_session(tmp_path):
    store = SessionDir(tmp_path, "s").create()
    (tmp_path / "secret.txt").write_text("x")
    record = {"type": "message", **results("t", "[stored]").to_json()}
    sha_x = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    record["content"][0][STORED_KEY] = {"path": "../../secret.txt", "chars": 1, "sha256": sha_x}
    store.transcript_path.write_text(json.dumps(record) + "\n")
    loaded = Transcript.load(store.transcript_path)
    assert "outside the session folder" in loaded.problems[0]
    assert "secret.txt, which is missing" in list(loaded.messages())[0].content[0]["content"]
