"""Small deterministic GPU workloads shared by the GPU tests (imported lazily: needs torch)."""
from __future__ import annotations

import torch


def gemms(n: int = 2048, repeats: int = 20) -> None:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    for _ in range(repeats):
        a = torch.tanh(a @ b)
    torch.cuda.synchronize()


def launch_tiny(count: int, x: torch.Tensor | None = None) -> torch.Tensor:
    """``count`` kernels exactly when ``x`` is given (allocating it launches one more)."""
    if x is None:
        x = torch.zeros(16, device="cuda")
    for _ in range(count):
        x.add_(1)
    torch.cuda.synchronize()
    return x


def mixed(steps: int = 10) -> None:
    """Kernels, copies both ways, memsets and allocations of several sizes."""
    conv = torch.nn.Conv2d(3, 16, 3, padding=1).cuda()
    for i in range(steps):
        host = torch.randn(4 + i, 3, 32, 32).pin_memory()
        x = host.cuda(non_blocking=True)
        y = conv(x).relu().sum(dim=(2, 3))
        z = torch.zeros(1024 * (i + 1), device="cuda")
        y.cpu()
        del x, z
    torch.cuda.synchronize()
