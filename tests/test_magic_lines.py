"""The line form ``%cudahook statement`` and ``-f FUNC`` through a real IPython shell.

No GPU here: the capture is replaced by a replay of the real ``mlp_training`` recording (made on
an H100), with a synthetic stored source so the test knows which text is on which line.
"""
from __future__ import annotations

import inspect

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import hookmagic
from hookmagic.common.format import duration_ns
from hookmagic.cupti.session import capture
from hookmagic.trace.model import Trace
from tests.test_lines import FILE, _rendered_rows, _with_synthetic_source, reference


class ReplayCapture:
    """``hookmagic.capture``'s signature; on exit the Trace holds the mlp_training recording."""

    made: list["ReplayCapture"] = []

    def __init__(self, _boundary_frame=None, **options):
        inspect.signature(capture).bind(_boundary_frame=_boundary_frame, **options)
        self.options = options
        self.trace = Trace()
        ReplayCapture.made.append(self)

    def __enter__(self) -> Trace:
        return self.trace

    def __exit__(self, *exc) -> bool:
        recorded = _with_synthetic_source(hookmagic.recordings.load("mlp_training"))
        self.trace._fill(recorded.tables, {**recorded.meta, "label": self.options["label"]})
        return False


@pytest.fixture
def ip(monkeypatch):
    ReplayCapture.made = []
    monkeypatch.setattr(hookmagic, "capture", ReplayCapture, raising=False)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "hookmagic")
    shell.run_line_magic("config", "CudaHookMagics.report = False")
    yield shell
    shell.run_line_magic("config", "CudaHookMagics.report = True")
    shell.run_line_magic("unload_ext", "hookmagic")


def test_line_form_runs_the_statement_like_time(ip, capsys):
    result = ip.run_cell('answer = %cudahook -q -v t len("a b c".split())')
    assert result.success and ip.user_ns["answer"] == 3
    assert isinstance(ip.user_ns["t"], Trace) and len(ip.user_ns["t"].kernels) == 201
    assert capsys.readouterr().out == ""
    ip.run_cell('%cudahook -q -- x_from_line = "-" * 2')
    assert ip.user_ns["x_from_line"] == "--"
    assert ReplayCapture.made[-1].options["stacks"] is True


def test_dash_f_shows_the_functions_lines_after_the_summary(ip, capsys):
    ip.run_cell("%cudahook -f mlp_training pass")
    out = capsys.readouterr().out
    summary_at, lines_at = out.find("hookmagic · In ["), out.find("GPU time by line of `mlp_training`")
    assert 0 <= summary_at < lines_at
    rows = _rendered_rows(out[lines_at:])
    trace = hookmagic.recordings.load("mlp_training")
    for (f, fn, ln), (ns, n) in reference(trace)["inclusive"].items():
        if fn == "mlp_training":
            assert rows[ln][:2] == (f"{n:,}", duration_ns(ns)) and rows[ln][4].strip() == f"marker_{ln} = 0"
    assert f"File: {FILE}" in out


def test_dash_f_takes_an_object_from_the_namespace(ip, capsys):
    ip.run_cell("def mlp_training():\n    pass")
    ip.run_cell("%cudahook -f mlp_training pass")
    # the notebook's own mlp_training is not the recorded one (another file): nothing under it
    out = capsys.readouterr().out
    assert "No GPU time under `mlp_training`" in out and "functions with GPU time: main" in out


@pytest.mark.parametrize("line, cell, message", [
    ("-f step -q step()", None, "-f shows the lines of FUNC and -q shows nothing"),
    ("-f step --no-stacks step()", None, "--no-stacks turns them off"),
    ("-q", None, "needs a statement"),
    ("", None, "needs a statement"),
    ("-q x = 1", "y = 2", "takes options on its line, not code"),
    ("--label 'unbalanced x", None, "quotation"),
])
def test_contradictions_and_misuse_are_one_usage_error(ip, line, cell, message):
    with pytest.raises(UsageError, match=message) as err:
        if cell is None:
            ip.run_line_magic("cudahook", line)
        else:
            ip.run_cell_magic("cudahook", line, cell)
    assert "\n" not in str(err.value)
    assert ReplayCapture.made == []


def test_dash_f_with_stacks_off_by_config_names_the_setting(ip, capsys):
    ip.run_line_magic("config", "CudaHookMagics.stacks = False")
    try:
        with pytest.raises(UsageError, match="CudaHookMagics.stacks = False"):
            ip.run_line_magic("cudahook", "-f step step()")
        ip.run_line_magic("cudahook", "--stacks -f mlp_training pass")   # --stacks wins
        assert "GPU time by line of `mlp_training`" in capsys.readouterr().out
    finally:
        ip.run_line_magic("config", "CudaHookMagics.stacks = True")


def test_the_magics_capture_defaults_are_capture_options_own():
    from dataclasses import fields

    from hookmagic.cupti.options import CaptureOptions
    from hookmagic.magics import CudaHookMagics

    defaults = {f.name: f.default for f in fields(CaptureOptions)}
    traits = CudaHookMagics.class_traits(config=True)
    shared = sorted(set(traits) & set(defaults))
    assert {"stacks", "module_names", "api", "memory", "nvml", "allocator_history", "lite"} <= set(shared)
    assert {name: traits[name].default_value for name in shared} == {name: defaults[name] for name in shared}


@pytest.mark.parametrize("line", ["--lit", "--no-stack", "--no-mem", "--alloc"])
def test_shortened_options_are_refused(ip, line):
    # argparse would take a unique prefix for the whole option; the magic refuses it
    with pytest.raises(UsageError, match="unrecognized arguments"):
        ip.run_line_magic("cudahook", f"-q {line} x = 1")
    assert ReplayCapture.made == []


def test_lite_refuses_what_capture_options_refuses_beside_it(ip):
    for flag in ("--stacks", "--api", "--allocator"):
        with pytest.raises(UsageError, match=f"cannot be combined with {flag}"):
            ip.run_line_magic("cudahook", f"-q --lite {flag} x = 1")
    with pytest.raises(UsageError, match="-f"):
        ip.run_line_magic("cudahook", "-q --lite -f len len('ab')")
    ip.run_line_magic("cudahook", "-q --lite x_lite = 1")
    made = ReplayCapture.made[-1].options
    assert made["lite"] is True and not {"stacks", "api", "nvml", "allocator_history"} & set(made)
