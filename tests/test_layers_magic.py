"""`%trtprofile` through a real IPython shell: imports, misuse, missing TensorRT, no crashes."""
from __future__ import annotations

import builtins

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from hookmagic.layers import LayerProfile
from hookmagic.layers.tensorrt_live import INSTALL_HINT
from hookmagic.extension import load_ipython_extension
from hookmagic.common.errors import HookmagicError
from hookmagic.layers_magic import TrtProfileMagics
from hookmagic.magic_args import MagicFailed

from .layers_samples import mobilenet_files


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    load_ipython_extension(shell)
    return shell


def _trtprofile(ip) -> TrtProfileMagics:
    (magics,) = [c for c in ip.configurables if isinstance(c, TrtProfileMagics)]
    return magics


def _files(keys=("profile", "layers", "times")):
    f = mobilenet_files()
    return " ".join(f"--{k} {f[k]}" for k in keys)


def test_loading_twice_registers_once(ip):
    first = _trtprofile(ip)
    load_ipython_extension(ip)
    assert _trtprofile(ip) is first
    assert "trtprofile" in ip.magics_manager.magics["line"]


def test_import_trtexec_returns_and_stores(ip, capsys):
    p = ip.run_line_magic("trtprofile", f"{_files()} -o -v prof -q")
    assert isinstance(p, LayerProfile) and round(p.total_ms, 3) == 0.470
    assert ip.user_ns["prof"] is p
    assert capsys.readouterr().out == ""
    assert ip.run_line_magic("trtprofile", f"{_files(('profile', 'layers'))}") is None
    assert "72 layers" in capsys.readouterr().out


def test_load_saved_profile(ip, tmp_path):
    p = ip.run_line_magic("trtprofile", f"{_files(('profile',))} -o -q")
    p.save(tmp_path / "p.parquet")
    back = ip.run_line_magic("trtprofile", f"--load {tmp_path / 'p.parquet'} --name again -o -q")
    assert back.name == "again" and len(back.layers) == 73


def test_explore_displays_the_explorer(ip, monkeypatch):
    import hookmagic.layers_magic as lm
    from hookmagic.views.layers_explorer import LayerExplorer

    shown = []
    monkeypatch.setattr(lm, "display", shown.append)
    ip.run_line_magic("trtprofile", f"{_files(('profile', 'layers'))} --explore")
    assert isinstance(shown[0], LayerExplorer) and len(shown[0].filtered()) == 20


def test_bad_file_fails_the_cell_with_one_line(ip, capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(MagicFailed) as info:
        ip.run_line_magic("trtprofile", f"--profile {bad}")
    assert isinstance(info.value, HookmagicError) and isinstance(info.value.__cause__, HookmagicError)
    # in a cell: the cell fails (a "run all" stops there) and shows one line, no traceback
    result = ip.run_cell(f"%trtprofile --profile {bad}")
    assert not result.success and isinstance(result.error_in_exec, MagicFailed)
    shown = capsys.readouterr()
    lines = [ln for ln in (shown.out + shown.err).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("hookmagic: --exportProfile file"), lines


@pytest.mark.parametrize("target", ["model.onnx", "model.engine"])
def test_missing_tensorrt_gives_the_install_hint(ip, capsys, monkeypatch, target):
    real = builtins.__import__

    def no_trt(name, *a, **k):
        if name == "tensorrt":
            raise ImportError("No module named 'tensorrt'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_trt)
    with pytest.raises(MagicFailed) as info:
        ip.run_line_magic("trtprofile", target)
    assert str(info.value) == INSTALL_HINT and "%trtprofile --profile" in str(info.value)
    assert info.value._render_traceback_() == [f"hookmagic: {INSTALL_HINT}"]


def test_misuse_raises_usage_error(ip):
    with pytest.raises(UsageError, match="exactly one source"):
        ip.run_line_magic("trtprofile", "")
    with pytest.raises(UsageError, match="exactly one source"):
        ip.run_line_magic("trtprofile", f"model.onnx {_files(('profile',))}")
    with pytest.raises(UsageError, match="neither a .onnx/.engine file nor a variable"):
        ip.run_line_magic("trtprofile", "no_such_variable")
    ip.user_ns["some_model"] = object()
    with pytest.raises(UsageError, match="needs --input-shape"):
        ip.run_line_magic("trtprofile", "some_model")


def test_help_is_the_docstring(ip):
    assert "trtexec exports" in TrtProfileMagics.trtprofile.__doc__
    assert "--profile" in TrtProfileMagics.trtprofile.__doc__


def test_config_trait(ip):
    ip.run_line_magic("config", "TrtProfileMagics.iterations = 7")
    assert _trtprofile(ip).iterations == 7


def test_top_lists_that_many_slowest_layers(ip, capsys):
    from IPython.utils.capture import capture_output

    p = ip.run_line_magic("trtprofile", f"{_files(('profile', 'layers'))} -o -q")
    slowest = p.layers.sort_values(["mean_ms", "order"], ascending=[False, True]).head(12)
    with capture_output() as shown:
        ip.run_line_magic("trtprofile", f"{_files(('profile', 'layers'))} --top 12")
    (bundle,) = [o.data for o in shown.outputs]
    assert bundle["text/html"].count("</tr>") == 1 + 12         # header + 12 layers
    assert "slowest 12 layers" in bundle["text/plain"]
    for name in slowest["name"]:
        assert name[:40] in bundle["text/plain"]
    assert "NVIDIA TITAN RTX" in bundle["text/plain"]           # from the metadata beside


def test_quoted_paths_with_spaces(ip, tmp_path):
    """Both magics split their line with shell quoting (hookmagic.magic_args.parse_line)."""
    import shutil
    folder = tmp_path / "my exports"
    folder.mkdir()
    f = mobilenet_files()
    paths = {k: shutil.copy(f[k], folder / f"{k}.json") for k in ("profile", "layers")}
    p = ip.run_line_magic("trtprofile", f"--profile '{paths['profile']}' "
                                        f"--layers \"{paths['layers']}\" --name 'mobile net' -o -q")
    assert isinstance(p, LayerProfile) and p.name == "mobile net"
