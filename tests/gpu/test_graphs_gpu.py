"""CUDA graphs on a live capture: replayed kernels land on the lines that captured them.

The workload is a small file written by the test (so the test knows each line's number and
reads it back with ``inspect``): four tensor ops on four lines, captured into a CUDA graph and
replayed three times, all inside one capture. The references are independent of hookmagic:
the line numbers come from the workload's source; which kernels each line makes, how many
kernels the replays run and how many nodes each replay has come from torch.profiler, run on the
same workload in a fresh interpreter (each line's statement alone, eagerly, then the same graph
replayed three times). A CuPy graph, where CuPy is installed, checks the same through CuPy's
own kernels, whose names say which ufunc made them.
"""
from __future__ import annotations

import importlib.util
import inspect
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import hookmagic
from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

pytestmark = pytest.mark.needs("native")

REPLAYS = 3
WORKLOAD = '''import torch


def step(x, out):
    h = torch.exp(x)
    p = torch.softmax(h, dim=-1)
    s = p.sum(dim=0)
    torch.mul(s, 2.0, out=out)


def inputs():
    return torch.randn(256, 512, device="cuda"), torch.empty(512, device="cuda")


def warm_up(x, out):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(x, out)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def capture(x, out):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(x, out)
    return graph
'''

# torch.profiler in a fresh interpreter (it leaves CUPTI subscribed for the rest of a process).
# Prints {"lines": {line: kernel names of that line's statement run alone}, "events": {line:
# its GPU activities (kernels, copies, memsets)}, "replayed": kernel names of REPLAYS replays}.
REFERENCE = """
import importlib.util, inspect, json, os, sys, tempfile, textwrap, torch
from torch.profiler import ProfilerActivity, profile
spec = importlib.util.spec_from_file_location("graph_workload", sys.argv[1])
w = importlib.util.module_from_spec(spec)
spec.loader.exec_module(w)
replays = int(sys.argv[2])
GPU = ("kernel", "gpu_memcpy", "gpu_memset")

def gpu_events(run):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory(prefix="hookmagic-") as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU]

x, out = w.inputs()
w.warm_up(x, out)
body, first = inspect.getsourcelines(w.step)
env = {"torch": torch, "x": x, "out": out}
statements = [(first + i, textwrap.dedent(text).strip()) for i, text in enumerate(body)
              if i > 0 and text.strip()]
for _, text in statements:  # every statement once, so each runs warm and has its inputs
    exec(text, env)
torch.cuda.synchronize()
gpu_events(lambda: exec(statements[0][1], env))  # the profiler's own first-use set-up
lines, counts = {}, {}
for line, text in statements:
    events = gpu_events(lambda: exec(text, env))
    lines[line] = [e["name"] for e in events if e["cat"] == "kernel"]
    counts[line] = len(events)
graph = w.capture(x, out)
torch.cuda.synchronize()
graph.replay()
torch.cuda.synchronize()

def replay():
    for _ in range(replays):
        graph.replay()

events = gpu_events(replay)
print(json.dumps({"lines": lines, "events": counts,
                  "replayed": [e["name"] for e in events if e["cat"] == "kernel"]}))
"""


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    path = tmp_path_factory.mktemp("graphs") / "graph_workload.py"
    path.write_text(WORKLOAD)
    spec = importlib.util.spec_from_file_location("graph_workload", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["graph_workload"] = mod
    return mod


@pytest.fixture(scope="module")
def reference(workload):
    out = subprocess.run([sys.executable, "-c", REFERENCE, workload.__file__, str(REPLAYS)],
                         capture_output=True, text=True, timeout=300,
                         cwd=str(Path(__file__).parents[2]))
    assert out.returncode == 0, out.stdout + out.stderr
    ref = json.loads(out.stdout.strip().splitlines()[-1])
    ref["lines"] = {int(line): names for line, names in ref["lines"].items()}
    ref["events"] = {int(line): n for line, n in ref["events"].items()}
    return ref


def _step_lines(workload) -> list[int]:
    """The line numbers of step()'s four statements, from its source (not from hookmagic)."""
    body, first = inspect.getsourcelines(workload.step)
    lines = [first + i for i, text in enumerate(body) if i > 0 and text.strip()]
    assert len(lines) == 4, body
    return lines


def _line_of_marker(function, marker: str) -> int:
    body, first = inspect.getsourcelines(function)
    (line,) = [first + i for i, text in enumerate(body) if text.rstrip().endswith(marker)]
    return line


def _frame_line(trace, stack_id: int, file_suffix: str) -> int | None:
    """The line of the innermost frame of ``stack_id`` in a file ending with ``file_suffix``."""
    lines = [line for file, _, line in trace.stack_frames(stack_id) if file.endswith(file_suffix)]
    return lines[-1] if lines else None


def test_replayed_kernels_take_the_lines_that_captured_them(workload, reference):
    step_lines = _step_lines(workload)
    name_line: dict[str, int] = {}
    for line in step_lines:
        for name in reference["lines"][line]:
            assert name_line.setdefault(name, line) == line, \
                f"the reference puts {name!r} on two lines: the test needs distinct kernels"
    assert all(reference["lines"][line] for line in step_lines), reference["lines"]
    x, out = workload.inputs()
    workload.warm_up(x, out)
    with hookmagic.capture() as trace:
        graph = workload.capture(x, out)
        for _ in range(REPLAYS):
            graph.replay()  # graph-replay
        torch.cuda.synchronize()
    replay_line = _line_of_marker(test_replayed_kernels_take_the_lines_that_captured_them,
                                  "# graph-replay")
    assert trace.status == "complete", trace.meta.get("reason")
    # the graph's kernels: as many, and the same, as torch.profiler saw in the same replays
    # (PyTorch also fills its RNG state outside the graph, at capture and at each replay)
    k = trace.kernels[trace.kernels["graph_id"] != 0]
    replayed = [name for name in reference["replayed"] if name in name_line]
    per_replay = sum(len(reference["lines"][line]) for line in step_lines)
    assert len(k) == len(replayed) == REPLAYS * per_replay
    assert Counter(k["name"]) == Counter(replayed)
    assert (k["graph_node"] != 0).all()
    # every kernel on the line that captured it; the replay stays the launch's stack
    got = [_frame_line(trace, s, "graph_workload.py") for s in k["stack_id"]]
    assert got == [name_line[n] for n in k["name"]]
    here = Path(__file__).name
    assert {_frame_line(trace, s, here) for s in k["launch_stack_id"]} == {replay_line}
    # lines() charges each line the kernels it captured, every replay
    table = trace.lines()
    ours = table[table["file"].str.endswith("graph_workload.py")].set_index("line")
    for line in step_lines:
        assert ours.loc[line, "launches"] == REPLAYS * len(reference["lines"][line]), line
    assert sum(int(ours.loc[line, "gpu_ns"]) for line in step_lines) == int(k["duration_ns"].sum())
    # the flame graph draws each kernel under its capture line
    from hookmagic.analysis.flame import flame_tree

    nodes = flame_tree(trace, weight="launches").set_index("id")
    leaves = nodes[(nodes["kind"] == "kernel") & nodes["label"].isin(list(name_line))]
    assert int(leaves["value"].sum()) == len(k)
    for name, parent in zip(leaves["label"], leaves["parent"]):
        assert nodes.loc[parent, "file_line"].endswith(f"graph_workload.py:{name_line[name]}")
    # graph launches: one row each, with their nodes beneath
    g = trace.graphs()
    launches = g[g["kind"] == "launch"]
    assert len(launches) == REPLAYS
    nodes_per_replay = sum(reference["events"][line] for line in step_lines)
    assert launches["nodes"].tolist() == [nodes_per_replay] * REPLAYS
    assert launches["line"].tolist() == [replay_line] * REPLAYS
    assert launches["file"].str.endswith(here).all()
    node_rows = g[g["kind"] == "kernel"]
    assert node_rows["line"].tolist() == [name_line[n] for n in node_rows["name"]]
    assert len(node_rows) == len(k)
    assert int(node_rows["gpu_ns"].sum()) == int(k["duration_ns"].sum())


def test_a_graph_captured_before_the_capture_keeps_its_replay_line(workload):
    from hookmagic.cupti.columns import uncaptured_graph_notes

    x, out = workload.inputs()
    workload.warm_up(x, out)
    graph = workload.capture(x, out)
    torch.cuda.synchronize()
    with hookmagic.capture() as trace:
        graph.replay()  # early-replay
        torch.cuda.synchronize()
    line = _line_of_marker(test_a_graph_captured_before_the_capture_keeps_its_replay_line,
                           "# early-replay")
    k = trace.kernels[trace.kernels["graph_id"] != 0]
    assert len(k) > 0 and (k["stack_id"] == k["launch_stack_id"]).all()
    assert {_frame_line(trace, s, Path(__file__).name) for s in k["stack_id"]} == {line}
    assert uncaptured_graph_notes(trace.kernels)[0].startswith(f"{len(k)} of {len(k)} ")


@pytest.mark.needs("cupy")
def test_cupy_graph_kernels_take_their_capture_lines():
    import cupy as cp

    x = cp.random.random(1 << 16, dtype=cp.float32)
    y, z = cp.empty_like(x), cp.empty_like(x)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        cp.exp(x, out=y)  # compiled and loaded before capturing
        cp.multiply(y, 2.0, out=z)
        stream.synchronize()
        with hookmagic.capture() as trace:
            stream.begin_capture()
            cp.exp(x, out=y)  # cupy-exp
            cp.multiply(y, 2.0, out=z)  # cupy-multiply
            graph = stream.end_capture()
            for _ in range(REPLAYS):
                graph.launch(stream)  # cupy-launch
            stream.synchronize()
    me = test_cupy_graph_kernels_take_their_capture_lines
    exp_line = _line_of_marker(me, "# cupy-exp")
    multiply_line = _line_of_marker(me, "# cupy-multiply")
    launch_line = _line_of_marker(me, "# cupy-launch")
    k = trace.kernels
    # CuPy names its ufunc kernels after the ufunc: cupy_exp__..., cupy_multiply__...
    assert len(k) == 2 * REPLAYS and (k["graph_id"] != 0).all()
    expected = [multiply_line if "multiply" in n else exp_line if "exp" in n else None
                for n in k["name"]]
    here = Path(__file__).name
    assert [_frame_line(trace, s, here) for s in k["stack_id"]] == expected
    assert {_frame_line(trace, s, here) for s in k["launch_stack_id"]} == {launch_line}
    g = trace.graphs()
    launches = g[g["kind"] == "launch"]
    assert launches["nodes"].tolist() == [2] * REPLAYS
    assert launches["line"].tolist() == [launch_line] * REPLAYS
