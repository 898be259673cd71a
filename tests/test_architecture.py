"""The house rules (docs/architecture.md) hold: import-linter's contracts in pyproject.toml are
kept, and the data model's convenience methods come from above, registered by the facades."""
from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import hookmagic
from hookmagic.common import accessors

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    here = Path(sys.executable).parent / "lint-imports"
    found = str(here) if here.exists() else shutil.which("lint-imports")
    assert found, "lint-imports not found: install the dev extra (pip install -e '.[dev]')"
    return found


def test_import_contracts_are_kept():
    done = subprocess.run([_lint_imports(), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_trace_methods_are_the_facades_functions():
    from hookmagic import facades
    from hookmagic.trace import Trace
    for name in ("summary", "flame", "timeline", "diagnose", "diff", "memory_map",
                 "fragmentation", "to_chrome_trace"):
        # attached as is, only wrapped so that a wrong call is InvalidArgument (accessors.checked)
        assert inspect.unwrap(getattr(Trace, name)) is getattr(facades, name), name
        assert getattr(Trace, name).__doc__ == getattr(facades, name).__doc__
    assert "save" in accessors.registered("Trace")
    from hookmagic.layers.model import LayerProfile
    assert inspect.unwrap(LayerProfile.compare) is facades.compare


def test_methods_registered_late_reach_an_existing_class():
    @accessors.accepts_methods("synthetic-class")
    class Synthetic:
        pass

    @accessors.register_method("synthetic-class")
    def twice(self, x):
        return 2 * x

    assert Synthetic().twice(4) == 8


def test_trace_summary_matches_the_analysis_it_delegates_to(synthetic_trace):
    from hookmagic.analysis.summary import summarize
    assert repr(synthetic_trace.summary(top=2)) == repr(summarize(synthetic_trace, top=2))


def test_import_hookmagic_stays_light():
    """``import hookmagic`` loads neither pandas nor IPython (the facades import lazily)."""
    code = ("import sys, hookmagic; heavy = [m for m in ('pandas', 'IPython', 'plotly') "
            "if m in sys.modules]; print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert hookmagic.load.__module__ == "hookmagic.facades"


def test_dir_lists_the_public_api():
    names = dir(hookmagic)
    for name in hookmagic.__all__:
        assert name in names, name
        assert getattr(hookmagic, name) is not None


def test_dir_shows_nothing_but_the_public_api():
    # no typing helpers or internal modules in tab completion
    assert dir(hookmagic) == sorted(hookmagic.__all__)
    assert not {"Any", "TYPE_CHECKING", "annotations", "facades", "multirank"} & set(dir(hookmagic))


def test_subpackages_are_attributes_without_an_import_first():
    # `hookmagic.ray.capture()` as the README writes it, in a process that imported only hookmagic
    code = ("import sys, hookmagic\n"
            "for name in ('ray', 'pipeline', 'kernels', 'sched', 'layers', 'recordings'):\n"
            "    assert getattr(hookmagic, name).__name__ == 'hookmagic.' + name\n"
            "assert callable(hookmagic.ray.capture)\n"
            "assert 'ray' not in sys.modules  # the Ray library itself is imported only when used\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_top_of_the_package_holds_the_front_doors_and_nothing_else():
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (floors,) = [c for c in contracts if c["id"] == "floors"]
    front = {name.strip(" ()") for name in floors["layers"][0].split(":")}
    top = {p.stem for p in (ROOT / "hookmagic").glob("*.py") if p.stem != "__init__"}
    assert top == front
