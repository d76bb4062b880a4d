"""FileTools (agent/files.py): read_file, list_files and grep, confined to the session's root."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ctx_magic.agent.files import (
    GREP_MAX_MATCHES,
    LIST_MAX_ENTRIES,
    READ_DEFAULT_LINES,
    READ_MAX_LINE_CHARS,
    UNCHANGED_STUB,
    FileTools,
    ToolError,
)

FIFO_WAIT_SECONDS = 10  # a tool that opens a FIFO blocks forever; this bounds the test, not the pass


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the root, holding a secret the tools must never show."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("TOP SECRET needle\n")
    return folder


@pytest.fixture
def tools(root: Path) -> FileTools:
    return FileTools(root)


def write_lines(path: Path, count: int, prefix: str = "line") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{prefix} {n}\n" for n in range(1, count + 1)))
    return path


def live(*ids: str) -> Callable[[str], bool]:
    return set(ids).__contains__


def finishes_despite_fifo(action: Callable[[], object], fifo: Path) -> object:
    """Run `action` in a thread; if it blocks on the FIFO, unblock it and fail the test."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = action()
        except Exception as error:  # noqa: BLE001 - handed back to the test
            outcome["error"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(FIFO_WAIT_SECONDS)
    if worker.is_alive():
        with open(fifo, "wb"):  # a writer lets the blocked reader go on
            pass
        worker.join(FIFO_WAIT_SECONDS)
        pytest.fail("the tool blocked opening a FIFO")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]


# --- read_file: lines, offsets, hints -----------------------------------------------------


def test_read_file_numbers_lines_from_one(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("alpha\nbeta\ngamma\n")
    assert tools.read_file("a.txt") == "1\talpha\n2\tbeta\n3\tgamma"


def test_read_file_offset_and_limit_select_lines_and_hint_the_next_offset(root: Path, tools: FileTools) -> None:
    write_lines(root / "ten.txt", 10)
    text = tools.read_file("ten.txt", offset=3, limit=2)
    assert text.splitlines() == ["3\tline 3", "4\tline 4", "[lines 3-4 of 10; read on with offset=5]"]


def test_read_file_reading_to_the_end_has_no_continuation_hint(root: Path, tools: FileTools) -> None:
    write_lines(root / "ten.txt", 10)
    text = tools.read_file("ten.txt", offset=8, limit=50)
    assert text.splitlines() == [" 8\tline 8", " 9\tline 9", "10\tline 10"]
    assert "read on" not in text


def test_read_file_line_numbers_are_right_aligned(root: Path, tools: FileTools) -> None:
    write_lines(root / "ten.txt", 10)
    lines = tools.read_file("ten.txt").splitlines()
    assert lines[0] == " 1\tline 1"
    assert lines[9] == "10\tline 10"


def test_read_file_default_limit_reads_2000_lines_then_hints(root: Path, tools: FileTools) -> None:
    write_lines(root / "long.txt", READ_DEFAULT_LINES + 500)
    lines = tools.read_file("long.txt").splitlines()
    assert len(lines) == READ_DEFAULT_LINES + 1
    assert lines[READ_DEFAULT_LINES - 1].endswith(f"\tline {READ_DEFAULT_LINES}")
    assert lines[-1] == f"[lines 1-{READ_DEFAULT_LINES} of {READ_DEFAULT_LINES + 500}; read on with offset=2001]"


def test_read_file_continuation_offset_reads_the_rest(root: Path, tools: FileTools) -> None:
    write_lines(root / "five.txt", 5)
    first = tools.read_file("five.txt", limit=3)
    assert first.endswith("read on with offset=4]")
    assert tools.read_file("five.txt", offset=4).splitlines() == ["4\tline 4", "5\tline 5"]


def test_read_file_cuts_long_lines(root: Path, tools: FileTools) -> None:
    (root / "wide.txt").write_text("x" * (READ_MAX_LINE_CHARS + 700) + "\nshort\n")
    lines = tools.read_file("wide.txt").splitlines()
    assert lines[0] == "1\t" + "x" * READ_MAX_LINE_CHARS
    assert lines[1] == "2\tshort"


def test_read_file_empty_file_says_so(root: Path, tools: FileTools) -> None:
    (root / "empty.txt").write_text("")
    assert tools.read_file("empty.txt") == "(empty file)"


def test_read_file_offset_past_end_is_a_tool_error_naming_the_length(root: Path, tools: FileTools) -> None:
    write_lines(root / "three.txt", 3)
    with pytest.raises(ToolError, match=r"offset 4 is past the end of the file \(3 lines\)"):
        tools.read_file("three.txt", offset=4)


def test_read_file_offset_zero_starts_at_the_first_line(root: Path, tools: FileTools) -> None:
    write_lines(root / "three.txt", 3)
    assert tools.read_file("three.txt", offset=0, limit=1).splitlines()[0] == "1\tline 1"


def test_read_file_refuses_a_folder_pointing_to_list_files(root: Path, tools: FileTools) -> None:
    (root / "sub").mkdir()
    with pytest.raises(ToolError, match="is a folder; use list_files"):
        tools.read_file("sub")


def test_read_file_missing_file_is_a_tool_error(tools: FileTools) -> None:
    with pytest.raises(ToolError, match="nope.txt does not exist"):
        tools.read_file("nope.txt")


def test_read_file_decodes_non_utf8_text_without_error(root: Path, tools: FileTools) -> None:
    (root / "latin1.txt").write_bytes("café au lait\nnaïve\n".encode("latin-1"))
    text = tools.read_file("latin1.txt")
    assert text.splitlines()[0].startswith("1\tcaf") and text.splitlines()[0].endswith(" au lait")
    assert text.splitlines()[1].startswith("2\tna")
    text.encode("utf-8")  # nothing undecodable survives


def test_read_file_binary_file_becomes_a_readable_description(root: Path, tools: FileTools) -> None:
    (root / "blob.bin").write_bytes(bytes(range(256)) * 8)
    text = tools.read_file("blob.bin")
    assert "binary output: 2,048 bytes" in text
    text.encode("utf-8")


def test_read_file_refuses_a_fifo_without_blocking(root: Path, tools: FileTools) -> None:
    fifo = root / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ToolError, match="not a regular file"):
        finishes_despite_fifo(lambda: tools.read_file("pipe"), fifo)


# --- confinement ----------------------------------------------------------------------------


def test_read_file_refuses_relative_path_outside_root(root: Path, outside: Path, tools: FileTools) -> None:
    with pytest.raises(ToolError, match="outside the session folder") as caught:
        tools.read_file("../outside/secret.txt")
    message = str(caught.value)
    assert "../outside/secret.txt" in message and str(root) in message
    assert "TOP SECRET" not in message


def test_read_file_refuses_absolute_path_outside_root(outside: Path, tools: FileTools) -> None:
    with pytest.raises(ToolError, match="outside the session folder"):
        tools.read_file(str(outside / "secret.txt"))


def test_read_file_refuses_dotdot_escape_through_a_subfolder(root: Path, outside: Path, tools: FileTools) -> None:
    (root / "sub").mkdir()
    with pytest.raises(ToolError, match="outside the session folder"):
        tools.read_file("sub/../../outside/secret.txt")


def test_read_file_refuses_sibling_folder_sharing_the_root_prefix(root: Path, tools: FileTools) -> None:
    sibling = root.parent / (root.name + "2")
    sibling.mkdir()
    (sibling / "x.txt").write_text("not yours\n")
    with pytest.raises(ToolError, match="outside the session folder"):
        tools.read_file(str(sibling / "x.txt"))


def test_read_file_allows_dotdot_that_stays_inside_root(root: Path, tools: FileTools) -> None:
    (root / "sub").mkdir()
    (root / "a.txt").write_text("inside\n")
    assert tools.read_file("sub/../a.txt") == "1\tinside"


def test_read_file_allows_absolute_path_inside_root(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("inside\n")
    assert tools.read_file(str(root / "a.txt")) == "1\tinside"


def test_read_file_refuses_symlink_escaping_root(root: Path, outside: Path, tools: FileTools) -> None:
    os.symlink(outside / "secret.txt", root / "innocent.txt")
    with pytest.raises(ToolError, match="outside the session folder"):
        tools.read_file("innocent.txt")


def test_read_file_refuses_file_under_symlinked_folder_escaping_root(
    root: Path, outside: Path, tools: FileTools
) -> None:
    os.symlink(outside, root / "linked")
    with pytest.raises(ToolError, match="outside the session folder"):
        tools.read_file("linked/secret.txt")


def test_read_file_follows_symlink_that_stays_inside_root(root: Path, tools: FileTools) -> None:
    (root / "real.txt").write_text("real\n")
    os.symlink(root / "real.txt", root / "alias.txt")
    assert tools.read_file("alias.txt") == "1\treal"


def test_read_file_reads_extra_roots(root: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "tool-results").mkdir(parents=True)
    (store / "tool-results" / "toolu_1.txt").write_text("persisted output\n")
    tools = FileTools(root, extra_roots=(store,))
    assert tools.read_file(str(store / "tool-results" / "toolu_1.txt")) == "1\tpersisted output"


def test_read_file_outside_root_and_extra_roots_still_refused(root: Path, outside: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    tools = FileTools(root, extra_roots=(store,))
    with pytest.raises(ToolError, match="outside the session folder"):
        tools.read_file(str(outside / "secret.txt"))


def test_read_file_symlink_loop_is_a_tool_error(root: Path, tools: FileTools) -> None:
    os.symlink("loop", root / "loop")
    with pytest.raises(ToolError, match="loop cannot be resolved"):
        tools.read_file("loop")


def test_read_file_path_with_nul_byte_is_a_tool_error(tools: FileTools) -> None:
    with pytest.raises(ToolError):
        tools.read_file("a\0b.txt")


# --- the unchanged-file stub ----------------------------------------------------------------


def test_unchanged_reread_returns_stub_naming_the_earlier_tool_use(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("content\n")
    first = tools.read_file("a.txt", tool_use_id="toolu_1", is_live=live())
    second = tools.read_file("a.txt", tool_use_id="toolu_2", is_live=live("toolu_1"))
    assert first == "1\tcontent"
    assert second == UNCHANGED_STUB.format(tool_use_id="toolu_1")
    assert "toolu_1" in second and "content\n" not in second


def test_stub_applies_when_default_and_explicit_window_are_the_same(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("content\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    again = tools.read_file("a.txt", offset=1, limit=READ_DEFAULT_LINES, tool_use_id="toolu_2", is_live=live("toolu_1"))
    assert again == UNCHANGED_STUB.format(tool_use_id="toolu_1")


def test_stub_applies_to_a_path_spelled_differently(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("content\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    again = tools.read_file(str(root / "a.txt"), tool_use_id="toolu_2", is_live=live("toolu_1"))
    assert again == UNCHANGED_STUB.format(tool_use_id="toolu_1")


def test_reread_after_the_file_grew_returns_full_content(root: Path, tools: FileTools) -> None:
    path = root / "a.txt"
    path.write_text("one\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    path.write_text("one\ntwo\n")
    again = tools.read_file("a.txt", tool_use_id="toolu_2", is_live=live("toolu_1"))
    assert again == "1\tone\n2\ttwo"


def test_reread_after_mtime_change_with_same_size_returns_full_content(root: Path, tools: FileTools) -> None:
    path = root / "a.txt"
    path.write_text("abc\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    path.write_text("xyz\n")  # same size; only the modification time tells
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    again = tools.read_file("a.txt", tool_use_id="toolu_2", is_live=live("toolu_1"))
    assert again == "1\txyz"


def test_reread_after_size_change_with_same_mtime_returns_full_content(root: Path, tools: FileTools) -> None:
    path = root / "a.txt"
    path.write_text("abc\n")
    before = path.stat()
    tools.read_file("a.txt", tool_use_id="toolu_1")
    path.write_text("abcdef\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # only the size tells
    again = tools.read_file("a.txt", tool_use_id="toolu_2", is_live=live("toolu_1"))
    assert again == "1\tabcdef"


def test_reread_when_earlier_result_is_no_longer_live_returns_full_content(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("content\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    again = tools.read_file("a.txt", tool_use_id="toolu_2", is_live=live("toolu_other"))
    assert again == "1\tcontent"


def test_reread_with_a_different_offset_or_limit_returns_full_content(root: Path, tools: FileTools) -> None:
    write_lines(root / "five.txt", 5)
    tools.read_file("five.txt", offset=1, limit=2, tool_use_id="toolu_1")
    other_offset = tools.read_file("five.txt", offset=2, limit=2, tool_use_id="toolu_2", is_live=live("toolu_1"))
    assert other_offset.splitlines()[:2] == ["2\tline 2", "3\tline 3"]
    other_limit = tools.read_file("five.txt", offset=2, limit=3, tool_use_id="toolu_3", is_live=live("toolu_2"))
    assert other_limit.splitlines()[:3] == ["2\tline 2", "3\tline 3", "4\tline 4"]


def test_stub_names_the_latest_full_read(root: Path, tools: FileTools) -> None:
    path = root / "a.txt"
    path.write_text("one\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    path.write_text("one\ntwo\n")
    tools.read_file("a.txt", tool_use_id="toolu_2", is_live=live("toolu_1"))
    stub = tools.read_file("a.txt", tool_use_id="toolu_3", is_live=live("toolu_1", "toolu_2"))
    assert stub == UNCHANGED_STUB.format(tool_use_id="toolu_2")


def test_a_stub_never_becomes_the_result_later_stubs_point_to(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("content\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    tools.read_file("a.txt", tool_use_id="toolu_2", is_live=live("toolu_1"))
    third = tools.read_file("a.txt", tool_use_id="toolu_3", is_live=live("toolu_1", "toolu_2"))
    assert third == UNCHANGED_STUB.format(tool_use_id="toolu_1")


def test_invalidate_stubs_stops_stubs(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("content\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    tools.invalidate_stubs()
    again = tools.read_file("a.txt", tool_use_id="toolu_2", is_live=lambda _id: True)
    assert again == "1\tcontent"


def test_invalidate_stubs_keeps_reads_for_rehydration(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("a\n")
    (root / "b.txt").write_text("b\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    tools.read_file("b.txt", offset=1, limit=7, tool_use_id="toolu_2")
    tools.invalidate_stubs()
    reads = tools.recent_reads(5)
    assert [Path(r.path).name for r in reads] == ["b.txt", "a.txt"]
    assert [r.tool_use_id for r in reads] == ["", ""]
    assert (reads[0].offset, reads[0].limit) == (1, 7)


def test_stubs_resume_after_invalidation_once_the_file_is_read_again(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("content\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    tools.invalidate_stubs()
    tools.read_file("a.txt", tool_use_id="toolu_2", is_live=live("toolu_1"))
    stub = tools.read_file("a.txt", tool_use_id="toolu_3", is_live=live("toolu_2"))
    assert stub == UNCHANGED_STUB.format(tool_use_id="toolu_2")


# --- recent reads (rehydration) -------------------------------------------------------------


def test_recent_reads_lists_most_recent_first(root: Path, tools: FileTools) -> None:
    for name in ("a", "b", "c"):
        (root / f"{name}.txt").write_text(f"{name}\n")
        tools.read_file(f"{name}.txt", tool_use_id=f"toolu_{name}")
    assert [Path(r.path).name for r in tools.recent_reads(2)] == ["c.txt", "b.txt"]
    assert [Path(r.path).name for r in tools.recent_reads(10)] == ["c.txt", "b.txt", "a.txt"]


def test_recent_reads_record_resolved_path_window_and_tool_use_id(root: Path, tools: FileTools) -> None:
    write_lines(root / "sub" / "a.txt", 5)
    tools.read_file("sub/../sub/a.txt", offset=2, limit=2, tool_use_id="toolu_9")
    (read,) = tools.recent_reads(1)
    assert read.path == str((root / "sub" / "a.txt").resolve())
    assert (read.offset, read.limit, read.tool_use_id) == (2, 2, "toolu_9")
    assert read.size == (root / "sub" / "a.txt").stat().st_size


def test_recent_reads_rereading_a_file_moves_it_to_the_front(root: Path, tools: FileTools) -> None:
    write_lines(root / "a.txt", 5)
    (root / "b.txt").write_text("b\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    tools.read_file("b.txt", tool_use_id="toolu_2")
    tools.read_file("a.txt", offset=3, tool_use_id="toolu_3")
    assert [Path(r.path).name for r in tools.recent_reads(5)] == ["a.txt", "b.txt"]


def test_recent_reads_an_unchanged_reread_counts_as_the_latest_read(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("a\n")
    (root / "b.txt").write_text("b\n")
    tools.read_file("a.txt", tool_use_id="toolu_1")
    tools.read_file("b.txt", tool_use_id="toolu_2")
    stub = tools.read_file("a.txt", tool_use_id="toolu_3", is_live=live("toolu_1"))
    assert stub == UNCHANGED_STUB.format(tool_use_id="toolu_1")
    assert [Path(r.path).name for r in tools.recent_reads(5)] == ["a.txt", "b.txt"]


def test_recent_reads_skip_failed_reads(root: Path, tools: FileTools) -> None:
    write_lines(root / "a.txt", 2)
    with pytest.raises(ToolError):
        tools.read_file("a.txt", offset=10)
    assert tools.recent_reads(5) == []


# --- list_files -----------------------------------------------------------------------------


def make_tree(root: Path) -> None:
    for rel in ("a.py", "notes.txt", "sub/b.py", "sub/c.txt", "sub/deep/d.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"# {rel}\n")


def test_list_files_lists_every_file_recursively_in_order(root: Path, tools: FileTools) -> None:
    make_tree(root)
    assert tools.list_files().splitlines() == ["a.py", "notes.txt", "sub/b.py", "sub/c.txt", "sub/deep/d.py"]


def test_list_files_pattern_matches_file_names_anywhere(root: Path, tools: FileTools) -> None:
    make_tree(root)
    assert tools.list_files(pattern="*.py").splitlines() == ["a.py", "sub/b.py", "sub/deep/d.py"]


def test_list_files_pattern_matches_relative_paths(root: Path, tools: FileTools) -> None:
    make_tree(root)
    assert tools.list_files(pattern="sub/*.txt").splitlines() == ["sub/c.txt"]


def test_list_files_of_a_subfolder_is_relative_to_it(root: Path, tools: FileTools) -> None:
    make_tree(root)
    assert tools.list_files("sub").splitlines() == ["b.py", "c.txt", "deep/d.py"]


def test_list_files_of_a_file_gives_its_path_under_root(root: Path, tools: FileTools) -> None:
    make_tree(root)
    assert tools.list_files("sub/deep/d.py") == "sub/deep/d.py"


def test_list_files_says_when_nothing_matches(root: Path, tools: FileTools) -> None:
    make_tree(root)
    assert tools.list_files(pattern="*.csv") == "(no files match)"


def test_list_files_caps_at_500_entries_and_says_so(root: Path, tools: FileTools) -> None:
    for n in range(LIST_MAX_ENTRIES + 1):
        (root / f"f{n:04d}.txt").write_text("")
    lines = tools.list_files().splitlines()
    assert len(lines) == LIST_MAX_ENTRIES + 1
    assert lines[-2] == f"f{LIST_MAX_ENTRIES - 1:04d}.txt"
    assert lines[-1] == f"[more than {LIST_MAX_ENTRIES} files; narrow the pattern]"


def test_list_files_exactly_500_entries_has_no_cap_message(root: Path, tools: FileTools) -> None:
    for n in range(LIST_MAX_ENTRIES):
        (root / f"f{n:04d}.txt").write_text("")
    lines = tools.list_files().splitlines()
    assert len(lines) == LIST_MAX_ENTRIES
    assert "more than" not in lines[-1]


def test_list_files_skips_git_pycache_and_other_tool_folders(root: Path, tools: FileTools) -> None:
    make_tree(root)
    for rel in (".git/HEAD", "__pycache__/a.cpython-311.pyc", "sub/__pycache__/b.pyc", ".ipynb_checkpoints/x.ipynb"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("skip me\n")
    listing = tools.list_files()
    assert ".git" not in listing and "__pycache__" not in listing and "checkpoints" not in listing
    assert listing.splitlines() == ["a.py", "notes.txt", "sub/b.py", "sub/c.txt", "sub/deep/d.py"]


def test_list_files_does_not_list_files_reached_through_escaping_symlinks(
    root: Path, outside: Path, tools: FileTools
) -> None:
    make_tree(root)
    os.symlink(outside / "secret.txt", root / "innocent.txt")
    os.symlink(outside, root / "linked")
    listing = tools.list_files()
    assert "innocent.txt" not in listing and "secret" not in listing and "linked" not in listing
    assert listing.splitlines() == ["a.py", "notes.txt", "sub/b.py", "sub/c.txt", "sub/deep/d.py"]


def test_list_files_lists_symlink_staying_inside_root(root: Path, tools: FileTools) -> None:
    make_tree(root)
    os.symlink(root / "a.py", root / "alias.py")
    assert "alias.py" in tools.list_files(pattern="*.py").splitlines()


def test_list_files_refuses_a_folder_outside_root(outside: Path, tools: FileTools) -> None:
    with pytest.raises(ToolError, match="outside the session folder"):
        tools.list_files(str(outside))
    with pytest.raises(ToolError, match="outside the session folder"):
        tools.list_files("..")


def test_list_files_refuses_a_symlinked_folder_escaping_root(root: Path, outside: Path, tools: FileTools) -> None:
    os.symlink(outside, root / "linked")
    with pytest.raises(ToolError, match="outside the session folder"):
        tools.list_files("linked")


def test_list_files_survives_a_symlink_loop(root: Path, tools: FileTools) -> None:
    make_tree(root)
    os.symlink("loop", root / "loop")
    listing = tools.list_files().splitlines()
    assert "a.py" in listing and "sub/deep/d.py" in listing
    assert "loop" not in listing


# --- grep -----------------------------------------------------------------------------------


def test_grep_finds_regex_matches_with_path_and_line_number(root: Path, tools: FileTools) -> None:
    (root / "a.py").write_text("import os\nx = 1\ndef load_data():\n    pass\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.py").write_text("def load_model():\n    return None\n")
    assert tools.grep(r"def load_\w+").splitlines() == ["a.py:3: def load_data():", "sub/b.py:1: def load_model():"]


def test_grep_within_a_subfolder_or_a_single_file(root: Path, tools: FileTools) -> None:
    (root / "a.py").write_text("needle\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.py").write_text("hay\nneedle\n")
    assert tools.grep("needle", "sub") == "b.py:2: needle"
    assert tools.grep("needle", "a.py") == "a.py:1: needle"


def test_grep_says_when_nothing_matches(root: Path, tools: FileTools) -> None:
    (root / "a.py").write_text("hay\n")
    assert tools.grep("needle") == "(no matches)"


def test_grep_bad_regex_is_a_tool_error(tools: FileTools) -> None:
    with pytest.raises(ToolError, match=r"bad regular expression '\(unclosed'"):
        tools.grep("(unclosed")


def test_grep_skips_binary_files(root: Path, tools: FileTools) -> None:
    (root / "data.bin").write_bytes(b"\x00\x01needle\x00")
    (root / "text.txt").write_text("needle\n")
    assert tools.grep("needle") == "text.txt:1: needle"


def test_grep_stops_at_the_match_cap_and_says_so(root: Path, tools: FileTools) -> None:
    write_lines(root / "many.txt", GREP_MAX_MATCHES + 50, prefix="needle")
    lines = tools.grep("needle").splitlines()
    assert len(lines) == GREP_MAX_MATCHES + 1
    assert lines[GREP_MAX_MATCHES - 1] == f"many.txt:{GREP_MAX_MATCHES}: needle {GREP_MAX_MATCHES}"
    assert lines[-1] == f"[stopped at {GREP_MAX_MATCHES} matches]"


def test_grep_cuts_long_matching_lines(root: Path, tools: FileTools) -> None:
    (root / "wide.txt").write_text("needle" + "x" * 1_000 + "\n")
    (line,) = tools.grep("needle").splitlines()
    assert line == "wide.txt:1: " + ("needle" + "x" * 1_000)[:300]


def test_grep_searches_non_utf8_files_without_error(root: Path, tools: FileTools) -> None:
    (root / "latin1.txt").write_bytes("first\ncafé needle\n".encode("latin-1"))
    (line,) = tools.grep("needle").splitlines()
    assert line.startswith("latin1.txt:2: caf") and line.endswith(" needle")
    line.encode("utf-8")


def test_grep_skips_git_and_pycache_folders(root: Path, tools: FileTools) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("needle\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "m.txt").write_text("needle\n")
    (root / "kept.txt").write_text("needle\n")
    assert tools.grep("needle") == "kept.txt:1: needle"


def test_grep_does_not_search_files_reached_through_escaping_symlinks(
    root: Path, outside: Path, tools: FileTools
) -> None:
    (root / "own.txt").write_text("my needle\n")
    os.symlink(outside / "secret.txt", root / "innocent.txt")
    os.symlink(outside, root / "linked")
    result = tools.grep("needle")
    assert result == "own.txt:1: my needle"
    assert "SECRET" not in result


def test_grep_refuses_a_path_outside_root(outside: Path, tools: FileTools) -> None:
    with pytest.raises(ToolError, match="outside the session folder"):
        tools.grep("needle", str(outside / "secret.txt"))


def test_grep_survives_a_symlink_loop(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("needle\n")
    os.symlink("loop", root / "loop")
    assert tools.grep("needle") == "a.txt:1: needle"


def test_grep_skips_a_fifo_without_blocking(root: Path, tools: FileTools) -> None:
    (root / "a.txt").write_text("needle\n")
    fifo = root / "pipe"
    os.mkfifo(fifo)
    assert finishes_despite_fifo(lambda: tools.grep("needle"), fifo) == "a.txt:1: needle"
