"""Shared fixtures; the synthetic data they hand out is made in tests/synthetic.py.

``--strict-skips`` (used by ``.ci/run``): the run fails if any test skips other than GPU and
TensorRT tests (marked ``gpu`` or ``tensorrt``, in ``tests/gpu/``, or a module named ``*_gpu.py``),
so that a fresh clone runs everything it can.
"""
from __future__ import annotations

from pathlib import PurePath

import pytest

from hookmagic.trace.model import Trace
from tests.synthetic import synthetic_meta, synthetic_tables


@pytest.fixture(autouse=True, scope="session")
def _figures_in_the_test_folder(tmp_path_factory):
    """Figures and panels shown outside a notebook go to pytest's temporary folder, not to the
    shared ``$TMPDIR/hookmagic-figures`` a user's own runs write to."""
    import os

    old = os.environ.get("HOOKMAGIC_FIGURES_DIR")
    os.environ["HOOKMAGIC_FIGURES_DIR"] = str(tmp_path_factory.mktemp("figures"))
    yield
    if old is None:
        os.environ.pop("HOOKMAGIC_FIGURES_DIR", None)
    else:
        os.environ["HOOKMAGIC_FIGURES_DIR"] = old


@pytest.fixture
def synthetic_trace() -> Trace:
    """A small synthetic Trace with every table filled (see synthetic_tables for numbers)."""
    return Trace(synthetic_tables(), synthetic_meta())


# ---- running on every core (pytest-xdist) -------------------------------------------------

#: The slowest test files on a 2-core machine, slowest first (each builds an environment, a site,
#: a wheel, or runs notebooks or a browser). Under ``-n auto --dist loadfile`` they start first,
#: so that no worker begins a two-minute file when the others are nearly done.
SLOW_FILES = (
    "tests/test_binder.py", "tests/test_docs_site.py", "tests/test_wheel.py",
    "tests/test_browser.py", "tests/test_demo.py", "tests/test_notebook_06.py",
    "tests/test_ray.py", "tests/test_notebooks.py", "tests/test_notebook_04.py",
    "tests/test_kernels.py", "tests/test_kernels_wgmma.py", "notebooks/06_pipeline.ipynb",
    "tests/test_hostile_inputs.py", "tests/test_notebook_05.py", "tests/test_outside_notebook.py",
    "tests/test_distributed_capture.py", "notebooks/04_scheduler.ipynb",
)


def pytest_configure(config: pytest.Config) -> None:
    # xdist would otherwise reorder files by their number of tests, which puts the slow
    # single-test files last
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _leave_out_notebooks_a_test_executes(config, items)
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def _leave_out_notebooks_a_test_executes(config: pytest.Config, items: list[pytest.Item]) -> None:
    """nbval's items for a notebook that a collected test file executes with
    tests/notebook_runner.run_notebook, which checks that execution as ``--nbval-lax`` does (every
    cell runs, every NBVAL_CHECK_OUTPUT cell shows its saved outputs): one execution, not two.
    Only under --nbval-lax without sanitizing patterns or nbdime, the checks run_notebook repeats."""
    option = config.option
    if not getattr(option, "nbval_lax", False) or getattr(option, "nbval", False) \
            or getattr(option, "nbval_sanitize_with", None) or getattr(option, "nbdime", False):
        return
    from tests.notebook_runner import EXECUTED_BY

    files = {item.nodeid.split("::")[0] for item in items}
    executed = {f"notebooks/{nb}" for nb, test_file in EXECUTED_BY.items() if test_file in files}
    left_out = [item for item in items if item.nodeid.split("::")[0] in executed]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item.nodeid.split("::")[0] not in executed]


# ---- --strict-skips -----------------------------------------------------------------------

#: markers whose tests may skip under --strict-skips (they need hardware or TensorRT)
ALLOWED_SKIP_MARKERS = ("gpu", "tensorrt")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--strict-skips", action="store_true", default=False,
                     help="fail the run if anything but GPU/TensorRT tests skips (CI uses it)")


def _skip_allowed_path(path: str) -> bool:
    p = PurePath(path.split("::")[0])
    return "gpu" in p.parts or p.stem.endswith("_gpu")


@pytest.hookimpl(trylast=True)
def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped and not _skip_allowed_path(report.nodeid):
        _BAD_SKIPS.append(f"{report.nodeid}: {_skip_reason(report)}")


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    if any(m in report.keywords for m in ALLOWED_SKIP_MARKERS) or _skip_allowed_path(report.nodeid):
        return
    _BAD_SKIPS.append(f"{report.nodeid}: {_skip_reason(report)}")


def _skip_reason(report: pytest.BaseReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


_BAD_SKIPS: list[str] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not session.config.getoption("--strict-skips") or not _BAD_SKIPS:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_sep("=", "--strict-skips: only GPU/TensorRT tests may skip", red=True)
        for line in _BAD_SKIPS:
            reporter.write_line(f"skipped: {line}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
