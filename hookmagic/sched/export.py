"""Export a chosen policy for serving systems: Triton model configuration and Ray Serve batching.

Only what the target can express is emitted as configuration; what it cannot (EDF, AIMD,
camera fairness, cross-model limits in Ray) is listed as a comment or a note, never dropped
silently.
"""
from __future__ import annotations

import keyword
import re
from typing import Any, Sequence

from hookmagic.common.errors import InvalidArgument

from .models import ModelSpec
from .policies import Policy

__all__ = ["triton_config", "ray_serve_params", "ray_serve_snippet"]


#: what a model name may hold when it is written into a config file or Python source: Triton
#: takes it as a folder name and Ray Serve as part of a class name
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def _checked(what: str, value: Any) -> str:
    """``value`` when it is a plain name (letters, digits, ``_``, ``.``, ``-``); anything else
    (quotes, newlines, braces) could write its own lines into the exported text."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidArgument(f"{what} {str(value)[:60]!r} cannot be exported: use letters, digits, "
                              "'_', '.' or '-' (at most 128)")
    return value


def _instances(policy: Policy, model: str) -> int:
    return sum(1 for st in policy.streams if st.models is None or model in st.models)


def triton_config(model: str, policy: Policy, *, spec: ModelSpec | None = None,
                  priorities: Sequence[int] = (0,), platform: str = "pytorch_libtorch",
                  kind: str = "KIND_GPU") -> str:
    """Triton ``config.pbtxt`` text for ``model`` under ``policy``.

    ``priorities``: the request priorities this model receives (ours: 0 most urgent); they map
    to Triton levels ``p + 1`` (Triton's 1 is the highest), with the least urgent as default.
    Instance count is the number of streams allowed to run the model. Cross-model
    :class:`Limit` s become rate-limiter resources (start tritonserver with the resource counts
    given in the comment).
    """
    model, platform, kind = (_checked("model name", model), _checked("platform", platform),
                             _checked("instance kind", kind))
    b = policy.batching_for(model)
    a = policy.adaptive_for(model)
    q = policy.queue_for(model)
    max_batch = b.max_batch if spec is None else min(b.max_batch, spec.max_batch)
    if a is not None:
        max_batch = max(max_batch, min(a.max_batch, spec.max_batch if spec else a.max_batch))
    lines = [f'name: "{model}"', f'platform: "{platform}"', f"max_batch_size: {max_batch}",
             "dynamic_batching {"]
    if b.preferred:
        lines.append(f"  preferred_batch_size: [ {', '.join(str(p) for p in b.preferred)} ]")
    lines.append(f"  max_queue_delay_microseconds: {int(round(b.max_delay_ms * 1000))}")
    levels = sorted({int(p) for p in priorities})
    if policy.order == "priority" and (len(levels) > 1 or levels != [0]):
        lines.append(f"  priority_levels: {max(levels) + 1}")
        lines.append(f"  default_priority_level: {max(levels) + 1}")
    if q.max_size or q.timeout_ms is not None:
        lines.append("  default_queue_policy {")
        if q.timeout_ms is not None:
            lines.append(f"    timeout_action: {'DELAY' if q.action == 'delay' else 'REJECT'}")
            lines.append(f"    default_timeout_microseconds: {int(round(q.timeout_ms * 1000))}")
            lines.append("    allow_timeout_override: false")
        if q.max_size:
            lines.append(f"    max_queue_size: {int(q.max_size)}")
        lines.append("  }")
    lines.append("}")
    count = _instances(policy, model)
    group = [f"  {{ count: {count} kind: {kind}"]
    limits = [(j, lim) for j, lim in enumerate(policy.limits) if model in lim.models]
    if limits:
        res = " ".join(f'{{ name: "limit{j}" global: true count: 1 }}' for j, _ in limits)
        group.append(f"    rate_limiter {{ resources [ {res} ] }}")
    lines += ["instance_group [", "\n".join(group) + " }", "]"]
    notes = []
    if limits:
        notes.append("start tritonserver with --rate-limit=execution_count " + " ".join(
            f"--rate-limit-resource=limit{j}:{lim.max_concurrent}" for j, lim in limits))
    if policy.order == "edf":
        notes.append("Triton has no earliest-deadline-first order or early drop; set per-request "
                     "timeouts (allow_timeout_override) from each request's SLO instead")
    if a is not None:
        notes.append("Triton has no adaptive (AIMD) batch size; max_batch_size is the AIMD ceiling")
    if policy.fairness is not None:
        notes.append("Triton has no per-camera fairness; DeepStream nvstreammux does round robin")
    if any(st.priority != policy.streams[0].priority for st in policy.streams):
        notes.append("Triton does not expose CUDA stream priorities; the nearest is "
                     "rate_limiter { priority } per instance group")
    lines += [f"# note: {n}" for n in notes]
    return "\n".join(lines) + "\n"


def ray_serve_params(model: str, policy: Policy) -> dict[str, Any]:
    """Arguments for ``@serve.batch`` and the deployment, with ``notes`` on what Ray lacks."""
    b = policy.batching_for(model)
    q = policy.queue_for(model)
    count = _instances(policy, model)
    out: dict[str, Any] = {
        "max_batch_size": b.max_batch,
        "batch_wait_timeout_s": b.max_delay_ms / 1e3,
        "max_concurrent_batches": count,
    }
    if q.max_size:
        # Ray bounds the queue per replica through max_queued_requests
        out["max_queued_requests"] = int(q.max_size)
    notes = []
    if policy.order != "fifo":
        notes.append(f"Ray Serve has no per-request priority; '{policy.order}' order is not expressible")
    if q.timeout_ms is not None:
        notes.append("no queue timeout in @serve.batch; use request_timeout_s on the HTTP proxy")
    if b.preferred:
        notes.append("no preferred batch sizes; batch_size_fn can cost batches instead")
    if policy.adaptive_for(model) is not None:
        notes.append("AIMD: call set_max_batch_size() at run time from your own controller")
    out["notes"] = notes
    return out


def ray_serve_snippet(model: str, policy: Policy) -> str:
    """Python source of a Ray Serve deployment using :func:`ray_serve_params`."""
    p = ray_serve_params(_checked("model name", model), policy)
    cls = "".join(w.capitalize() for w in re.split(r"[-_.]", model)) or "Model"
    if not cls.isidentifier() or keyword.iskeyword(cls):
        cls = f"Model{cls}"   # a name that starts with a digit
    queued = (f", max_queued_requests={p['max_queued_requests']}" if "max_queued_requests" in p else "")
    notes = "".join(f"# note: {n}\n" for n in p["notes"])
    return (f"{notes}from ray import serve\n\n\n"
            f"@serve.deployment(max_ongoing_requests={p['max_batch_size'] * p['max_concurrent_batches'] * 2}{queued})\n"
            f"class {cls}:\n"
            f"    @serve.batch(max_batch_size={p['max_batch_size']}, "
            f"batch_wait_timeout_s={p['batch_wait_timeout_s']:g}, "
            f"max_concurrent_batches={p['max_concurrent_batches']})\n"
            f"    async def __call__(self, requests):\n"
            f"        return self.model(requests)\n")
