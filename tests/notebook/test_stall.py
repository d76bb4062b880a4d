"""When a run counts as stalled: the pure rules, with the clock passed in."""

from __future__ import annotations

import pytest

from ctx_magic.notebook.runs.stall import is_stalled, last_line, looks_like_prompt, shown_prompt
from ctx_magic.settings import DEFAULTS

STALL_SECONDS = DEFAULTS.stall_seconds

PROMPTS = [
    "Overwrite existing file? [Y/n] ",
    "Proceed (y/n)? ",
    "Delete everything? yes/no: ",
    "Do you want to continue? ",
    "Proceed anyway?",
    "Press any key to continue...",
    "Press Enter to go on",
    "Password: ",
    "[sudo] password for ada: ",
    "Enter passphrase for key '/home/ada/.ssh/id_ed25519': ",
    "File exists. overwrite data.csv? ",
    "> ",
    "$ ",
    "mysql> ",
    "downloading...\nDone.\nInstall these 3 packages? [y/N]",
]
WORK = [
    "epoch 3/10 loss 0.4213",
    "Downloading https://example.org/data.tar.gz",
    "Training... 50%",
    "step 1200: loss -> 0.31",
    "Compiling module 12 of 40",
    "Answer: yes",
    "",
]


@pytest.mark.parametrize("tail", PROMPTS)
def test_a_prompt_at_the_end_of_the_output_is_recognized(tail: str) -> None:
    assert looks_like_prompt(tail)


@pytest.mark.parametrize("tail", WORK)
def test_the_last_line_of_ordinary_work_is_not_a_prompt(tail: str) -> None:
    assert not looks_like_prompt(tail)


def test_a_prompt_printed_before_more_work_no_longer_counts() -> None:
    assert not looks_like_prompt("Continue? [Y/n] y\nepoch 1 loss 0.9\n")


def test_a_progress_bar_counts_by_what_the_terminal_last_shows() -> None:
    assert last_line("10%\r50%\r90%") == "90%"
    assert looks_like_prompt("working\rOverwrite? [Y/n] ")


def test_silence_after_a_prompt_is_a_stall_only_once_the_threshold_has_passed() -> None:
    tail = "Overwrite? [Y/n] "
    assert not is_stalled(now=1000 + STALL_SECONDS - 1, last_output_at=1000, threshold=STALL_SECONDS, tail=tail,
                          waiting=False)
    assert is_stalled(now=1000 + STALL_SECONDS, last_output_at=1000, threshold=STALL_SECONDS, tail=tail,
                      waiting=False)


def test_long_silent_work_whose_tail_is_not_a_prompt_is_never_a_stall() -> None:
    assert not is_stalled(now=1000 + 3 * 3600, last_output_at=1000, threshold=STALL_SECONDS,
                          tail="epoch 1/50 loss 0.8\n", waiting=False)


def test_a_known_wait_for_input_is_a_stall_at_once_whatever_it_printed() -> None:
    assert is_stalled(now=1000, last_output_at=1000, threshold=STALL_SECONDS, tail="", waiting=True)


def test_the_prompt_quoted_back_is_its_last_line_shortened() -> None:
    assert shown_prompt("lots of output\nOverwrite? [Y/n] ") == "Overwrite? [Y/n]"
    quoted = shown_prompt("x" * 300 + " Password: ")
    assert len(quoted) == 80 and quoted.startswith("…") and quoted.endswith("Password:")
