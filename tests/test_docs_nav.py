"""docs/hooks.py: nav entries whose page is not written yet are left out, so the site builds
with --strict at every merge (the site itself is built by .ci/run: mkdocs build --strict)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _hooks():
    pytest.importorskip("mkdocs", reason="the docs packages are in [dev]")
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missing_pages_leave_the_nav_and_present_ones_stay(tmp_path):
    hooks = _hooks()
    (tmp_path / "index.md").write_text("# home")
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "a.md").write_text("# a")
    nav = [{"Home": "index.md"}, {"Pipeline": "pipeline.md"},
           {"Guide": [{"A": "guide/a.md"}, {"B": "guide/b.md"}]},
           {"Only missing": [{"X": "x.md"}]}, {"Site": "https://example.org"},
           {"Tour": "notebooks/00_tour.ipynb"}]
    config = hooks.on_config({"nav": nav, "docs_dir": str(tmp_path)})
    assert config["nav"] == [{"Home": "index.md"}, {"Guide": [{"A": "guide/a.md"}]},
                             {"Site": "https://example.org"},
                             {"Tour": "notebooks/00_tour.ipynb"}]


def test_every_page_in_the_nav_of_this_checkout_exists_or_belongs_to_another_area():
    import yaml

    hooks = _hooks()
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    kept = hooks.on_config({"nav": nav, "docs_dir": str(ROOT / "docs")})["nav"]
    flat = [v for item in kept for v in (item.values() if isinstance(item, dict) else [item])]
    assert {"Home": "index.md"} in kept and len(flat) >= 10
