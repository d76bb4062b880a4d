"""The kernel's live state after a compaction (the notebook's rehydration): read without
running the user's code, within its budget, tables first; in a real kernel the agent's next
request after a compaction lists a DataFrame's shape and columns."""

from __future__ import annotations

import json
import re
import types

import numpy as np
import pandas as pd
import pytest
from kernel_rig import Kernel, kernel_env

from ctx_magic.context.tokens import count_text
from ctx_magic.notebook.inventory import HEADER, inventory
from ctx_magic.offline.app import OfflineAPI, OfflineConfig
from ctx_magic.offline.server import serve_in_thread


class Booby:
    """Every way of running user code raises: the inventory must not touch any of them."""

    touched: list[str] = []

    def __repr__(self) -> str:
        Booby.touched.append("repr")
        raise RuntimeError("repr")

    def __str__(self) -> str:
        Booby.touched.append("str")
        raise RuntimeError("str")

    def __len__(self) -> int:
        Booby.touched.append("len")
        raise RuntimeError("len")

    def __sizeof__(self) -> int:
        Booby.touched.append("sizeof")
        raise RuntimeError("sizeof")

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        Booby.touched.append(f"getattr {name}")
        raise RuntimeError(name)


class Disguised:
    """Claims another class through __class__ (as mocks and proxies do): isinstance() would ask it."""

    @property
    def __class__(self):  # type: ignore[override]
        Booby.touched.append("__class__")
        return list


class Meta(type):
    def __eq__(cls, other: object) -> bool:
        Booby.touched.append("metaclass __eq__")
        return False

    __hash__ = type.__hash__


class LazyList(list):
    """A list subclass whose len() is expensive: not an exact built-in, so never measured."""

    def __len__(self) -> int:
        Booby.touched.append("LazyList.len")
        return 0


def namespace() -> dict:
    def clean(frame, column, *rest, strict=False, **options):  # noqa: ARG001
        return frame

    clean.__module__ = "__main__"
    booby_class = type("Booby", (Booby,), {"__module__": "__main__"})
    sales = pd.DataFrame({"region": ["north", "south", "east"], "price": [1.5, 2.0, 3.25], "units": [3, 4, 5]})
    return {
        "sales": sales, "grid": np.zeros((200, 50)), "prices": sales["price"], "rows": list(range(1000)),
        "threshold": 0.7, "label": "secret-ish text", "odd": Booby(), "lazy": LazyList([1, 2]),
        "clean": clean, "Model": booby_class, "pd": pd, "np": np, "json": json, "_private": 1, "In": [],
        "types": types, "disguised": Disguised(), "meta_made": Meta("MetaMade", (), {})(),
    }


def test_tables_and_arrays_come_first_with_shape_dtype_and_columns():
    text = inventory(namespace(), 1_000)
    lines = text.splitlines()
    assert lines[0] == HEADER
    assert lines[1].startswith("- grid: ndarray 200 × 50, dtype float64 (78.1 KB)")
    assert "- sales: DataFrame 3 rows × 3 columns" in text
    assert "columns: region (str), price (float64), units (int64)" in text
    assert "- prices: Series 3 rows, dtype float64, name price" in text
    assert "- rows: list, 1,000 items" in text and "- threshold: float = 0.7" in text
    assert "- label: str, 15 characters" in text and "secret-ish" not in text  # text values are not shown
    assert "Functions defined: clean(frame, column, *rest, strict, **options)" in text
    assert "Classes defined: Model" in text
    assert "Modules imported: pd (pandas), np (numpy), json, types" in text
    assert "_private" not in text and "- In" not in text


def test_nothing_of_the_users_code_runs():
    Booby.touched.clear()
    text = inventory(namespace(), 1_000)
    assert Booby.touched == []
    assert re.search(r"^- odd: [\w.]*Booby$", text, re.MULTILINE)  # its type name, nothing more
    assert re.search(r"^- lazy: [\w.]*LazyList$", text, re.MULTILINE)


def test_the_budget_keeps_the_largest_and_names_the_rest():
    text = inventory(namespace(), 130)  # room for the largest variable's line, not for the rest
    assert count_text(text) <= 130
    assert "- grid: ndarray" in text and "more variables not shown" in text
    assert inventory(namespace(), 0) == ""
    assert inventory({"In": [], "_": 1}, 500) == ""


SETUP = "%load_ext ctx_magic\n%config CtxMagic.permission = 'auto'\n%config CtxMagic.idle_timer = False"


@pytest.fixture
def offline():
    api = OfflineAPI(OfflineConfig(window=100_000))
    with serve_in_thread(api) as (url, _stop):
        yield api, url


@pytest.mark.slow  # a real kernel
def test_in_a_real_kernel_the_request_after_a_compaction_lists_a_dataframes_shape_and_columns(tmp_path, offline):
    api, url = offline
    kernel = Kernel(tmp_path, kernel_env(ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=url))
    try:
        kernel.execute(SETUP)
        kernel.execute("import pandas as pd\nsales = pd.DataFrame({'region': ['north', 'south'] * 600, "
                       "'price': [1.5, 2.25] * 600, 'units': range(1200)})")
        assert "ERROR" not in kernel.execute("%%agent\nLook at the sales table.")
        assert "ERROR" not in kernel.execute("%compact")
        kernel.execute("%%agent\nWhat do we have in the kernel?")
    finally:
        kernel.close()
    sent = json.dumps([r for r in api.requests if r.path == "/v1/messages" and r.kind == "normal"][-1].body,
                      ensure_ascii=False)
    assert "sales: DataFrame 1,200 rows × 3 columns" in sent
    assert "columns: region (str), price (float64), units (int64)" in sent
    assert "Modules imported: pd (pandas)" in sent
