"""GPU time by source line (trace.lines) and the folded flame graph, on the real recordings.

The references are independent of hookmagic.analysis.lines: plain Python loops over every kernel
and its frames (``Trace.stack_frames``), with the rule "the innermost frame outside
site-packages launched it".
"""
from __future__ import annotations

import re
from pathlib import Path
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

import hookmagic
from hookmagic.analysis.flame import flame_tree
from hookmagic.analysis.lines import LINE_COLUMNS, function_span, resolve_focus
from hookmagic.common.format import duration_ns
from hookmagic.trace.model import Trace

RECORDINGS = ["mlp_training", "resnet18_inference_churn", "cupy_pipeline"]


def _library(filename: str) -> bool:
    return "/site-packages/" in filename or filename == "<module>" or "/hookmagic/" in filename


def reference(trace: Trace) -> dict:
    """Per kernel, in plain Python: its launching line and every line on its stack."""
    launched: dict = defaultdict(lambda: [0, 0])
    inclusive: dict = defaultdict(lambda: [0, 0])
    attributed = 0
    frames_of: dict = {}
    for sid, dur in zip(trace.kernels["stack_id"].tolist(), trace.kernels["duration_ns"].tolist()):
        if sid not in frames_of:
            frames_of[sid] = [f for f in trace.stack_frames(sid) if f[0] != "<module>"]
        frames = frames_of[sid]
        if not frames:
            continue
        attributed += dur
        user = [f for f in frames if not _library(f[0])]
        line = (user or frames)[-1]
        launched[line][0] += dur
        launched[line][1] += 1
        for f in set(frames):
            inclusive[f][0] += dur
            inclusive[f][1] += 1
    return {"launched": launched, "inclusive": inclusive, "attributed": attributed}


@pytest.fixture(scope="module", params=RECORDINGS)
def recording(request):
    return hookmagic.recordings.load(request.param)


def test_recordings_carry_stacks(recording):
    assert len(recording.stacks) and (recording.kernels["stack_id"] >= 0).any()


def test_line_table_matches_the_independent_reference(recording):
    ref = reference(recording)
    table = recording.lines()
    assert list(table.columns) == LINE_COLUMNS
    # every attributed kernel is charged once: the launched-here column sums to their time
    assert int(table["gpu_ns"].sum()) == ref["attributed"] == table.attrs["attributed_ns"]
    assert table.attrs["total_ns"] == int(recording.kernels["duration_ns"].sum())
    assert int(table["launches"].sum()) == table.attrs["attributed_kernels"]
    got = {(f, fn, ln): (ns, n) for f, ln, fn, ns, n in
           zip(table["file"], table["line"], table["function"], table["gpu_ns"], table["launches"])
           if n}
    assert got == {k: tuple(v) for k, v in ref["launched"].items()}
    incl = {(f, fn, ln): (ns, n) for f, ln, fn, ns, n in
            zip(table["file"], table["line"], table["function"], table["inclusive_ns"],
                table["inclusive_launches"])}
    assert incl == {k: tuple(v) for k, v in ref["inclusive"].items()}
    # the user's own lines come first
    user = table["user"].to_numpy()
    assert user[: user.sum()].all() and not user[user.sum():].any()
    assert all(f.endswith("benchmarks/make_recordings.py") for f in table.loc[table["user"], "file"])
    assert np.isclose(table["share"].sum(), 1.0)


def test_user_only_and_focus_filter_rows(recording):
    table = recording.lines()
    users = recording.lines(user_only=True)
    assert users["user"].all() and len(users) == int(table["user"].sum())


def test_kernels_column_names_the_kernels_launched_from_the_line():
    trace = hookmagic.recordings.load("cupy_pipeline")
    table = trace.lines()
    top = table.iloc[0]
    names = set(trace.kernels["name"])
    listed = [re.sub(r" ×\d+$", "", k) for k in top["kernels"].split("; ")]
    assert listed and all(n in names for n in listed)


# -- the rendered view ------------------------------------------------------------------------

FILE = "/work/main/benchmarks/make_recordings.py"


def _with_synthetic_source(trace: Trace) -> Trace:
    """The recording with a stored source whose line N reads ``marker_N = 0`` inside
    ``def mlp_training():`` (lines 51-69), so the test knows which text belongs to which line."""
    lines = ["# pad"] * 50 + ["def mlp_training():"] + [f"    marker_{n} = 0" for n in range(52, 70)]
    out = Trace(trace.tables, {**trace.meta, "sources": {FILE: "\n".join(lines) + "\n"}})
    return out


def _rendered_rows(text: str) -> dict[int, tuple[str, ...]]:
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)\s+([\d,]+)\s+([\d.]+ \S+)\s+([\d.]+ \S+)\s+([\d.]+)  (.*)$", line)
        if m:
            rows[int(m.group(1))] = m.groups()[1:]
    return rows


def test_view_shows_the_right_numbers_beside_the_right_lines():
    trace = _with_synthetic_source(hookmagic.recordings.load("mlp_training"))
    ref = reference(trace)["inclusive"]
    view = trace.lines("mlp_training")
    (block,) = view.blocks
    assert (block.file, block.function, block.first, block.last, block.origin) == (
        FILE, "mlp_training", 51, 69, "recording")
    expected = {ln: v for (f, fn, ln), v in ref.items() if fn == "mlp_training"}
    assert len(expected) >= 3
    rows = _rendered_rows(str(view))
    assert set(rows) == set(expected)
    total = sum(v[0] for v in expected.values())
    for ln, (ns, n) in expected.items():
        launches, gpu, per, pct, text = rows[ln]
        assert (int(launches.replace(",", "")), gpu) == (n, duration_ns(ns))
        assert per == duration_ns(ns / n) and float(pct) == pytest.approx(100 * ns / total, abs=0.06)
        assert text.strip() == f"marker_{ln} = 0"
    # lines without GPU time are listed with their text and no numbers
    assert re.search(r"^\s*66\s+marker_66 = 0$", str(view), re.M)
    html = view._repr_html_()
    for ln, (ns, n) in expected.items():
        row = re.search(rf"<tr[^>]*><td[^>]*>{ln}</td>(.*?)</tr>", html).group(1)
        assert f">{n:,}<" in row and f">{duration_ns(ns)}<" in row and f"marker_{ln} = 0" in row
    # the per-line table of the same focus carries the stored text
    table = view.table
    assert table.loc[table["line"] == 65, "source"].item() == "marker_65 = 0"


def test_view_without_source_says_so_and_keeps_the_numbers(tmp_path):
    trace = hookmagic.recordings.load("mlp_training")
    stored = Trace(trace.tables, {**trace.meta, "sources": {}})
    view = stored.lines("Adam.step")
    (block,) = view.blocks
    assert block.origin in ("unavailable", "disk", "disk-changed")   # torch may be installed here
    ref = reference(trace)["inclusive"]
    expected = sum(v[0] for (f, fn, ln), v in ref.items() if fn == "Adam.step")
    assert block.total_ns == expected


def test_mismatched_source_on_disk_is_not_shown():
    trace = hookmagic.recordings.load("mlp_training")
    wrong = "\n".join(["x = 1"] * 200) + "\n"   # no mlp_training in it: not what ran
    view = Trace(trace.tables, {**trace.meta, "sources": {FILE: wrong}}).lines("mlp_training")
    (block,) = view.blocks
    assert block.origin == "mismatch" and "no longer matches" in str(view)
    assert (block.rows["source"] == "").all()


def test_source_from_disk_and_changed_after_the_capture(tmp_path):
    src = tmp_path / "train.py"
    src.write_text("import x\n\ndef step(m):\n    y = m(1)\n    return y.sum()\n")
    tables = {
        "kernels": pd.DataFrame({"start_ns": [0, 10, 20], "end_ns": [5, 17, 29],
                                 "duration_ns": [5, 7, 9], "name": ["gemm", "gemm", "reduce"],
                                 "stack_id": [0, 0, 1]}),
        "stacks": pd.DataFrame({"stack_id": [0, 1], "depth": [0, 0], "filename": [str(src)] * 2,
                                "function": ["step", "step"], "line": [4, 5]}),
    }
    later = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    earlier = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    synthetic_trace = Trace(tables, {"started_at": later, "label": "synthetic"})
    view = synthetic_trace.lines("step")
    (block,) = view.blocks
    assert (block.origin, block.first, block.last) == ("disk", 3, 5)
    rows = _rendered_rows(str(view))
    assert rows[4][:2] == ("2", duration_ns(12)) and rows[4][4] == "    y = m(1)"
    assert rows[5][:2] == ("1", duration_ns(9))
    changed = Trace(tables, {"started_at": earlier}).lines(str(src))
    assert changed.blocks[0].origin == "disk-changed" and "changed after" in str(changed)
    table = synthetic_trace.lines()
    assert table["source"].tolist() == ["y = m(1)", "return y.sum()"]   # 12 ns, then 9 ns
    assert "No GPU time under `other`" in str(synthetic_trace.lines("other"))


# -- focus and spans ---------------------------------------------------------------------------

def _sample_function():
    return 1


def test_focus_from_functions_files_and_names():
    f = resolve_focus(_sample_function)
    assert f.file == __file__ and f.function == "_sample_function"
    assert resolve_focus(hookmagic.Trace.save).function.endswith("save")
    assert resolve_focus("train.py") == resolve_focus("train.py").__class__(file="train.py",
                                                                           text="train.py")
    g = resolve_focus("dir/train.py:Model.forward")
    assert (g.file, g.function) == ("dir/train.py", "Model.forward")
    h = resolve_focus("forward")
    assert h.file is None and h.functions_mask(pd.Series(["Model.forward", "forward",
                                                          "Model.forward_x"])).tolist() == [
        True, True, False]
    assert resolve_focus("/a/b/train.py").files_mask(pd.Series(["/a/b/train.py", "/c/b/train.py",
                                                                "/a/b/xtrain.py"])).tolist() == [
        True, False, False]
    with pytest.raises(hookmagic.HookmagicError):
        resolve_focus(42)


SOURCE = '''import functools


def deco(f):
    @functools.wraps(f)
    def wrapper(*a):
        return f(*a)
    return wrapper


class Model:
    @deco
    def forward(self, x):
        y = x + 1
        return [v for v in y]


def outer():
    def inner():
        return 2
    return inner()
'''.splitlines()


def test_function_span_finds_functions_and_refuses_text_that_did_not_run():
    assert function_span(SOURCE, "Model.forward", [14, 15]) == (12, 15)
    assert function_span(SOURCE, "forward", [14]) == (12, 15)              # Python 3.10 names
    assert function_span(SOURCE, "Model.forward.<locals>.<listcomp>", [15]) == (12, 15)
    assert function_span(SOURCE, "outer.<locals>.inner", [20]) == (19, 20)
    assert function_span(SOURCE, "deco.<locals>.wrapper", [7]) == (5, 7)
    assert function_span(SOURCE, "<module>", [11]) == (1, len(SOURCE))
    assert function_span(SOURCE, "Model.forward", [20]) is None           # lines elsewhere
    assert function_span(SOURCE, "Model.backward", [14]) is None          # no such function
    assert function_span(SOURCE, "<module>", [14]) is None                # inside a def
    assert function_span(SOURCE, "outer", [99]) is None                   # past the end


# -- the folded flame graph ------------------------------------------------------------------

def test_flame_folds_framework_frames_and_keeps_every_nanosecond():
    trace = hookmagic.recordings.load("resnet18_inference_churn")
    raw = flame_tree(trace, fold=False)
    folded = flame_tree(trace)
    plumbing = {"Module._call_impl", "Module._wrapped_call_impl", "_call_impl", "_wrapped_call_impl"}
    assert raw["label"].isin(plumbing).any()
    assert not folded["label"].isin(plumbing).any()
    assert len(folded) < len(raw) and folded["value"].iloc[0] == raw["value"].iloc[0]

    def per_leaf(t):
        leaves = t[t["kind"].isin(["kernel", "memcpy", "memset"])]
        return leaves.groupby("label")["value"].sum().to_dict()
    assert per_leaf(folded) == per_leaf(raw)
    # the user's frames and the model's own forward frames stay
    frames = set(folded.loc[folded["kind"] == "frame", "label"])
    assert {"resnet_inference_churn", "ResNet.forward", "BasicBlock.forward"} <= frames


def test_flame_folds_decorator_wrappers_but_never_user_frames():
    trace = hookmagic.recordings.load("mlp_training")
    raw = set(flame_tree(trace, fold=False)["label"])
    folded = set(flame_tree(trace)["label"])
    assert "Optimizer.profile_hook_step.<locals>.wrapper" in raw
    assert not any(".<locals>.wrapper" in lab or "_use_grad" in lab for lab in folded)
    assert {"main", "mlp_training", "Adam.step"} <= folded
    fig = trace.flame()
    assert "Module._wrapped_call_impl" not in set(fig.data[0].labels)
    assert "Module._wrapped_call_impl" in set(trace.flame(raw=True).data[0].labels)


def test_kineto_import_lines_skip_builtins_and_know_relative_torch_paths():
    """torch.profiler's stacks (a real Kineto file): frames of built-in functions have no file
    and line 0, and library files are relative paths (torch/nn/modules/conv.py)."""
    trace = hookmagic.load(Path(hookmagic.__file__).parent / "data" / "recordings"
                           / "kineto_resnet18.json.gz")
    table = trace.lines()
    assert (table["line"] > 0).all() and (table["file"] != "").all()
    assert set(table.loc[table["user"], "file"]) == {"make_kineto_sample.py"}
    assert int(table["gpu_ns"].sum()) == table.attrs["attributed_ns"] > 0
    assert not table.loc[table["file"].str.startswith("torch"), "user"].any()
    raw, folded = flame_tree(trace, fold=False), flame_tree(trace)
    assert (raw["label"] == "_call_impl").any() and not (folded["label"] == "_call_impl").any()


def test_empty_trace_has_an_empty_table_and_says_why():
    empty = Trace.empty("synthetic: nothing captured")
    table = empty.lines()
    assert list(table.columns) == LINE_COLUMNS and len(table) == 0
    assert table.attrs["total_ns"] == 0 and table.attrs["attributed_kernels"] == 0
    assert "no kernel carries a Python stack" in str(empty.lines("step"))


def test_framework_frames():
    from hookmagic.analysis.frames import is_framework_frame

    site = "/venv/lib/python3.12/site-packages/"
    assert is_framework_frame(site + "torch/nn/modules/module.py", "Module._call_impl")
    assert is_framework_frame(site + "torch/nn/modules/module.py", "_wrapped_call_impl")
    assert is_framework_frame("torch/nn/modules/module.py", "_call_impl")        # Kineto's
    assert is_framework_frame(site + "torch/_dynamo/eval_frame.py", "_TorchDynamoContext.__call__")
    assert is_framework_frame(site + "torch/utils/_contextlib.py",
                              "_DecoratorContextManager.__call__.<locals>.decorate_context")
    assert is_framework_frame(site + "torch/optim/optimizer.py",
                              "Optimizer.profile_hook_step.<locals>.wrapper")
    assert is_framework_frame("/usr/lib/python3.12/functools.py", "wraps.<locals>.wrapper")
    assert not is_framework_frame(site + "torch/nn/modules/linear.py", "Linear.forward")
    assert not is_framework_frame(site + "torch/nn/modules/module.py", "Module.to")
    assert not is_framework_frame("/home/me/train.py", "deco.<locals>.wrapper")  # the user's
    assert not is_framework_frame("<module>", "encoder.layers.0 (TransformerEncoderLayer)")


def test_store_sources_survives_a_save(tmp_path):
    src = tmp_path / "train.py"
    src.write_text("def step(m):\n    return m(1)\n")
    tables = {"kernels": pd.DataFrame({"start_ns": [0], "end_ns": [4], "duration_ns": [4],
                                       "name": ["k"], "stack_id": [0]}),
              "stacks": pd.DataFrame({"stack_id": [0, 0], "depth": [0, 1],
                                      "filename": ["/venv/lib/python3.12/site-packages/x.py",
                                                   str(src)],
                                      "function": ["run", "step"], "line": [9, 2]})}
    synthetic_trace = Trace(tables, {"label": "synthetic"})
    assert synthetic_trace.store_sources() is synthetic_trace
    assert synthetic_trace.meta["sources"] == {str(src): src.read_text()}
    saved = synthetic_trace.save(tmp_path / "t.hmtrace")
    src.unlink()
    view = hookmagic.load(saved).lines("step")
    assert view.blocks[0].origin == "recording" and "return m(1)" in str(view)
