"""binder/ builds: repo2docker's steps for a Python environment, done in a fresh venv.

repo2docker needs a Docker daemon, which CI does not have; what it would do with this folder is
``pip install -r binder/requirements.txt`` and then run ``binder/postBuild`` from the
repository root. The slow test does that in a fresh venv on a copy of the checkout (the same
pinned packages, installed by uv's pip interface when uv is installed, as the [dev] extra does),
then checks that JupyterLab and the package work there (it installs JupyterLab and CPU torch and
builds the native extension: marked ``wheel`` with the wheel test, and runs once in CI).

The fast test is what keeps every notebook runnable there on CI's two cores: each module a
notebook imports (read from its code cells with ``ast``), and each requirement of the extras the
notebooks use, must be pinned in binder/requirements.txt, at the version this environment (the
one nbval runs the notebooks in) has installed. Executing the notebooks themselves is what the
nbval run does.
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sysconfig
import sys
from pathlib import Path

import pytest

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


def _uv_install(venv: Path) -> list[str] | None:
    """uv's pip interface installing into ``venv`` (it writes no bytecode), or None where uv is
    not installed here."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return None
    return [find_uv_bin(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")]


@pytest.mark.wheel
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
    # Binder installs torch from PyTorch's CPU-only index, which this test's machines cannot
    # reach: every other pin installs here as it does there, and torch comes from this
    # environment (a .pth line after the venv's own site-packages). The pins themselves are
    # checked against what the notebooks run with by the test below.
    lines = (repo / "binder" / "requirements.txt").read_text().splitlines()
    kept = [ln for ln in lines if not ln.startswith("--extra-index-url")
            and not re.match(r"torch==", ln)]
    (tmp_path / "requirements.txt").write_text("\n".join(kept) + "\n")
    # the same pinned packages and files as Binder's `pip install -r`, without writing their
    # bytecode (a third of pip's time on 2 cores; Python writes it when first imported): by uv
    # where the environment has it (the [dev] extra; 9 s instead of pip's 56 s on 2 cores), by pip
    # where uv is absent or fails (uv reads none of pip's configuration, e.g. an index or a
    # certificate only pip.conf names), so a failure of the pins themselves is pip's, as on Binder
    req = str(tmp_path / "requirements.txt")
    uv = _uv_install(venv)
    if uv is None or subprocess.run(uv + ["-r", req], cwd=repo, env=env, capture_output=True,
                                    timeout=INSTALL_S).returncode:
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "-r", req],
             cwd=repo, env=env)
    site = _run([str(venv / "bin" / "python"), "-c",
                 "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                cwd=tmp_path, env=env).strip()
    (Path(site) / "zz_torch_from_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
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


#: extras whose code the notebooks run (load_many: ranks; 06: pipeline; the demo: report)
NOTEBOOK_EXTRAS = ("report", "ranks", "pipeline", "sched")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[_norm(name)] = version.strip()
    return pins


def _notebook_imports(path: Path) -> set[str]:
    """Top-level modules the code cells of notebook ``path`` import (magics and shell lines,
    which are not Python, left out)."""
    import json

    found = set()
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        code = "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def _extras_requirements() -> set[str]:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    names = set()
    for extra in NOTEBOOK_EXTRAS:
        for req in extras.get(extra, []):
            name = re.match(r"[A-Za-z0-9_.-]+", req).group(0)
            if name != "hookmagic":
                names.add(_norm(name))
    return names


def test_every_notebook_import_and_extra_is_pinned_at_the_tested_version():
    pins = _pins()
    owners = md.packages_distributions()
    needed: dict[str, set[str]] = {}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for module in _notebook_imports(nb):
            if module in sys.stdlib_module_names or module == "hookmagic":
                continue
            assert module in owners, f"{nb.name} imports {module}, which nothing here provides"
            for dist in owners[module]:
                needed.setdefault(_norm(dist), set()).add(nb.name)
    for name in _extras_requirements():
        needed.setdefault(name, set()).add("the notebooks' extras")
    missing = {name: sorted(why) for name, why in needed.items() if name not in pins}
    assert not missing, f"not pinned in binder/requirements.txt: {missing}"
    for name, version in pins.items():   # pinned at what the notebooks are tested with
        try:
            installed = md.version(name)
        except md.PackageNotFoundError:
            continue    # build tools (cmake, ninja) need not be in the test environment
        assert installed.split("+")[0] == version, f"{name}: pinned {version}, tested {installed}"
    assert {"torch", "av", "duckdb"} <= set(pins)
