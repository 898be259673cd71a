"""GPU time by source line on a live capture: kernels land on the lines that launched them.

The workload is a small file written by the test, so the test knows which line launches what:
a GEMM on one line, a ReLU on the next, a reduction on the third; a module whose forward the
user wrote; backward() on its own line. The references are the kernels' own names and the
capture's kernel table, not hookmagic.analysis.lines.
"""
from __future__ import annotations

import importlib.util
import re
import sys

import pytest

import hookmagic
from tests.gpu.conftest import skip_reason

torch = pytest.importorskip("torch", reason=skip_reason())

WORKLOAD = '''import torch


def step(a, b):
    c = a @ b
    d = torch.relu(c)
    return d.sum()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(256, 256)

    def forward(self, x):
        h = self.fc(x)
        return torch.nn.functional.gelu(h)


def train(net, x):
    loss = net(x).square().mean()
    loss.backward()
'''
GEMM, RELU, SUM, FC, GELU, LOSS, BACKWARD = 5, 6, 7, 16, 17, 21, 22


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    path = tmp_path_factory.mktemp("lines") / "lines_workload.py"
    path.write_text(WORKLOAD)
    spec = importlib.util.spec_from_file_location("lines_workload", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["lines_workload"] = mod
    return mod


def _row(table, line):
    rows = table[(table["file"].str.endswith("lines_workload.py")) & (table["line"] == line)]
    assert len(rows) == 1, (line, table.head(20))
    return rows.iloc[0]


def test_each_line_gets_the_kernels_it_launched(workload):
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    workload.step(a, b)
    torch.cuda.synchronize()
    with hookmagic.capture() as trace:
        for _ in range(3):
            workload.step(a, b)
        torch.cuda.synchronize()
    table = trace.lines()
    k = trace.kernels
    assert len(k) and int(table["gpu_ns"].sum()) == int(k.loc[k.stack_id >= 0, "duration_ns"].sum())
    gemm, relu, total = _row(table, GEMM), _row(table, RELU), _row(table, SUM)
    assert gemm["launches"] >= 3 and relu["launches"] == 3 and total["launches"] >= 3
    assert re.search(r"elementwise|relu|clamp", relu["kernels"], re.I), relu["kernels"]
    assert "reduce" in total["kernels"].lower(), total["kernels"]
    names = {line: {n.rsplit(" ×", 1)[0] for n in _row(table, line)["kernels"].split("; ")}
             for line in (GEMM, RELU, SUM)}
    assert not names[GEMM] & (names[RELU] | names[SUM]), names   # each line its own kernels
    assert table.iloc[0]["user"] and table.iloc[0]["file"].endswith("lines_workload.py")
    # the source view puts each line's numbers beside its text
    view = trace.lines(workload.step)
    (block,) = view.blocks
    assert (block.first, block.last, block.origin) == (4, 7, "disk")
    rows = block.rows.set_index("line")
    for line in (GEMM, RELU, SUM):
        assert rows.loc[line, "inclusive_ns"] == _row(table, line)["inclusive_ns"] > 0
    assert "c = a @ b" in str(view)


def test_module_forward_and_backward_lines(workload):
    net = workload.Net().cuda()
    x = torch.randn(512, 256, device="cuda", requires_grad=False)
    workload.train(net, x)
    torch.cuda.synchronize()
    with hookmagic.capture() as trace:
        workload.train(net, x)
        torch.cuda.synchronize()
    table = trace.lines()
    k = trace.kernels
    assert float((k.stack_id >= 0).mean()) >= 0.99
    assert _row(table, FC)["launches"] >= 1 and _row(table, GELU)["launches"] >= 1
    back = _row(table, BACKWARD)
    assert back["launches"] >= 2            # the backward pass runs on autograd's thread
    # the forward's kernels are under the train() line that called net(x)
    assert _row(table, LOSS)["inclusive_ns"] >= _row(table, FC)["gpu_ns"] + _row(table, GELU)["gpu_ns"]
    folded = trace.flame()
    labels = set(folded.data[0].labels)
    assert "Module._call_impl" not in labels and any("(Linear)" in s for s in labels)


def test_line_magic_and_dash_f(workload, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "hookmagic")
    try:
        ip.user_ns.update(a=torch.randn(512, 512, device="cuda"),
                          b=torch.randn(512, 512, device="cuda"), w=workload)
        ip.run_cell("w.step(a, b); torch_sync = __import__('torch').cuda.synchronize()")
        ip.run_cell("%cudahook --no-report -v t -f w.step w.step(a, b).item()")
        out = capsys.readouterr().out
        t = ip.user_ns["t"]
        assert len(t.kernels) >= 3 and "GPU time by line of `step`" in out
        assert re.search(r"^\s+5\s+\d+\s+\S+ \S+\s+\S+ \S+\s+[\d.]+\s+c = a @ b$", out, re.M), out
    finally:
        ip.run_line_magic("unload_ext", "hookmagic")
