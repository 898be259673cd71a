"""notebooks/00_tour.ipynb and 01_cudahook.ipynb run top to bottom on this machine and show what
they claim: the H100 recordings labelled as such, the figures, and (without a GPU) one honest line
saying nothing was captured.

Each notebook is executed once, and that execution is also checked as nbval checks it, every
``# NBVAL_CHECK_OUTPUT`` cell against the saved outputs (tests/notebook_runner.py); nbval itself
still runs them alone with ``pytest notebooks/00_tour.ipynb notebooks/01_cudahook.ipynb``.
"""
from __future__ import annotations

from typing import Any

import pytest

from tests.notebook_runner import NOTEBOOKS, output_text as _text, run_notebook as _run

PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"


def _recording(name: str) -> Any:
    """A bundled recording, loaded as the notebooks load it: the expected strings below are
    computed from it, so re-recording on another GPU or date does not break these tests."""
    from hookmagic import recordings
    return recordings.load(name)


def _cell(code: list[Any], needle: str) -> Any:
    (cell,) = [c for c in code if needle in c.source]
    return cell


def _no_gpu() -> bool:
    from hookmagic.cupti.library import driver_info
    return bool(driver_info().error)


def test_tour_replays_the_h100_recordings_with_every_view(monkeypatch):
    code = _run("00_tour.ipynb", monkeypatch)
    first = _text(code[0])
    if _no_gpu():     # either way the first cell says which it is: assert the one that applies
        assert "This is a REPLAY of recordings made on a GPU" in first
    else:
        assert "The figures below still replay the bundled recordings" in first
    from hookmagic import recordings
    from hookmagic.views.summary import summary_text

    names = recordings.available()
    traces = {name: _recording(name) for name in names}
    resnet = traces["resnet18_inference_churn"]
    where = resnet.meta["recorded_on"]
    listing = _text(code[1])
    for name, t in traces.items():   # every recording says where it was made
        assert f"{name} {t.meta['recorded_on']}" in " ".join(listing.split())
    assert listing.count(where) == sum(t.meta["recorded_on"] == where for t in traces.values())
    n_kernels = len(resnet.kernels)
    assert "resnet18_inference_churn " in listing and str(n_kernels) in listing
    (kernels_line,) = [line for line in summary_text(resnet.summary()).splitlines()
                       if line.strip().startswith("kernels:")]
    assert f"kernels: {n_kernels:,} in " in kernels_line
    assert kernels_line in _text(_cell(code, "trace.summary()"))
    titles = [o.data[PLOTLY]["layout"]["title"]["text"] for c in code for o in c.outputs
              if PLOTLY in o.get("data", {})]
    assert any(t.startswith("GPU time by launching call path") for t in titles)
    assert any(t.startswith("bytes copied by launching call path") for t in titles)
    assert any(t.startswith("Timeline") for t in titles)
    assert any(t.startswith("Differential flame graph") for t in titles)
    assert any("search 'cudnn'" in t for t in titles)
    findings = resnet.diagnose()
    assert len(findings)
    diagnosis = _text(_cell(code, "trace.diagnose()"))
    for f in findings.itertuples():
        assert f"[{f.severity}] {f.finding}" in diagnosis
    assert "limiter" in _text(_cell(code, "kernel_occupancy(trace)"))
    assert "synchronisation" in _text(_cell(code, "idle_gaps(trace)"))
    from hookmagic.analysis.copies import copy_bandwidth
    assert copy_bandwidth(resnet)["link"].iloc[0] in _text(_cell(code, "copy_bandwidth(trace)"))
    assert "import:kineto" in _text(_cell(code, "kineto_resnet18.json.gz"))
    assert f"kernel             {n_kernels}" in _text(_cell(code, "to_chrome_trace"))
    memory = _text(_cell(code, "trace.fragmentation()"))
    events = resnet.allocator_events
    assert f"{len(events):,} allocator events ({where})" in memory
    peak = resnet.fragmentation()["reserved"].max() / 2**20
    assert f"reserved {peak:7,.1f} MiB" in memory
    assert any(t.startswith("fragmentation map") for t in titles)
    assert any(t.endswith("largest free block vs total free") for t in titles)
    assert any(WIDGET in o.get("data", {}) for o in _cell(code, "report_widget(cupy").outputs)


def test_cudahook_notebook_captures_or_says_why_once(monkeypatch):
    code = _run("01_cudahook.ipynb", monkeypatch)
    magic = _cell(code, "%%cudahook\n")
    text = _text(magic)
    assert "1.0" in text   # the cell ran and returned its value, captured or not
    saved = _text(_cell(code, "print(repr(hookmagic.load(path)))"))
    if _no_gpu():          # either way the cells say which it is: assert the one that applies
        assert text.count("hookmagic: nothing captured — no NVIDIA driver") == 1
        assert "unavailable" in saved
    else:
        assert "nothing captured" not in text and "complete" in saved
    mlp = _recording("mlp_training")
    listing = _text(_cell(code, 'recordings.load("mlp_training")'))
    assert f"recorded on: {mlp.meta['recorded_on']}" in listing
    assert f"allocator_events {len(mlp.allocator_events):5,} rows" in listing
    assert "in Linear.forward" in _text(_cell(code, "stack_frames"))
    assert any(WIDGET in o.get("data", {}) for o in _cell(code, "report_widget(trace)").outputs)


def test_cudahook_notebook_shows_gpu_time_by_line_and_the_folded_flame_graph(monkeypatch):
    """The lines section of 01 (tools/make_notebook_01_lines.py adds it), checked against
    the recording it loads."""
    import re

    from hookmagic.common.format import duration_ns

    code = _run("01_cudahook.ipynb", monkeypatch)
    table_cell = _cell(code, "step.lines()")
    name = re.search(r'^name = "(\w+)"$', table_cell.source, re.M).group(1)
    step = _recording(name)
    table = step.lines()
    a = table.attrs
    text = _text(table_cell)
    assert f"{a['attributed_kernels']:,} of {a['kernels']:,} kernels on a source line" in text
    for r in table[table["user"]].itertuples():
        assert re.search(rf"^\s*{r.line}\s+{re.escape(r.function)}\s+{r.launches}\s+{r.gpu_ns}\s+"
                         rf"{r.inclusive_ns}$", text, re.M), (r, text)
    view = _text(_cell(code, 'step.lines("'))
    assert view.startswith("GPU time by line of")
    top = table[table["user"] & (table["gpu_ns"] > 0)].iloc[0]
    assert re.search(rf"^\s*{top.line}\s+{top.inclusive_launches:,}\s+"
                     rf"{re.escape(duration_ns(top.inclusive_ns))}\s", view, re.M), view
    (fig,) = [o.data[PLOTLY] for o in _cell(code, "step.flame()").outputs if PLOTLY in o.get("data", {})]
    labels = set(fig["data"][0]["labels"])
    assert fig["layout"]["title"]["text"].startswith("GPU time by launching call path")
    assert not labels & {"Module._call_impl", "Module._wrapped_call_impl"}
    flame_text = _text(_cell(code, "flame_tree(step, fold=False)"))
    modules = re.search(r"^(\d+) module nodes", flame_text, re.M)
    assert modules and int(modules.group(1)) > 0, flame_text  # module names in the stacks
    assert re.search(r"^\d+ backward nodes, e.g. backward of ", flame_text, re.M), flame_text


def test_every_notebook_is_light_on_disk():
    """Figures and widget state are drawn again when a notebook runs; stored, they would make
    each notebook megabytes (tools/slim_notebooks.py keeps them out)."""
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        assert path.stat().st_size <= 400_000, (path.name, path.stat().st_size)


def test_run_notebooks_check_fails_on_a_changed_checked_output_as_nbval_would():
    """run_notebook stands in for nbval on the notebooks it executes (tests/conftest.py): its check
    passes on a notebook's saved outputs, fails when a ``# NBVAL_CHECK_OUTPUT`` cell shows something
    else or an output of another kind, and ignores changes in the other cells, as ``--nbval-lax``."""
    import copy

    import nbformat

    from tests.notebook_runner import _check_like_nbval

    saved = nbformat.read(NOTEBOOKS / "00_tour.ipynb", as_version=4)
    _check_like_nbval("00_tour.ipynb", saved, copy.deepcopy(saved))
    code = [c for c in saved.cells if c.cell_type == "code"]
    checked = next(i for i, c in enumerate(code) if "NBVAL_CHECK_OUTPUT" in c.source
                   and any(o.output_type == "stream" for o in c.outputs))
    unchecked = next(i for i, c in enumerate(code) if "NBVAL_CHECK_OUTPUT" not in c.source and c.outputs)

    def changed(index: int, change) -> Any:
        nb = copy.deepcopy(saved)
        change([c for c in nb.cells if c.cell_type == "code"][index])
        return nb

    def other_text(cell: Any) -> None:
        next(o for o in cell.outputs if o.output_type == "stream").text += "one more line\n"

    def extra_output(cell: Any) -> None:
        cell.outputs.append(nbformat.v4.new_output("display_data", data={"text/html": "<b>x</b>"}))

    for change in (other_text, extra_output):
        with pytest.raises(AssertionError, match="cell outputs differ"):
            _check_like_nbval("00_tour.ipynb", saved, changed(checked, change))
    _check_like_nbval("00_tour.ipynb", saved, changed(unchecked, lambda c: c.outputs.clear()))
