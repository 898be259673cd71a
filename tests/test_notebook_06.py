"""notebooks/06_pipeline.ipynb runs top to bottom without a GPU: a live CPU pipeline (part 1) and
the replay of the pipelines recorded on a GPU machine (part 2). (The same execution
is checked as nbval checks it, every `# NBVAL_CHECK_OUTPUT` cell against the saved outputs:
tests/notebook_runner.py.)

The expected strings of part 2 are computed here from the recordings themselves (and the
benchmark's results_p*.json), so re-recording on another GPU or date does not break the test."""
from __future__ import annotations

import json

import pandas as pd

from tests.notebook_runner import NOTEBOOKS, output_text as _text, run_notebook

PLOTLY = "application/vnd.plotly.v1+json"
REC = NOTEBOOKS / "recordings" / "pipeline"


def test_pipeline_notebook_replays_the_gpu_recordings(monkeypatch):
    from hookmagic.pipeline import load_run

    code = run_notebook("06_pipeline.ipynb", monkeypatch)
    text = "\n".join(_text(c) for c in code)
    assert "synthetic_clip.mp4: h264 640x360 90 frames" in text        # part 1 ran live
    recs = {p.name[:-len(".hmpipe")]: load_run(p) for p in sorted(REC.glob("*.hmpipe"))}
    assert {"resnet50_fp16_gpupre", "bound_decode", "bound_preprocess", "bound_infer",
            "bound_infer_fp16", "adaptive_oom"} <= set(recs)
    results = [json.loads(p.read_text()) for p in sorted(REC.glob("results_p*.json"))]
    m = results[0]["machine"]
    # every recording listed with its own label (GPU, driver, date)
    for name, r in recs.items():
        assert r.meta["recorded_on"]["gpu"] in r.label and r.meta["recorded_on"]["driver"] in r.label
        line = next(ln for ln in text.splitlines() if ln.startswith(name + " "))
        assert r.label in line and f"{r.throughput()['fps']:.1f} fps" in line
    assert f"machine: {m['gpu']}, driver {m['driver']}" in text and m["date"] in text
    # per-frame stage times with the GPU's own (CUDA-event) times
    st = recs["resnet50_fp16_gpupre"].stages()
    assert f"{st.loc['infer', 'gpu_p50_ms']:.3f}" in text
    # bottleneck() names the stage each constructed pipeline was built to be limited by
    for name, want in {"bound_decode": "decode", "bound_preprocess": "preprocess", "bound_infer": "infer"}.items():
        assert recs[name].bottleneck().stage == want
        assert f"built to be {want!r}, bottleneck() says {want!r} -> right" in text
    # what-if against the measured FP32 -> FP16 change, replayed and as each process computed it
    b32, b16 = recs["bound_infer"], recs["bound_infer_fp16"]
    k = b32.stages().loc["infer", "mean_ms"] / b16.stages().loc["infer", "mean_ms"]
    w = b32.what_if("infer", k)
    pred = w.iloc[-1]["fps"] / w.iloc[1]["fps"] * b32.throughput()["fps"]
    assert f"predicted {pred:.1f} fps, measured {b16.throughput()['fps']:.1f} fps" in text
    for d in results:
        wi = next(r for r in d["results"] if r["config"] == "what_if_check")
        assert f"{wi['predicted_fps']:.3f}" in text and f"{wi['measured_fps']:.3f}" in text
    # adaptive batching: every out-of-memory split recorded, no frame lost
    a = recs["adaptive_oom"]
    dec = pd.DataFrame(a.meta["adaptive_decisions"])
    n_oom = int((dec.action == "oom_split").sum())
    assert n_oom >= 1 and f"out-of-memory splits: {n_oom}" in text
    assert f"'done': {len(a.frame_outcomes)}" in text
    titles = [o["data"][PLOTLY]["layout"]["title"]["text"] for c in code for o in c.outputs
              if PLOTLY in o.get("data", {})]
    assert any(t.startswith("Adaptive batch size") and a.label in t for t in titles), titles
    assert any(t.startswith("Per-frame stages") and recs["resnet50_fp16_gpupre"].label in t for t in titles)
    assert (REC / "pipeline.md").read_text().splitlines()[0] in text
