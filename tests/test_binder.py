"""binder/ builds: repo2docker's steps for a Python environment, done in a fresh venv.

repo2docker needs a Docker daemon, which CI does not have; what it would do with this folder is
``pip install -r binder/requirements.txt`` and then run ``binder/postBuild`` from the
repository root. This test does exactly that in a fresh venv on a copy of the checkout, then
checks that JupyterLab and the package work there. Slow (it installs JupyterLab and builds the
native extension): marked ``wheel`` with the wheel test, and runs once in CI.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.wheel

ROOT = Path(__file__).resolve().parent.parent
INSTALL_S = 600


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=INSTALL_S)
    assert res.returncode == 0, f"{cmd}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def _copy_checkout(dest: Path) -> None:
    """The files git knows of (tracked, or new and not ignored): what a clone would hold."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if not (src.exists() or src.is_symlink()):
            continue                      # deleted in the working tree
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name, follow_symlinks=False)


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout")
def test_binder_environment_builds_and_runs_the_package(tmp_path):
    repo = tmp_path / "repo"
    _copy_checkout(repo)
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PLOTLY_RENDERER")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r",
          "binder/requirements.txt"], cwd=repo, env=env)
    out = _run(["bash", "binder/postBuild"], cwd=repo, env=env)
    assert "recordings, e.g. <hookmagic.Trace" in out and "recorded on NVIDIA" in out
    # what the Binder link opens: JupyterLab, the tour beside it, the package from this copy
    check = _run([str(venv / "bin" / "python"), "-c",
                  "import hookmagic, jupyterlab, ipywidgets, hookmagic.demo as d; "
                  "print(hookmagic.__file__); print(d.find_tour()); print(jupyterlab.__version__)"],
                 cwd=tmp_path, env=env).split()
    assert Path(check[0]).is_relative_to(repo) and Path(check[1]) == repo / "notebooks" / "00_tour.ipynb"
    pins = dict(line.split("==") for line in (ROOT / "binder" / "requirements.txt").read_text()
                .splitlines() if "==" in line and not line.startswith("#"))
    assert check[2] == pins["jupyterlab"]
