"""The repository stays a product a newcomer can read: a small tracked tree, a short README, no
internal ticket numbers or dated lines in the package, and no code that switches a kernel's
variant by assigning module attributes (variants are arguments)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".ipynb", ".cu", ".cuh",
                 ".c", ".cpp", ".h", ".hpp", ".pyi", ".j2", ".css"}


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    return [ROOT / p for p in out.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


def test_tracked_tree_is_small():
    files = _tracked()
    size = sum(p.stat().st_size for p in files)
    assert len(files) <= 700, f"{len(files)} tracked files"
    assert size <= 15 * 2**20, f"{size / 2**20:.1f} MiB tracked"


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def test_no_internal_ticket_numbers():
    pattern = re.compile(r"\b(issue|ticket)[- ]?#?\d+", re.IGNORECASE)
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in _tracked() if p.suffix in TEXT_SUFFIXES
             for m in [pattern.search(p.read_text(encoding="utf-8", errors="replace"))] if m]
    assert not found, found


def test_no_dated_lines_in_the_package_code():
    pattern = re.compile(r"20\d\d-[01]\d-[0-3]\d")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "hookmagic").rglob("*.py")
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not found, found


def test_kernel_variants_are_never_set_by_assigning_module_attributes():
    pattern = re.compile(r"\.\s*(IMPL|SCHEDULE)\s*=[^=]")
    found = [f"{p.relative_to(ROOT)}:{i}" for folder in ("hookmagic", "benchmarks", "lab", "tools", "tests")
             for p in (ROOT / folder).rglob("*.py")
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not found, found
