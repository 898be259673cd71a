"""One accuracy criterion for every GPU kernel test that compares against torch.

A result passes when, element by element,

    |ours - ref| <= 2 * (torch's largest error) + u_out * max(|ref|_max, 1) + u_acc * sqrt(n) * magnitude

- ``ref`` is computed in a wider type (float64 for FP32 kernels, float32 for FP16/BF16);
- the first term is FlashAttention's criterion: no worse than twice what torch's own kernel makes;
- the second is one unit of rounding of the output type;
- the third is the probabilistic rounding-error bound of a length-``n`` sum in the FP32
  accumulator (Higham & Mary, SIAM J. Sci. Comput. 2019): sums in a different order than
  cuBLAS (K up to 4095 here) differ from it by about sqrt(n) units, not one. ``magnitude`` is
  the sum of the terms' absolute values (|A|@|B| for a GEMM, |ref| for a row reduction).

A wrong kernel (a missed tile, a bad index, a lost row) is off by O(1), hundreds of times
these bounds, so the criterion still fails for every real bug.
"""
from __future__ import annotations

import math

import torch

EPS = {torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
ACCUMULATOR_EPS = 2.0 ** -24   # unit roundoff u of FP32, as in the bound


def assert_within_rounding(ours: torch.Tensor, theirs: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype,
                           *, n: int, magnitude: torch.Tensor | None = None) -> None:
    """Assert ``ours`` is as close to ``ref`` as rounding allows (criterion in the module docstring)."""
    assert ours.shape == ref.shape, f"shape {tuple(ours.shape)} != {tuple(ref.shape)}"
    if ours.numel() == 0:
        return
    ref = ref.double()
    err = (ours.double() - ref).abs()
    terr = (theirs.double() - ref).abs().max().item()
    mag = ref.abs() if magnitude is None else magnitude.double()
    bound = 2 * terr + EPS[dtype] * max(ref.abs().max().item(), 1.0) + ACCUMULATOR_EPS * math.sqrt(max(n, 1)) * mag
    excess = (err - bound).max().item()
    if excess > 0:
        worst = int((err - bound).argmax())
        raise AssertionError(f"error {err.flatten()[worst].item():.3g} > bound {bound.flatten()[worst].item():.3g} "
                             f"at flat index {worst} (max error {err.max().item():.3g}, torch's {terr:.3g}, n={n})")


#: torch's own form of each fused activation of hookmagic.kernels.gemm (the reference side)
TORCH_ACTIVATIONS = {None: lambda x: x, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
                     "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh")}
