"""Ray on the 2-GPU machine: two GPU actors capture with hookmagic.ray.capture, the
driver gathers the traces (run by benchmarks/gpu/multirank.sh when `ray` imports there).

    python lab/multirank/multirank_ray.py --out /tmp/ray_actors
"""
from __future__ import annotations

import argparse
import os
import shutil

import ray

import hookmagic.ray as hray


@ray.remote(num_gpus=1)
class GpuWorker:
    def run(self, steps: int) -> dict:
        import torch

        x = torch.randn(4096, 4096, device="cuda")
        with hray.capture("gpu", nvml=False) as trace:
            for _ in range(steps):
                x = torch.tanh(x @ x * 1e-3)
            torch.cuda.synchronize()
        return {"status": trace.status, "kernels": len(trace.kernels),
                "gpu": torch.cuda.get_device_name(0)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    ray.init(num_gpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        workers = [GpuWorker.remote() for _ in range(2)]
        print(ray.get([w.run.remote(args.steps) for w in workers], timeout=120))
        shutil.rmtree(args.out, ignore_errors=True)
        os.makedirs(args.out)
        with hray.gather("gpu", dir=args.out, timeout_s=60) as ts:
            print(ts)
            print(ts.ranks[["rank", "status", "host", "gpu_uuid", "kernels"]].to_string())
        hray.shutdown_collector()
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
