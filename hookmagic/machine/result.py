"""The doctor's answer: :class:`Check` (one piece of the machine) and :class:`DoctorReport`
(every check, each GPU, the kernels each can run, the extras), shown as text in a terminal, as
a table in Jupyter, as JSON for scripts, and as a :class:`~hookmagic.common.results.Headline`."""
from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field
from typing import Any

from hookmagic.common.results import Headline

#: what a check's ``status`` may be: present and usable; absent (``fix`` says how to add it);
#: present with a caveat; could not be determined; a fact with nothing to fix
STATUSES = ("ok", "missing", "warning", "unknown", "info")


@dataclass
class Check:
    """One piece of the machine: ``key`` (stable, for code), ``name`` (for people), ``status``
    (one of :data:`STATUSES`), ``detail`` (what was found, where, or why not), ``fix`` (what to
    do, where something is missing) and ``data`` (the probe's own fields, JSON-ready)."""

    key: str
    name: str
    status: str
    detail: str
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class DoctorReport:
    """What this machine can do for hookmagic, and why not.

    ``checks`` in report order; ``gpus`` one dict per GPU (name, compute capability, ``arch``
    like ``sm_90``, memory); ``kernels`` one dict per kernel variant with, per GPU, whether it
    runs there and why not; ``extras`` one dict per optional extra (installed, packages, the
    command that adds it); ``verdict`` one sentence: can ``%%cudahook`` capture here.
    """

    checks: list[Check]
    gpus: list[dict[str, Any]] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    extras: list[dict[str, Any]] = field(default_factory=list)
    verdict: str = ""

    def __getitem__(self, key: str) -> Check:
        for check in self.checks:
            if check.key == key:
                return check
        from hookmagic.common.errors import InvalidArgument

        raise InvalidArgument(f"no check {key!r}; the checks are: "
                              f"{', '.join(c.key for c in self.checks)}")

    def missing(self) -> list[Check]:
        """The checks whose status is ``missing``, each with its fix."""
        return [c for c in self.checks if c.status == "missing"]

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON-ready data (``hookmagic doctor --json`` prints this)."""
        return {"verdict": self.verdict,
                "checks": {c.key: asdict(c) for c in self.checks},
                "gpus": self.gpus, "kernels": self.kernels, "extras": self.extras}

    def summary(self) -> Headline:
        """The headline: each check's status and detail; the fixes as notes."""
        values = {c.key: f"{c.status}: {c.detail}" for c in self.checks}
        notes = [self.verdict] + [f"{c.name}: {c.fix}" for c in self.checks if c.fix]
        return Headline("hookmagic doctor", values, {}, notes)

    def text(self) -> str:
        """The report for a terminal."""
        width = max(len(c.name) for c in self.checks) if self.checks else 0
        lines = ["hookmagic doctor: what this machine can do, and why not", ""]
        for c in self.checks:
            lines.append(f"  {c.status:<8} {c.name:<{width}}  {c.detail}")
            if c.fix:
                lines.append(f"  {'':<8} {'':<{width}}  fix: {c.fix}")
        lines += ["", "GPUs:"]
        lines += [f"  {_gpu_line(g)}" for g in self.gpus] or ["  (none)"]
        lines += ["", "Kernels (hookmagic.kernels), by GPU:"]
        lines += _kernel_lines(self.gpus, self.kernels)
        lines += ["", "Optional extras:"]
        ewidth = max((len(e["extra"]) for e in self.extras), default=0)
        for e in self.extras:
            state = {True: "installed", False: "missing", None: "unknown"}[e["installed"]]
            more = f"; add: {e['install']}" if e["installed"] is not True else ""
            lost = f" (not installed: {', '.join(e['missing'])})" if e.get("missing") else ""
            lines.append(f"  {state:<9} {e['extra']:<{ewidth}}  {e['purpose']}{lost}{more}")
        lines += ["", self.verdict]
        return "\n".join(lines)

    __str__ = text

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(c.status)}</td><th>{html.escape(c.name)}</th>"
            f"<td>{html.escape(c.detail)}{'<br><i>fix: ' + html.escape(c.fix) + '</i>' if c.fix else ''}"
            f"</td></tr>" for c in self.checks)
        return (f"<div class='hm-doctor'><b>hookmagic doctor</b><table>{rows}</table>"
                f"<div>{html.escape(self.verdict)}</div></div>")


def _gpu_line(g: dict[str, Any]) -> str:
    memory = f", {g['memory_bytes'] / 2**30:.1f} GiB" if g.get("memory_bytes") else ""
    cc = g.get("compute_capability")
    arch = f"compute capability {cc[0]}.{cc[1]} ({g['arch']}, {g['architecture']})" if cc else \
        "compute capability unknown"
    return f"{g['index']}: {g['name'] or '(unnamed)'}, {arch}{memory}"


def _kernel_lines(gpus: list[dict[str, Any]], kernels: list[dict[str, Any]]) -> list[str]:
    if not kernels:
        return ["  (hookmagic.kernels could not be listed)"]
    if not gpus:
        needs: dict[str, list[str]] = {}
        for k in kernels:
            needs.setdefault(k["needs"], []).append(f"{k['op']}:{k['variant']}")
        return ["  no GPU here; what each variant needs:"] + [
            f"    {need}: {', '.join(names)}" for need, names in sorted(needs.items())]
    lines = []
    for g in gpus:
        runs = [f"{k['op']}:{k['variant']}" for k in kernels if k["runs"].get(str(g["index"]))]
        not_here = [f"{k['op']}:{k['variant']} ({k['why_not'][str(g['index'])]})"
                    for k in kernels if not k["runs"].get(str(g["index"]))]
        lines.append(f"  {g['index']} ({g.get('arch') or '?'}): runs {len(runs)} of {len(kernels)} variants")
        if not_here:
            lines.append(f"    not on this GPU: {'; '.join(not_here)}")
        for d in g.get("defaults", []):
            lines.append(f"    default {d['op']} {'/'.join(d['dtypes'])}: {d['variant']}")
    return lines
