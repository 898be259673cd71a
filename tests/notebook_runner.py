"""Executing a report notebook in a fresh kernel, for the notebook tests.

Each notebook is executed once per test process (several tests may read one execution), and that
execution is also checked as nbval checks it under ``--nbval-lax``: every cell runs without an
error and every cell marked ``# NBVAL_CHECK_OUTPUT`` shows the outputs saved in the notebook,
compared by nbval's own comparison. So nbval need not execute these notebooks a second time:
tests/conftest.py leaves out nbval's items for a notebook of :data:`EXECUTED_BY` whenever the test
file that executes it is collected in the same run (``pytest notebooks/`` alone still runs nbval
on every notebook).
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

#: notebook -> the test file whose tests execute it through :func:`run_notebook`
EXECUTED_BY = {
    "00_tour.ipynb": "tests/test_notebooks.py",
    "01_cudahook.ipynb": "tests/test_notebooks.py",
    "03_layers.ipynb": "tests/test_notebook_03.py",
    "04_scheduler.ipynb": "tests/test_notebook_04.py",
    "05_kernels.ipynb": "tests/test_notebook_05.py",
    "06_pipeline.ipynb": "tests/test_notebook_06.py",
    "07_multirank.ipynb": "tests/test_notebook_07.py",
}

_executed: dict[str, Any] = {}


def run_notebook(name: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Execute ``notebooks/<name>`` (cwd: notebooks/) once per test process; fail on any error
    and on any ``NBVAL_CHECK_OUTPUT`` cell whose outputs differ from the saved ones; return (a copy
    of) its executed code cells."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if name not in _executed:
        monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        monkeypatch.delenv("PLOTLY_RENDERER", raising=False)
        saved = nbformat.read(NOTEBOOKS / name, as_version=4)
        nb = copy.deepcopy(saved)
        try:
            nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                    resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
        except nbclient.exceptions.CellExecutionError as exc:
            pytest.fail(f"{name}: a cell raised\n{exc}", pytrace=False)
        _check_like_nbval(name, saved, nb)
        _executed[name] = nb
    code = [c for c in copy.deepcopy(_executed[name]).cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, [f"{o.ename}: {o.evalue}" for o in errors]
    return code


# ---- what nbval --nbval-lax checks, on this one execution -----------------------------------

#: the output keys nbval leaves out of its comparison (IPyNbFile.skip_compare without --nbdime)
_NBVAL_SKIP_COMPARE = ("metadata", "traceback", "prompt_number", "output_type", "name",
                       "execution_count", "application/vnd.jupyter.widget-view+json",
                       "image/png", "image/jpeg")


def _nbval_differences(now: list[Any], saved: list[Any]) -> list[str]:
    """nbval's own ``IPyNbCell.compare_outputs`` on one cell's outputs: [] when they agree."""
    from nbval import plugin

    class Cell:     # just what compare_outputs reads from nbval's cell item
        compare_outputs = plugin.IPyNbCell.compare_outputs
        colors = plugin.nocolors
        parent = SimpleNamespace(skip_compare=_NBVAL_SKIP_COMPARE, sanitize_patterns={})

        def sanitize(self, s: Any) -> Any:
            return s        # the test run passes nbval no sanitizing patterns

        def format_output_compare(self, key: str, left: Any, right: Any) -> None:
            self.comparison_traceback.append(f"mismatch {key!r}:\n--- saved:\n{left}\n--- now:\n{right}")

    cell = Cell()
    same = cell.compare_outputs(plugin.coalesce_streams(copy.deepcopy(now)),
                                plugin.coalesce_streams(copy.deepcopy(saved)))
    return [] if same else cell.comparison_traceback or ["outputs differ"]


def _check_like_nbval(name: str, saved: Any, executed: Any) -> None:
    from nbval import plugin

    failures = []
    code_saved = [c for c in saved.cells if c.cell_type == "code"]
    code_now = [c for c in executed.cells if c.cell_type == "code"]
    for number, (ref, now) in enumerate(zip(code_saved, code_now)):
        options = dict(plugin.find_metadata_tags(ref.metadata))
        options.update(plugin.find_comment_markers(ref.source))
        # markers that would make nbval run a cell differently from a plain execution
        assert not options.get("skip") and not options.get("check_exception"), \
            f"{name} cell {number}: {options} (run_notebook executes every cell and expects no error)"
        unrun = ref.execution_count is None
        assert not (unrun and ref.outputs), f"{name} cell {number}: unrun reference cell has outputs"
        if options.get("check") and not unrun:     # --nbval-lax: only the cells marked to check
            differences = _nbval_differences(now.outputs, ref.outputs)
            if differences:
                failures.append(f"{name} cell {number}:\n" + "\n".join(differences))
    assert not failures, "cell outputs differ from the saved ones (as nbval compares them):\n" \
        + "\n\n".join(failures)


def output_text(cell: Any) -> str:
    """The text a cell printed or displayed."""
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                   for o in cell.get("outputs", []))
