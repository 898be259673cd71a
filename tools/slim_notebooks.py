"""Keep the notebooks light: drop stored Plotly figure outputs and saved widget state, except in
cells whose outputs nbval compares (``# NBVAL_CHECK_OUTPUT``). Figures are drawn again whenever a
notebook runs (JupyterLab, nbval, the docs build), from the recordings beside the notebooks.

    python tools/slim_notebooks.py notebooks/*.ipynb
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HEAVY = ("application/vnd.plotly.v1+json", "application/vnd.jupyter.widget-view+json")


def slim(path: Path) -> tuple[int, int]:
    raw = path.read_text()
    nb = json.loads(raw)
    before = len(raw)
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb["cells"]:
        source = "".join(cell.get("source", ""))
        if cell["cell_type"] != "code" or "NBVAL_CHECK_OUTPUT" in source:
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if any(kind in data for kind in HEAVY):
                continue
            kept.append(out)
        cell["outputs"] = kept
    indent = 1 if raw.startswith('{\n "') else 2
    text = json.dumps(nb, indent=indent, ensure_ascii=False) + "\n"
    path.write_text(text)
    return before, len(text)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        b, a = slim(Path(name))
        print(f"{name}: {b / 1e3:.0f} kB -> {a / 1e3:.0f} kB")
