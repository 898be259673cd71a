"""Why ranges from the ``nvtx`` package did not arrive in a capture (H100, 2026-11-26), while
``torch.cuda.nvtx`` ranges did: run on the GPU machine in a fresh interpreter.

The package creates its domains through ``nvtxDomainCreateA`` and asks ``nvtxDomainIsEnabled``
whether a tool listens; a disabled domain becomes a no-op ``DummyDomain`` (cached per name for
the process). This prints what the package sees once CUPTI is injected into NVTX by
``capture(nvtx=True)``, and which ranges (default domain, a named domain, torch's) arrive."""
from __future__ import annotations

import json

import torch

import hookmagic

x = torch.zeros(1 << 20, device="cuda")
torch.cuda.synchronize()
report: dict = {}
with hookmagic.capture(nvtx=True) as trace:
    torch.cuda.nvtx.range_push("torch range")
    x.add_(1)
    torch.cuda.nvtx.range_pop()
    import nvtx
    from nvtx._lib import lib

    report["nvtx_version"] = getattr(nvtx, "__version__", "?")
    report["default_domain_enabled"] = lib.DomainHandle(None).enabled()
    report["named_domain_enabled"] = lib.DomainHandle("hookmagic-check").enabled()
    report["named_domain_type"] = type(nvtx.get_domain("hookmagic-check")).__name__
    with nvtx.annotate("package default domain"):
        x.add_(1)
    with nvtx.annotate("package named domain", domain="hookmagic-check"):
        x.add_(1)
    torch.cuda.synchronize()
r = trace.ranges
report["ranges"] = r[r.source == "nvtx"]["name"].tolist() if len(r) else []
report["warnings"] = trace.meta.get("warnings", [])
print(json.dumps(report, indent=1))
