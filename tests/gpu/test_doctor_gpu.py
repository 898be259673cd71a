"""`hookmagic doctor` on a real GPU: its GPU, compute capability and driver agree with PyTorch's
and NVML's own answers, CUPTI is found, and a capture is said to be possible."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import hookmagic

from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())
pynvml = pytest.importorskip("pynvml", reason="needs nvidia-ml-py (a hookmagic dependency)")


@pytest.fixture(scope="module")
def report():
    return hookmagic.doctor()


def _doctors_gpu(report, ordinal: int) -> dict:
    """The doctor's entry (NVML's list: every GPU of the host) for CUDA device ``ordinal``,
    matched by UUID where PyTorch gives one."""
    uuid = str(getattr(torch.cuda.get_device_properties(ordinal), "uuid", "") or "")
    if uuid:
        found = [g for g in report.gpus if g["uuid"].removeprefix("GPU-").removeprefix("MIG-") == uuid]
        assert len(found) == 1, (uuid, report.gpus)
        return found[0]
    assert len(report.gpus) == torch.cuda.device_count(), "cannot match GPUs without UUIDs"
    return report.gpus[ordinal]


def test_gpus_match_pytorch(report):
    assert report["gpus"].status == "ok"
    for ordinal in range(torch.cuda.device_count()):
        g = _doctors_gpu(report, ordinal)
        assert g["name"] == torch.cuda.get_device_name(ordinal)
        assert tuple(g["compute_capability"]) == torch.cuda.get_device_capability(ordinal)
        major, minor = torch.cuda.get_device_capability(ordinal)
        assert g["arch"] == f"sm_{major}{minor}"


def test_driver_matches_nvml(report):
    pynvml.nvmlInit()
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    version = version.decode() if isinstance(version, bytes) else version
    driver = report["driver"]
    assert driver.status == "ok", driver
    assert driver.data["driver_version"] == version
    assert driver.data["cuda_driver_version"] == cuda     # libcuda's cuDriverGetVersion
    assert len(report.gpus) == count
    assert report["nvml"].status == "ok"


def test_cupti_is_found_and_a_capture_is_possible(report):
    assert report["cupti"].status == "ok", report["cupti"]
    assert Path(report["cupti"].data["path"]).is_file()
    assert report["native"].status == "ok"
    assert report.verdict.startswith("%%cudahook and hookmagic.capture() can capture")


def test_kernel_variants_follow_the_architecture(report):
    major, minor = torch.cuda.get_device_capability(0)
    g = _doctors_gpu(report, 0)
    runs = {(k["op"], k["variant"]): k["runs"][str(g["index"])] for k in report.kernels}
    assert runs[("sgemm", "naive")]
    assert runs[("gemm", "mma")] == (major >= 8)
    assert runs[("gemm", "wgmma")] == ((major, minor) == (9, 0))


def test_counters_answer_is_known_where_the_driver_publishes_it(report):
    if not Path("/proc/driver/nvidia/params").exists():
        pytest.skip("the driver publishes no /proc/driver/nvidia/params here (not Linux, or a Jetson)")
    assert report["counters"].data["restricted"] in (True, False)


def test_the_command_answers_on_a_gpu_machine():
    done = subprocess.run([sys.executable, "-m", "hookmagic.cli", "doctor", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["checks"]["driver"]["status"] == "ok" and doc["gpus"]
