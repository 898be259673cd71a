"""Adds (or refreshes) the "GPU time by line" section of notebooks/01_cudahook.ipynb.

    python tools/make_notebook_01_lines.py [RECORDING FUNCTION]

Inserts the section's cells after the report cell (replacing an earlier copy of them, found by
their ``hookmagic_section: lines`` metadata), runs the whole notebook in a fresh kernel (cwd
notebooks/, as tests/notebook_runner.py does) and keeps the outputs of the section's cells only,
so every other cell stays byte for byte as it was. RECORDING is a bundled recording
(default transformer_training), FUNCTION the function of tools/make_recordings.py that ran
it (default: the recording's name).
"""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_cudahook.ipynb"
TAG = {"hookmagic_section": "lines"}


def cells(recording: str, function: str) -> list:
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    out = [
        md("## Which line, which module: `trace.lines()` and the folded flame graph\n\n"
           "`trace.lines()` charges every kernel to the line of *your* code that launched it (the\n"
           "innermost frame outside torch, other installed packages and hookmagic: `gpu_ns`,\n"
           "`launches`) and to every line on its stack (`inclusive_ns`). `trace.lines(func)` shows a\n"
           "function's source with the GPU time beside each line, as line_profiler's `%lprun` shows\n"
           "CPU time. On a live capture, `%cudahook -f train_step train_step(batch)` runs one\n"
           "statement and shows both. Kernels that autograd's engine thread runs during\n"
           "`backward()` are charged to the line that called `backward()`. The capture below was\n"
           "recorded on a GPU: " + f"`{recording}`."),
        code("# NBVAL_CHECK_OUTPUT\n"
             f'name = "{recording}"\n'
             "step = hookmagic.recordings.load(name)\n"
             'print("recorded on:", step.meta["recorded_on"])\n'
             "lines = step.lines()\n"
             "a = lines.attrs\n"
             "print(f\"{a['attributed_kernels']:,} of {a['kernels']:,} kernels on a source line \"\n"
             "      f\"({a['attributed_ns'] / 1e6:.3f} of {a['total_ns'] / 1e6:.3f} ms of GPU time)\")\n"
             'mine = lines[lines["user"]]\n'
             'print(mine[["line", "function", "launches", "gpu_ns", "inclusive_ns"]].to_string(index=False))'),
        md("The same numbers beside the source of the function that ran the training step (the\n"
           "source text is stored in the recording when it was made with it, else read from disk,\n"
           "else the view says it is unavailable):"),
        code(f'step.lines("{function}")'),
        md("The stacks name the `nn.Module` each kernel ran in (`linear1 (Linear)`, as\n"
           "`named_modules()` names it) where torch.nn's `Module._call_impl` frames were, and\n"
           "backward kernels carry a `backward of <module/op>` frame. The flame graph also folds\n"
           "decorator wrappers and TorchDynamo glue into their callers, so the module names sit right\n"
           "under the line that called the model; `step.flame(raw=True)` shows every frame."),
        code("# NBVAL_CHECK_OUTPUT\n"
             "from hookmagic.analysis.flame import flame_tree\n\n"
             "raw, folded = flame_tree(step, fold=False), flame_tree(step)\n"
             "print(f\"{len(raw):,} nodes with every frame, {len(folded):,} folded\")\n"
             "named = folded.loc[folded[\"file_line\"].str.startswith(\"<module>\"), \"label\"]\n"
             "modules = sorted({m for m in named if not m.startswith(\"backward of \")})\n"
             "backward = sorted({m for m in named if m.startswith(\"backward of \")})\n"
             "print(f\"{len(modules)} module nodes, e.g.\", \", \".join(modules[:6]))\n"
             "print(f\"{len(backward)} backward nodes, e.g.\", \", \".join(backward[:4]))"),
        code("step.flame()"),
    ]
    for c in out:
        c.metadata.update(TAG)
    return out


def main() -> int:
    recording = sys.argv[1] if len(sys.argv) > 1 else "transformer_training"
    function = sys.argv[2] if len(sys.argv) > 2 else recording
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells = [c for c in nb.cells if c.metadata.get("hookmagic_section") != "lines"]
    (at,) = [i for i, c in enumerate(nb.cells) if "report_widget(trace)" in c.source]
    nb.cells[at + 1:at + 1] = cells(recording, function)
    run = copy.deepcopy(nb)
    os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    os.environ.pop("PLOTLY_RENDERER", None)
    NotebookClient(run, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    for mine, ran in zip(nb.cells, run.cells):
        if mine.metadata.get("hookmagic_section") == "lines" and mine.cell_type == "code":
            mine.outputs, mine.execution_count = ran.outputs, ran.execution_count
            errors = [o for o in ran.outputs if o.output_type == "error"]
            if errors:
                raise SystemExit(f"{errors[0].ename}: {errors[0].evalue}")
    nbformat.write(nb, NOTEBOOK)
    print(f"{NOTEBOOK.relative_to(ROOT)}: lines section on {recording} ({function})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
