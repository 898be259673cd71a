"""`hookmagic trt summary|compare` on the real samples; exit codes and one-line errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hookmagic.cli import EXIT_THRESHOLD, build_parser, main

from .layers_samples import mobilenet_files, resnet_files

ROOT = Path(__file__).resolve().parent.parent


def _args(files, keys=("profile", "layers", "times")):
    return [a for k in keys for a in (f"--{k}", str(files[k]))]


def test_summary_json_reproduces_trex_figures(capsys):
    assert main(["trt", "summary", *_args(mobilenet_files()), "--json", "--top", "3"]) == 0
    doc = json.loads(capsys.readouterr().out)
    s = doc["summary"]
    assert s["layers"] == 72 and round(s["total_ms"], 3) == 0.470
    assert round(s["weights_mib"], 1) == 3.3 and round(s["activations_mib"], 1) == 15.9
    assert len(doc["top"]) == 3
    assert {r["type"] for r in doc["by_type"]} == {"Convolution", "Reformat", "Pooling"}
    assert doc["reconcile"][1]["measure"] == "end-to-end latency"


def test_summary_text(capsys):
    assert main(["trt", "summary", *_args(mobilenet_files(), ("profile", "layers"))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mobilenet.qat: 72 layers, layer sum 0.470 ms")
    assert "time by precision" in out and "findings" in out


def test_threshold_exit_code(capsys):
    files = mobilenet_files()
    assert main(["trt", "summary", *_args(files, ("profile",)), "--max-ms", "0.4"]) == EXIT_THRESHOLD
    assert "exceeds --max-ms" in capsys.readouterr().err
    assert main(["trt", "summary", *_args(files, ("profile",)), "--max-ms", "0.5"]) == 0


def test_compare_json(capsys, tmp_path):
    a, b = resnet_files("fp32"), resnet_files("fp16")
    saved = tmp_path / "qat.parquet"
    from hookmagic.layers import from_trtexec
    from_trtexec(**resnet_files("qat")).save(saved)
    argv = ["trt", "compare", *_args(a, ("profile", "layers")), *_args(b, ("profile", "layers")),
            "--load", str(saved), "--name", "fp32", "--name", "fp16", "--name", "int8", "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [e["engine"] for e in doc["engines"]] == ["fp32", "fp16", "int8"]
    assert set(doc["by_type"]) == {"fp32 -> fp16", "fp32 -> int8"}
    assert doc["engines"][1]["speedup_vs_first"] > 2


def test_bad_input_is_one_line_error(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"count": 1}, {"name": "x", "averageMs": ')
    assert main(["trt", "summary", "--profile", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not valid JSON" in err
    assert main(["trt", "summary", "--profile", str(mobilenet_files()["layers"])]) == 1
    assert "--layers" in capsys.readouterr().err


def test_usage_errors_exit_2():
    with pytest.raises(SystemExit) as e:
        main(["trt", "summary"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["trt", "compare", "--profile", "x.json"])
    assert e.value.code == 2


def test_parser_lists_trt():
    assert "trt" in build_parser().format_help()


def test_module_runs_as_a_program():
    files = mobilenet_files()
    r = subprocess.run([sys.executable, "-m", "hookmagic.cli", "trt", "summary",
                        "--profile", str(files["profile"]), "--json"],
                       capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["summary"]["layers"] == 73


def test_summary_reads_the_metadata_beside_the_exports(capsys):
    # the *.profile.metadata.json next to the exports names the GPU trtexec ran on
    assert main(["trt", "summary", *_args(mobilenet_files(), ("profile", "layers")), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["device"] == "NVIDIA TITAN RTX"
    assert main(["trt", "summary", *_args(resnet_files("fp16"), ("profile",))]) == 0
    assert "\ndevice: NVIDIA GeForce RTX 3090\n" in capsys.readouterr().out


def test_compare_without_names_tells_same_named_files_apart(capsys):
    # fp32/resnet.onnx.engine.* and fp16/resnet.onnx.engine.*: both files are called "resnet"
    argv = ["trt", "compare", *_args(resnet_files("fp32"), ("profile", "layers")),
            *_args(resnet_files("fp16"), ("profile", "layers")), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [e["engine"] for e in doc["engines"]] == ["fp32/resnet", "fp16/resnet"]
    assert list(doc["by_type"]) == ["fp32/resnet -> fp16/resnet"]


def test_a_subcommands_error_shows_that_subcommands_usage(capsys):
    with pytest.raises(SystemExit) as e:
        main(["trt", "compare", "--profile", "x.json"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: hookmagic trt compare")
    assert "compare needs at least two engines" in err


def test_version(capsys):
    from hookmagic import __version__
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"hookmagic {__version__}"


@pytest.mark.parametrize("argv", [["kernels", "list", "--js"], ["trt", "summary", "--max", "1", "x"],
                                  ["demo", "--ou", "x"]])
def test_shortened_options_are_refused(argv, capsys):
    # argparse would accept a unique prefix (--js for --json); every subcommand refuses it
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err
