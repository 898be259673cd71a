"""A small DDP training job for the multi-rank captures: run it under torchrun.

    HOOKMAGIC_CAPTURE_DIR=/tmp/run HOOKMAGIC_CAPTURE_STEPS=6:10 \\
        torchrun --standalone --nproc-per-node 2 lab/multirank/multirank_ddp.py \\
        --steps 12 --slow-rank 1 --slow-ms 20

The script knows nothing of hookmagic beyond ``import hookmagic``: the capture comes from the
HOOKMAGIC_CAPTURE_* variables (hookmagic.cupti.autocapture). A transformer encoder
(4 layers, d_model 512, batch 16 x 128 tokens, fp32) trains with NCCL all-reduce of its
gradients. ``--slow-rank R --slow-ms S`` sleeps S ms on rank R before each forward pass: the
deliberate straggler. Each rank writes ``truth_rank=<N>.json`` beside the traces: the sleeps it
really took (time.perf_counter around time.sleep) and its step times, the independent
reference the straggler analysis is checked against.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import hookmagic  # noqa: F401  (starts the capture the environment asks for)
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--out", default=os.environ.get("HOOKMAGIC_CAPTURE_DIR", "."))
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU: a smoke test without GPUs")
    args = ap.parse_args()

    dist.init_process_group("gloo" if args.cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev = "cpu" if args.cpu else "cuda"
    if not args.cpu:
        torch.cuda.set_device(local)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                             batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, num_layers=4),
                                torch.nn.Linear(512, 512)).to(dev)
    model = DDP(model, device_ids=None if args.cpu else [local])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch, seq = (2, 16) if args.cpu else (16, 128)
    x = torch.randn(batch, seq, 512, device=dev)
    target = torch.randn(batch, seq, 512, device=dev)

    sleeps, steps = [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        slept = 0.0
        if rank == args.slow_rank and args.slow_ms > 0:
            s0 = time.perf_counter()
            time.sleep(args.slow_ms / 1000)
            slept = time.perf_counter() - s0
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()          # the capture's step boundary (an optimizer-step hook)
        value = loss.item()  # the usual per-step logging, and a sync
        sleeps.append(slept)
        steps.append(time.perf_counter() - t0)
    if not args.cpu:
        torch.cuda.synchronize()
    dist.barrier()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"truth_rank={rank}.json"), "w") as fh:
        json.dump({"rank": rank, "world_size": world, "slow_rank": args.slow_rank,
                   "slow_ms": args.slow_ms, "sleep_s": sleeps, "step_s": steps,
                   "last_loss": value,
                   "gpu": "cpu" if args.cpu else torch.cuda.get_device_name(local),
                   "torch": torch.__version__,
                   "nccl": "" if args.cpu else ".".join(map(str, torch.cuda.nccl.version()))},
                  fh, indent=1)
    dist.destroy_process_group()
    print(f"rank {rank}/{world}: {args.steps} steps, median step "
          f"{sorted(steps)[len(steps) // 2] * 1e3:.1f} ms, slept {sum(sleeps) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
