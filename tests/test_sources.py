"""Source files as stacks name them (hookmagic.common.sources)."""
from __future__ import annotations

import linecache

from hookmagic.common.sources import (MODULE_FILE, is_library_file, snapshot_sources,
                                      source_lines)


def test_library_files_are_told_from_the_users():
    assert is_library_file("/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py")
    assert is_library_file("/usr/lib/python3/dist-packages/numpy/core/fromnumeric.py")
    assert is_library_file("/usr/lib/python3.11/functools.py")
    assert is_library_file("<frozen runpy>")
    assert is_library_file(MODULE_FILE)
    import hookmagic.cupti.modules as mod
    assert is_library_file(mod.__file__)
    assert is_library_file("/root/elsewhere/hookmagic/cupti/autograd.py")  # recorded on another machine
    assert not is_library_file("/work/main/benchmarks/make_recordings.py")
    assert not is_library_file("/tmp/ipykernel_123/2471381226.py")
    assert not is_library_file("<ipython-input-3-0123456789ab>")
    assert not is_library_file("/home/me/hookmagic/tests/test_x.py")


def test_source_lines_prefer_the_stored_text_then_disk(tmp_path):
    f = tmp_path / "train.py"
    f.write_text("a = 1\nb = 2\n")
    assert source_lines(str(f)) == (["a = 1", "b = 2"], "disk")
    assert source_lines(str(f), {str(f): "x = 9\n"}) == (["x = 9"], "recording")
    assert source_lines(str(tmp_path / "gone.py")) == ([], "unavailable")
    assert source_lines(MODULE_FILE) == ([], "unavailable")


def test_source_lines_find_cells_in_linecache():
    name = "<ipython-input-99-synthetic>"
    linecache.cache[name] = (12, None, ["y = model(x)\n", "y.sum()\n"], name)
    try:
        assert source_lines(name) == (["y = model(x)", "y.sum()"], "disk")
    finally:
        linecache.cache.pop(name, None)


def test_snapshot_keeps_users_files_within_budget(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("print('a')\n")
    b.write_text("x = 1\n" * 100)
    lib = "/nonexistent/lib/python3.12/site-packages/torch/x.py"
    snap = snapshot_sources([str(a), lib, str(b), str(a)], max_bytes=200)
    assert snap == {str(a): "print('a')\n"}   # b is over the budget, the library is left out
    assert set(snapshot_sources([str(a), str(b)])) == {str(a), str(b)}
