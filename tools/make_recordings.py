"""Record real captures on a GPU for the no-GPU mode (demo, notebooks, CI tests).

    python tools/make_recordings.py --out hookmagic/data/recordings

Each recording is a ``Trace.save`` file labelled with the GPU, driver and date it was made on
(``meta["recorded_on"]``). Kept small: a few MB in all.
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path


def _recorded_on() -> str:
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    name = pynvml.nvmlDeviceGetName(h)
    driver = pynvml.nvmlSystemGetDriverVersion()
    name = name if isinstance(name, str) else name.decode()
    driver = driver if isinstance(driver, str) else driver.decode()
    return f"{name}, driver {driver}, {dt.date.today().isoformat()}"


def resnet_inference_churn():
    """A torchvision ResNet-18 inference loop whose batch size changes every step, so the
    caching allocator keeps growing and reusing blocks."""
    import torch
    import torchvision

    import hookmagic

    model = torchvision.models.resnet18().cuda().eval()
    with torch.no_grad():
        for step, batch in enumerate([1, 8, 3, 32, 16, 2, 24, 64, 5, 12]):
            with hookmagic.range(f"step {step} (batch {batch})"):
                with hookmagic.range("preprocess"):
                    images = torch.rand(batch, 3, 224, 224).pin_memory().cuda(non_blocking=True)
                    images = (images - 0.45) / 0.225
                with hookmagic.range("model"):
                    logits = model(images)
                with hookmagic.range("postprocess"):
                    top5 = logits.softmax(-1).topk(5).indices.cpu()
    del top5
    torch.cuda.synchronize()
    return model


def mlp_training():
    """A small MLP trained for a few steps with AdamW: forward, backward (from autograd's own
    thread), optimiser kernels."""
    import torch

    import hookmagic

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).cuda()
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(256, 1024, device="cuda")
    for step in range(8):
        with hookmagic.range(f"train step {step}"):
            loss = (model(data) - data).pow(2).mean()
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
    torch.cuda.synchronize()
    return model


def transformer_training():
    """A torch.nn.TransformerEncoderLayer (d_model 512, 8 heads, fp16, batch 8, sequence 512)
    trained for two steps with SGD: forward, backward on autograd's engine thread (attributed to
    the line that called backward() and to each module's or op's backward), optimiser kernels."""
    import torch

    import hookmagic

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True).cuda().half()
    optimiser = torch.optim.SGD(layer.parameters(), lr=1e-3)
    x = torch.randn(8, 512, 512, device="cuda", dtype=torch.half)
    for step in range(2):
        with hookmagic.range(f"train step {step}"):
            loss = layer(x).float().square().mean()
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
    torch.cuda.synchronize()
    return layer


def cupy_pipeline() -> None:
    """A CuPy signal pipeline: host-to-device upload, FFT filtering, elementwise maths,
    reductions and a sort, then a download."""
    import cupy as cp
    import numpy as np

    import hookmagic

    rng = np.random.default_rng(0)
    for block in range(6):
        with hookmagic.range(f"block {block}"):
            host = rng.standard_normal((64, 16384), dtype=np.float32)
            signal = cp.asarray(host)
            spectrum = cp.fft.rfft(signal, axis=1)
            spectrum[:, 2048:] = 0
            filtered = cp.fft.irfft(spectrum, n=signal.shape[1], axis=1)
            energy = cp.sqrt((filtered ** 2).mean(axis=1))
            order = cp.argsort(energy)
            result = cp.asnumpy(filtered[order[-4:]])
    cp.cuda.Device().synchronize()
    del result


def _release_cached_memory() -> None:
    if "torch" in sys.modules:
        sys.modules["torch"].cuda.empty_cache()
    if "cupy" in sys.modules:
        sys.modules["cupy"].get_default_memory_pool().free_all_blocks()


RECORDINGS = {
    "resnet18_inference_churn": resnet_inference_churn,
    "mlp_training": mlp_training,
    "cupy_pipeline": cupy_pipeline,
    "transformer_training": transformer_training,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="hookmagic/data/recordings")
    parser.add_argument("--only", action="append", choices=sorted(RECORDINGS),
                        help="record only this one (repeatable); default: all")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import hookmagic

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    recorded_on = _recorded_on()
    for name, work in RECORDINGS.items():
        if args.only and name not in args.only:
            continue
        work()  # warm up: module loading and cuBLAS/cuFFT plans outside the recording
        _release_cached_memory()  # so the recording shows the allocator growing again
        with hookmagic.capture(label=name, allocator_history=True) as trace:
            # the model it returns is alive here when the capture ends: stacks name its modules
            # by their qualified names (a model already gone is named by classes only)
            model = work()
        del model
        trace.meta["recorded_on"] = recorded_on
        trace.meta["description"] = (work.__doc__ or "").strip().replace("\n", " ")
        trace.meta["host"] = "gpu-machine"
        trace.store_sources()  # the script's source text: trace.lines() shows it anywhere
        path = trace.save(out / f"{name}.hmtrace")
        attributed = float((trace.kernels.stack_id >= 0).mean()) if len(trace.kernels) else 0.0
        print(name, len(trace.kernels), "kernels", f"{attributed:.1%} with a stack", len(trace.memory), "memory events",
              Path(path).stat().st_size // 1024, "KiB", trace.meta["status"], trace.meta["warnings"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
