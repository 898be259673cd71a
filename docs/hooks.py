"""mkdocs hooks: the nav lists pages that other parts of the project add (pipeline, kernels,
several ranks, ...); an entry whose page is not in docs/ yet is dropped with an info line, so
`mkdocs build --strict` passes at every stage. (docs/notebooks is a link to ../notebooks.)"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.hookmagic")
ROOT = Path(__file__).resolve().parent.parent


def _exists(docs: Path, page: str) -> bool:
    return (docs / page).is_file() or (page.startswith("notebooks/") and (ROOT / page).is_file())


def _prune(items: list, docs: Path) -> list:
    kept = []
    for item in items:
        if isinstance(item, dict):
            (title, value), = item.items()
            if isinstance(value, list):
                value = _prune(value, docs)
                if value:
                    kept.append({title: value})
            elif isinstance(value, str) and not value.startswith(("http:", "https:")) \
                    and not _exists(docs, value):
                log.info("nav: %s (%s) is not written yet; left out", title, value)
            else:
                kept.append(item)
        elif isinstance(item, str) and not _exists(docs, item):
            log.info("nav: %s is not written yet; left out", item)
        else:
            kept.append(item)
    return kept


def on_config(config, **_):
    config["nav"] = _prune(config["nav"], Path(config["docs_dir"]))
    return config

