"""`python -m ctx_magic.demo [NOTEBOOK]`: run an example notebook under a real kernel and show it.

The notebook runs through nbclient exactly as Jupyter would run it (offline stand-in unless
ANTHROPIC_API_KEY is set); its cells and outputs are printed as text and the executed notebook
is saved beside it as <name>.out.ipynb, ready to open in JupyterLab.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_NOTEBOOK = Path("examples") / "quickstart.ipynb"


def render(cell: object) -> str:
    lines = [f"In  | {line}" for line in getattr(cell, "source", "").splitlines()]
    for output in getattr(cell, "outputs", []):
        kind = output.get("output_type")
        if kind == "stream":
            text = output.get("text", "")
        elif kind in ("display_data", "execute_result"):
            text = str(output.get("data", {}).get("text/plain", ""))
        elif kind == "error":
            text = f"{output.get('ename')}: {output.get('evalue')}"
        else:
            continue
        lines += [f"Out | {line}" for line in str(text).rstrip().splitlines()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctx_magic.demo", description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?", default=str(DEFAULT_NOTEBOOK), help="the notebook to run")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a cell may take")
    args = parser.parse_args(argv)
    path = Path(args.notebook)
    if not path.is_file():
        print(f"No notebook at {path}: run this from the root of the ctx_magic checkout, or name one.")
        return 2
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = nbformat.read(str(path), as_version=4)
    print(f"Running {path} under a real Python kernel…\n")
    failed = False
    try:
        NotebookClient(notebook, timeout=args.timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent.resolve())}}).execute()
    except CellExecutionError as error:
        failed = True
        print(f"A cell failed: {str(error).splitlines()[0]}")
    for cell in notebook.cells:
        if cell.cell_type == "code":
            print(render(cell) + "\n")
    out = path.with_suffix(".out.ipynb")
    nbformat.write(notebook, str(out))
    print(f"The executed notebook is saved as {out}; open it with: jupyter lab {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
