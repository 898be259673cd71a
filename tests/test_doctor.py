"""`hookmagic doctor` on this machine (no GPU, no driver): it runs, says what is missing, why,
and how to fix it; its answers agree with independent sources (the import system, sys, the
kernel dispatch function); a SYNTHETIC driver parameters file decides the counters' answer."""
from __future__ import annotations

import ctypes
import importlib.util
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import hookmagic
from hookmagic.checkup import doctor
from hookmagic.common.optional import EXTRAS
from hookmagic.common.results import Headline
from hookmagic.machine.counters import counter_access
from hookmagic.machine.result import Check, DoctorReport

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = {"python", "hookmagic", "native", "driver", "nvml", "gpus", "cupti", "cuda", "counters",
            "kernels", "extras"}


def _driver_here() -> bool:
    """Independently of the doctor: can this process load the CUDA driver library?"""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


no_driver = pytest.mark.skipif(_driver_here(), reason="this machine has an NVIDIA driver; "
                               "tests/gpu/test_doctor_gpu.py checks the doctor there")


def _cli(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "hookmagic"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "hookmagic.cli"]
    return subprocess.run(cmd + ["doctor", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def report_json() -> dict:
    done = _cli("--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@no_driver
def test_the_command_says_no_driver_why_and_how_to_fix_it():
    done = _cli()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    driver = next(i for i, line in enumerate(lines) if "NVIDIA driver" in line and "missing" in line)
    assert "libcuda" in lines[driver]                      # why: the driver library is not there
    assert lines[driver + 1].strip().startswith("fix: install the NVIDIA driver")
    gpus = next(line for line in lines if line.split()[:2] == ["missing", "GPUs"])
    assert "none" in gpus
    assert "Nothing will be captured here" in done.stdout
    assert "GPUs:\n  (none)" in done.stdout


def test_json_has_every_section(report_json):
    assert set(report_json) == {"verdict", "checks", "gpus", "kernels", "extras"}
    assert set(report_json["checks"]) == SECTIONS
    for key, check in report_json["checks"].items():
        assert check["key"] == key
        assert check["status"] in ("ok", "missing", "warning", "unknown", "info")
        assert check["detail"]
        if check["status"] == "missing":
            assert check["fix"], key                       # every missing piece says how to fix it
    assert isinstance(report_json["gpus"], list) and isinstance(report_json["kernels"], list)
    assert len(report_json["kernels"]) == len(hookmagic.kernels.available()[["op", "variant"]]
                                              .drop_duplicates())


@no_driver
def test_json_without_a_driver(report_json):
    checks = report_json["checks"]
    assert checks["driver"]["status"] == "missing" and checks["gpus"]["status"] == "missing"
    assert report_json["gpus"] == []
    assert report_json["verdict"].startswith("Nothing will be captured here")


def test_versions_are_this_pythons_and_this_hookmagics(report_json):
    data = report_json["checks"]["python"]["data"]
    assert data["python"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert data["hookmagic"] == hookmagic.__version__
    assert Path(data["hookmagic_path"]) == Path(hookmagic.__file__).parent


def test_native_extension_answer_agrees_with_importing_it(report_json):
    native = report_json["checks"]["native"]
    loads = importlib.util.find_spec("hookmagic._native") is not None
    assert (native["status"] in ("ok", "warning")) == loads
    if loads:
        import hookmagic._native as ext

        assert Path(native["data"]["path"]) == Path(ext.__file__)


# Which module each distribution installs, written here from the packages' own documentation:
# the doctor reads metadata, the import system finds modules, and the two must agree.
IMPORT_NAMES = {"duckdb": "duckdb", "ray": "ray", "av": "av",
                "prometheus-client": "prometheus_client", "nbclient": "nbclient",
                "nbformat": "nbformat", "nbconvert": "nbconvert", "ipykernel": "ipykernel",
                "mkdocs": "mkdocs", "mkdocs-material": "material", "cuda-core": "cuda.core",
                "cuda-bindings": "cuda.bindings", "cuda-pathfinder": "cuda.pathfinder"}


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:   # its parent package is missing
        return False


def test_extras_agree_with_the_import_system(report_json):
    extras = report_json["extras"]
    assert [e["extra"] for e in extras] == list(EXTRAS)
    checked = 0
    for e in extras:
        assert e["install"].startswith(f"pip install 'hookmagic[{e['extra']}]'")
        assert e["packages"], e["extra"]                   # every extra brings something
        assert e["installed"] == all(p["installed"] for p in e["packages"])
        for p in e["packages"]:
            if p["installed"]:
                assert p["modules"] and all(_found(m) for m in p["modules"]), p
            if p["name"] in IMPORT_NAMES:
                assert p["installed"] == _found(IMPORT_NAMES[p["name"]]), p
                checked += 1
    assert checked >= 8


def test_the_duckdb_extra_matches_whether_duckdb_imports(report_json):
    ranks = next(e for e in report_json["extras"] if e["extra"] == "ranks")
    assert ranks["installed"] == _found("duckdb")


def test_extras_read_from_a_checkout_when_nothing_is_installed():
    """Run from a clone through PYTHONPATH (as on the GPU machine), the extras come from the
    checkout's pyproject.toml: every extra of EXTRAS is there and brings something."""
    from hookmagic.machine.packages import _checkout_extras

    pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
    extras = _checkout_extras()
    assert extras is not None and set(EXTRAS) <= set(extras)
    assert all(extras[e] for e in EXTRAS)
    assert any(r.startswith("duckdb") for r in extras["ranks"])


# A SYNTHETIC /proc/driver/nvidia/params, in the driver's own "Name: value" format
_PARAMS = """ResmanDebugLevel: 4294967295
RmLogonRC: 1
ModifyDeviceFiles: 1
DeviceFileUID: 0
RmProfilingAdminOnly: {}
EnableMSI: 1
"""


def test_counters_restricted_when_admin_only_is_1(tmp_path):
    params = tmp_path / "params"
    params.write_text(_PARAMS.format(1))
    user = counter_access(params, admin=False)
    assert user["restricted"] is True and "NVreg_RestrictProfilingToAdminUsers=0" in user["fix"]
    root = counter_access(params, admin=True)
    assert root["restricted"] is True and root["fix"] == ""


def test_counters_open_when_admin_only_is_0(tmp_path):
    params = tmp_path / "params"
    params.write_text(_PARAMS.format(0))
    assert counter_access(params)["restricted"] is False


def test_counters_unknown_when_the_file_cannot_say(tmp_path):
    assert counter_access(tmp_path / "absent")["restricted"] is None
    odd = tmp_path / "params"
    odd.write_text(_PARAMS.format("yes"))
    assert counter_access(odd)["restricted"] is None
    assert counter_access(tmp_path)["restricted"] is None      # a folder, not a file


def test_python_api_summary_is_a_headline(tmp_path):
    params = tmp_path / "params"
    params.write_text(_PARAMS.format(0))
    report = hookmagic.doctor(params_path=params)
    assert isinstance(report, DoctorReport)
    assert report["counters"].status == "ok"
    head = report.summary()
    assert isinstance(head, Headline)
    frame = head.to_frame()
    assert list(frame.index) == [c.key for c in report.checks]
    assert frame.loc["counters", "value"].startswith("ok: open to every user")
    assert all(c.fix for c in report.missing())


def test_html_escapes_what_the_machine_said():
    synthetic = DoctorReport([Check("driver", "NVIDIA driver", "missing", "<script>x</script>",
                                    "fix <b>it</b>")], verdict="a < b")
    page = synthetic._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;" in page
    assert "<script>" not in synthetic.summary()._repr_html_()


def test_a_deadline_too_short_for_any_probe_still_gives_a_report():
    """The child process cannot even start Python in a millisecond: every section it did not
    answer says so, and the report is still made."""
    report = doctor(timeout_s=0.001)
    for key in ("native", "driver", "nvml"):
        assert report[key].status == "unknown", report[key]
        assert "no answer within" in report[key].detail or "no answer within" in str(report[key].data)
    assert report.verdict.startswith("Nothing will be captured here")


def test_kernel_variants_per_architecture():
    """Arch-specific code (sm_90a: wgmma, TMA) runs on sm_90 only; the rest on its minimum
    architecture and every later one (NVIDIA's compatibility rule for cubins and PTX)."""
    from hookmagic.checkup import _kernel_table

    gpus = [{"index": i, "compute_capability": cc} for i, cc in
            enumerate([[7, 5], [8, 0], [9, 0], [10, 0]])]
    rows, error = _kernel_table(gpus)
    assert not error
    runs = {(r["op"], r["variant"]): r["runs"] for r in rows}
    assert runs[("gemm", "wgmma")] == {"0": False, "1": False, "2": True, "3": False}
    assert runs[("gemm", "mma")] == {"0": False, "1": True, "2": True, "3": True}
    assert runs[("sgemm", "naive")] == {"0": True, "1": True, "2": True, "3": True}
    wgmma = next(r for r in rows if r["variant"] == "wgmma")
    assert wgmma["why_not"]["1"] == "needs sm_90a: sm_90 exactly"


def test_a_synthetic_gpu_answer_is_reported_with_its_architecture():
    """SYNTHETIC probe answers (NVML's and libcuda's, as the child returns them) for one H200:
    the driver, the GPU's architecture and the kernels' defaults reach the report."""
    from hookmagic import checkup

    nvml = {"found": True, "error": "", "driver_version": "580.95.05", "nvml_version": "13.580",
            "cuda_driver_version": 13000,
            "devices": [{"index": 0, "name": "NVIDIA H200 (synthetic)", "uuid": "GPU-0",
                         "pci_bus_id": "", "compute_capability": [9, 0],
                         "memory_bytes": 141 * 2**30, "source": "NVML"}]}
    cuda = {"found": True, "path": "/synthetic/libcuda.so.1", "error": "",
            "cuda_driver_version": 13000, "devices": []}
    gpus = checkup._gpus(nvml, cuda)
    assert (gpus[0]["arch"], gpus[0]["architecture"]) == ("sm_90", "Hopper")
    driver = checkup._driver_check(nvml, cuda, 13000)
    assert driver.status == "ok" and "580.95.05" in driver.detail and "CUDA 13.0" in driver.detail
    kernels, _ = checkup._kernel_table(gpus)
    checks = [driver, checkup._gpus_check(gpus, nvml, cuda)]
    text = DoctorReport(checks, gpus, kernels, []).text()
    assert "0: NVIDIA H200 (synthetic), compute capability 9.0 (sm_90, Hopper), 141.0 GiB" in text
    assert "default gemm float16/bfloat16: wgmma" in text
    assert not [line for line in text.splitlines() if "not on this GPU" in line and "wgmma" in line]


@pytest.mark.parametrize("cc", [80, 87, 90])
def test_the_defaults_shown_are_what_dispatch_chooses(cc):
    from hookmagic.checkup import _dispatch_defaults
    from hookmagic.kernels.dispatch import choose

    defaults = _dispatch_defaults(cc)
    assert defaults
    for d in defaults:
        for dtype in d["dtypes"]:
            for shapes in (((4096, 4096), (4096, 4096)), ((8, 64), (64, 128))):
                assert choose(d["op"], f"sm_{cc}", dtype, shapes).variant == d["variant"]


@no_driver
def test_nothing_captured_points_to_the_doctor():
    import hookmagic.cupti.session as session

    session._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with hookmagic.capture() as trace:
            pass
    assert trace.meta["status"] == "unavailable"
    assert trace.meta["reason"].endswith("; run `hookmagic doctor` for what this machine lacks")
    said = [str(w.message) for w in caught if issubclass(w.category, hookmagic.CaptureUnavailable)]
    assert said and said[0].endswith("run `hookmagic doctor` for what this machine lacks")


def test_doctor_is_in_the_public_api():
    assert "doctor" in dir(hookmagic)
    assert hookmagic.doctor is doctor
    importlib.import_module("hookmagic.checkup")   # importing the module leaves the function
    assert hookmagic.doctor is doctor


def test_the_driver_is_asked_from_a_child_process_only():
    """NVML and libcuda are entered in the doctor's child process: the asking process loads
    neither (nor PyTorch), so a hung driver cannot hang it and no CUDA context is made here."""
    code = ("import sys, hookmagic; hookmagic.doctor(); "
            "maps = open('/proc/self/maps').read() if sys.platform == 'linux' else ''; "
            "print(sorted(m for m in ('pynvml', 'torch') if m in sys.modules), "
            "'libcuda' in maps, 'libnvidia-ml' in maps)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "False", "False"]
