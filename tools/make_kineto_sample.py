"""Record a real torch.profiler (Kineto) trace for the importer's tests and the views.

    python tools/make_kineto_sample.py --out hookmagic/data/recordings/kineto_resnet18.json.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="hookmagic/data/recordings/kineto_resnet18.json.gz")
    args = parser.parse_args()
    import torch
    import torchvision
    from torch.profiler import ProfilerActivity, profile, record_function

    model = torchvision.models.resnet18().cuda().eval()
    data = torch.randn(8, 3, 224, 224, device="cuda")
    with torch.no_grad():
        model(data)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     with_stack=True, record_shapes=True) as prof:
            for step in range(2):
                with record_function(f"step {step}"):
                    model(data).argmax(-1).cpu()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with path.open("rb") as src, gzip.open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
    print(out, len(events["traceEvents"]), "events", out.stat().st_size // 1024, "KiB")


if __name__ == "__main__":
    main()
