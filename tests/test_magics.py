"""%%cudahook through a real IPython shell, with the capture replaced by fakes (no GPU)."""
from __future__ import annotations

import inspect
import re
import warnings

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import hookmagic
from hookmagic.cupti.session import capture
from hookmagic.trace.io import load_trace
from hookmagic.trace.model import Trace


class FakeCapture:
    """Fake ``hookmagic.capture`` (the real one's signature, no GPU): an empty Trace inside,
    synthetic tables filled in on exit."""

    made: list["FakeCapture"] = []
    tables: dict = {}

    def __init__(self, _boundary_frame=None, _namespaces=None, **options):
        # the options the real capture accepts, and only those (a misspelt one fails here too)
        inspect.signature(capture).bind(_boundary_frame=_boundary_frame, _namespaces=_namespaces,
                                        **options)
        self.options = options
        self.boundary_frame = _boundary_frame
        self.namespaces = _namespaces
        self.trace = Trace()
        self.exit_type = "not exited"
        FakeCapture.made.append(self)

    def __enter__(self) -> Trace:
        return self.trace

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.exit_type = exc_type
        meta = {"label": self.options.get("label"), "status": "complete",
                "start_ns": 1_000_000_000, "wall_s": 0.01,
                "devices": [{"index": 0, "name": "Synthetic GPU"}]}
        if exc_type is not None:
            meta.update(status="partial", reason=f"the cell raised {exc_type.__name__}")
        self.trace._fill(self.tables, meta)
        return False


class FakeUnavailableCapture(FakeCapture):
    """Fake capture with no GPU: warns CaptureUnavailable once per reason, like the real one."""

    reason = "synthetic: no NVIDIA driver on this machine"
    warned: set[str] = set()

    def __enter__(self) -> Trace:
        if self.reason not in self.warned:
            self.warned.add(self.reason)
            warnings.warn(hookmagic.CaptureUnavailable(f"hookmagic: nothing captured: "
                                                       f"{self.reason}"), stacklevel=2)
        return self.trace

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.exit_type = exc_type
        self.trace._fill(None, Trace.empty(self.reason).meta)
        return False


@pytest.fixture
def ip():
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "hookmagic")
    yield shell
    shell.run_line_magic("unload_ext", "hookmagic")


@pytest.fixture
def fake_capture(monkeypatch, synthetic_trace):
    FakeCapture.made = []
    monkeypatch.setattr(FakeCapture, "tables", synthetic_trace.tables)
    monkeypatch.setattr(hookmagic, "capture", FakeCapture, raising=False)
    return FakeCapture


@pytest.fixture
def fake_unavailable(monkeypatch):
    FakeCapture.made = []
    FakeUnavailableCapture.warned = set()
    monkeypatch.setattr(hookmagic, "capture", FakeUnavailableCapture, raising=False)
    return FakeUnavailableCapture


def _instances(ip):
    return [c for c in ip.configurables if type(c).__name__ == "CudaHookMagics"]


def test_cell_runs_and_returns_last_value_with_summary(ip, fake_capture, capsys):
    result = ip.run_cell("%%cudahook\nx = 41\nx + 1")
    assert result.success and result.result == 42 and ip.user_ns["x"] == 41
    out = capsys.readouterr().out
    assert out.count("hookmagic · In [") == 1 and "synthetic_gemm" in out
    (made,) = fake_capture.made
    assert made.exit_type is None and len(made.trace.kernels) == 3


def test_unavailable_capture_still_runs_cell_and_says_why_once(ip, fake_unavailable, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = ip.run_cell("%%cudahook\nran = 'yes'\nran")
    assert result.success and result.result == "yes"
    captured = capsys.readouterr()
    text = captured.out + captured.err + " ".join(str(w.message) for w in caught)
    assert text.count(fake_unavailable.reason) == 1
    assert "hookmagic: nothing captured — synthetic: no NVIDIA driver" in captured.out
    assert not [w for w in caught if issubclass(w.category, hookmagic.CaptureUnavailable)]


def test_unavailable_quiet_lets_the_warning_speak(ip, fake_unavailable, capsys):
    with pytest.warns(hookmagic.CaptureUnavailable, match="no NVIDIA driver"):
        assert ip.run_cell_magic("cudahook", "-q", "3 * 3") == 9
    assert fake_unavailable.reason not in capsys.readouterr().out


def test_exception_propagates_once_after_partial_summary(ip, fake_capture, capsys):
    ip.user_ns["calls"] = []
    result = ip.run_cell("%%cudahook -v t\ncalls.append(1)\nraise ValueError('synthetic boom')")
    assert isinstance(result.error_in_exec, ValueError)
    assert ip.user_ns["calls"] == [1]
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)   # drop colours
    assert out.count("ValueError: synthetic boom") == 1      # one traceback, not two
    assert "raise ValueError('synthetic boom')" in out       # it shows the cell's source
    assert out.index("status: partial") < out.index("ValueError")   # summary first
    assert ip.user_ns["t"].meta["status"] == "partial"
    assert fake_capture.made[0].exit_type is ValueError


def test_exception_raised_by_run_cell_magic(ip, fake_capture):
    with pytest.raises(ZeroDivisionError):
        ip.run_cell_magic("cudahook", "-q", "1 / 0")


def test_no_raise_error_shows_traceback_and_continues(ip, fake_capture, capsys):
    assert ip.run_cell_magic("cudahook", "--no-raise-error", "raise KeyError('synthetic')") is None
    out = capsys.readouterr().out
    assert "KeyError" in out and "status: partial" in out


def test_keyboard_interrupt_stops_capture_shows_summary_and_reraises(ip, fake_capture, capsys):
    with pytest.raises(KeyboardInterrupt):
        ip.run_cell_magic("cudahook", "--no-raise-error", "raise KeyboardInterrupt")
    assert fake_capture.made[0].exit_type is KeyboardInterrupt
    assert "status: partial" in capsys.readouterr().out


def test_dash_o_returns_the_trace(ip, fake_capture, capsys):
    trace = ip.run_cell_magic("cudahook", "-o -q", "'ignored value'")
    assert isinstance(trace, Trace) and trace is fake_capture.made[0].trace
    assert len(trace.kernels) == 3
    assert capsys.readouterr().out == ""     # -q: no summary
    result = ip.run_cell("%%cudahook -o -q\n1")
    assert isinstance(result.result, Trace)


def test_dash_v_stores_the_trace(ip, fake_capture):
    assert ip.run_cell_magic("cudahook", "-q -v synthetic_t", "5") == 5
    assert ip.user_ns["synthetic_t"] is fake_capture.made[0].trace


def test_save_writes_a_trace_file(ip, fake_capture, tmp_path):
    path = tmp_path / "cell.hmtrace"
    ip.run_cell_magic("cudahook", f"-q --save {path} --label 'synthetic run'", "None")
    loaded = load_trace(path)
    assert len(loaded.kernels) == 3 and loaded.meta["label"] == "synthetic run"


@pytest.mark.parametrize("line, cell, message", [
    ("--bogus", "1", "unrecognized"),
    ("-v 1bad", "1", "variable name"),
    ("", "   \n", "needs code"),
    ("--save /no/such/folder/x.hmtrace", "1", "does not exist"),
    ("--label 'unbalanced", "1", "quotation"),
])
def test_misuse_is_a_usage_error(ip, fake_capture, line, cell, message):
    with pytest.raises(UsageError, match=message):
        ip.run_cell_magic("cudahook", line, cell)
    assert fake_capture.made == []          # nothing ran, nothing was captured


def test_options_reach_the_capture_and_config_sets_defaults(ip, fake_capture):
    ip.run_cell_magic("cudahook", "-q", "1")
    # module names are looked up among the notebook's variables
    assert [ns is ip.user_ns for ns in fake_capture.made[-1].namespaces] == [True]
    assert fake_capture.made[-1].options == {
        "kernels": True, "memory": True, "stacks": True, "module_names": True, "api": False,
        "nvml": True, "allocator_history": False, "label": f"In [{ip.execution_count}]"}
    ip.run_line_magic("config", "CudaHookMagics.stacks = False")
    ip.run_line_magic("config", "CudaHookMagics.api = True")
    try:
        ip.run_cell_magic("cudahook", "-q --no-memory --no-nvml --label L", "1")
        assert fake_capture.made[-1].options == {
            "kernels": True, "memory": False, "stacks": False, "module_names": True, "api": True,
            "nvml": False, "allocator_history": False, "label": "L"}
        ip.run_cell_magic("cudahook", "-q --stacks --allocator", "1")
        assert fake_capture.made[-1].options["stacks"] is True
        assert fake_capture.made[-1].options["allocator_history"] is True
        ip.run_cell_magic("cudahook", "-q --no-module-names", "1")
        assert fake_capture.made[-1].options["module_names"] is False
    finally:
        ip.run_line_magic("config", "CudaHookMagics.stacks = True")
        ip.run_line_magic("config", "CudaHookMagics.api = False")


def test_config_quiet_default(ip, fake_capture, capsys):
    ip.run_line_magic("config", "CudaHookMagics.quiet = True")
    try:
        ip.run_cell_magic("cudahook", "", "1")
        assert capsys.readouterr().out == ""
    finally:
        ip.run_line_magic("config", "CudaHookMagics.quiet = False")


def test_capture_that_fails_to_start_still_runs_the_cell(ip, monkeypatch, capsys):
    def broken_capture(**options):
        raise RuntimeError("synthetic start failure")
    monkeypatch.setattr(hookmagic, "capture", broken_capture, raising=False)
    assert ip.run_cell_magic("cudahook", "", "'ran'") == "ran"
    assert "nothing captured — the capture could not start" in capsys.readouterr().out


def test_cell_warning_filters_are_not_undone(ip, fake_capture):
    import warnings as w
    before = list(w.filters)
    try:
        ip.run_cell_magic("cudahook", "-q",
                          "import warnings\nwarnings.filterwarnings('ignore', 'synthetic-xyz')")
        assert any(f[1] is not None and f[1].pattern == "synthetic-xyz" for f in w.filters)
    finally:
        w.filters[:] = before


def test_reload_does_not_stack_and_unload_removes(ip, fake_capture):
    ip.run_line_magic("reload_ext", "hookmagic")
    ip.run_line_magic("reload_ext", "hookmagic")
    from hookmagic.extension import load_ipython_extension, unload_ipython_extension
    load_ipython_extension(ip)                # a second load is harmless
    (instance,) = _instances(ip)
    assert ip.magics_manager.magics["cell"]["cudahook"].__self__ is instance
    ip.run_cell_magic("cudahook", "-q", "1")
    assert len(fake_capture.made) == 1        # one capture per cell, not one per load
    unload_ipython_extension(ip)
    assert "cudahook" not in ip.magics_manager.magics["cell"]
    assert "trtprofile" not in ip.magics_manager.magics["line"]   # every magic goes
    assert _instances(ip) == []
    assert not [c for c in ip.configurables if type(c).__name__ == "TrtProfileMagics"]
    load_ipython_extension(ip)                # restore for the fixture's unload
    assert len(_instances(ip)) == 1


def test_help_comes_from_the_docstring(ip):
    from hookmagic.magics import CudaHookMagics
    doc = CudaHookMagics.cudahook.__doc__
    assert "--no-raise-error" in doc and "-v VAR" in doc and "capturing its GPU kernels" in doc


def test_unload_ext_removes_every_magic_and_load_ext_brings_them_back(ip):
    ip.run_line_magic("unload_ext", "hookmagic")
    assert "cudahook" not in ip.magics_manager.magics["cell"]
    assert "trtprofile" not in ip.magics_manager.magics["line"]
    ip.run_line_magic("load_ext", "hookmagic")
    assert "cudahook" in ip.magics_manager.magics["cell"]
    assert "trtprofile" in ip.magics_manager.magics["line"]


def test_traceback_names_the_cell_that_raised(ip, fake_capture):
    """The cell's code is compiled under its own In[N], not the next cell's number."""
    result = ip.run_cell("%%cudahook -q\nx = 1\nraise ValueError('synthetic failure')",
                         store_history=True)
    assert isinstance(result.error_in_exec, ValueError)
    tb = result.error_in_exec.__traceback__
    files = []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    numbers = [ip.compile._filename_map[f] for f in files if f in ip.compile._filename_map]
    # the cell that calls the magic and the cell body it runs: both In[N] of this cell
    assert numbers and set(numbers) == {result.execution_count}
    assert fake_capture.made[-1].options["label"] == f"In [{result.execution_count}]"
