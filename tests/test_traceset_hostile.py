"""Hostile rank folders and arguments: load_many refuses them with its own errors, reads nothing
outside a rank's folder, builds nothing per claimed rank, and puts nothing from a file into the
notebook's HTML unescaped."""
from __future__ import annotations

import json
import warnings

import pytest

import hookmagic
from hookmagic.common.errors import HookmagicError, InvalidArgument

pytest.importorskip("duckdb")


def _rank_folder(tmp_path, rank=0, world_size=1, job_id="synthetic-job", host="synthetic-host"):
    """A real rank folder written by capture(dir=...)'s own writer, from a synthetic trace."""
    from pathlib import Path

    from hookmagic.distributed.identity import RankIdentity
    from hookmagic.distributed.output import save_rank_trace
    from tests.synthetic import synthetic

    ident = RankIdentity(rank=rank, world_size=world_size, job_id=job_id, host=host)
    return Path(save_rank_trace(synthetic(), tmp_path, ident))


def _load(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hookmagic.load_many(folder)


def test_a_manifest_pointing_outside_its_folder_is_refused_and_nothing_outside_is_read(tmp_path):
    runs = tmp_path / "runs"
    folder = _rank_folder(runs)
    secret = tmp_path / "outside" / "secret.parquet"
    secret.parent.mkdir()
    meta_path = folder / "meta.json"
    doc = json.loads(meta_path.read_text())
    (name, info), = [(n, i) for n, i in doc["tables"].items() if n == "kernels"]
    secret.write_bytes((folder / info["file"]).read_bytes())   # a valid table, outside
    info["file"] = "../../outside/secret.parquet"
    meta_path.write_text(json.dumps(doc))
    ts = _load(runs)
    row = ts.ranks.set_index("rank").loc[0]
    assert row["status"] == "damaged" and "outside" in row["reason"]
    with ts:
        assert len(ts.sql("SELECT * FROM kernels")) == 0


def test_html_of_a_set_escapes_what_the_files_say(tmp_path):
    _rank_folder(tmp_path, job_id="<img src=x onerror=alert(1)>", host="<script>x</script>")
    ts = _load(tmp_path)
    page = ts._repr_html_()
    assert "<img" not in page and "<script>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.parametrize("field,value", [("world_size", 10**9), ("rank", 10**12),
                                         ("rank", "abc"), ("rank", None), ("world_size", "x")])
def test_impossible_rank_values_make_one_damaged_member_not_a_billion(tmp_path, field, value):
    folder = _rank_folder(tmp_path)
    meta_path = folder / "meta.json"
    doc = json.loads(meta_path.read_text())
    doc["meta"]["rank"][field] = value
    meta_path.write_text(json.dumps(doc))
    ts = _load(tmp_path)
    assert len(ts.members) == 1
    assert ts.members[0].status == "damaged" and field.replace("_", " ") in ts.members[0].reason


def test_arguments_are_checked_before_anything_is_opened(tmp_path):
    _rank_folder(tmp_path)
    with pytest.raises(InvalidArgument):
        hookmagic.load_many(tmp_path, memory_limit="1GB'; ATTACH 'x")
    with pytest.raises(InvalidArgument):
        hookmagic.load_many(tmp_path, threads=0)
    with pytest.raises(HookmagicError, match="no paths"):
        hookmagic.load_many([])
