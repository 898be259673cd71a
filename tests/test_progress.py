"""Progress bars: tqdm.auto, shown only for work that runs a while, off with HOOKMAGIC_PROGRESS=0."""
from __future__ import annotations

from hookmagic.common import progress as prog


def test_progress_yields_everything_and_draws_a_bar_when_shown(monkeypatch, capsys):
    monkeypatch.setattr(prog, "DELAY_S", 0.0)          # draw at once
    monkeypatch.delenv("HOOKMAGIC_PROGRESS", raising=False)
    assert list(prog.progress(range(5), desc="synthetic work", total=5, unit="step")) == list(range(5))
    err = capsys.readouterr().err
    assert "synthetic work" in err and "/5 [" in err


def test_quick_work_prints_nothing(monkeypatch, capsys):
    monkeypatch.delenv("HOOKMAGIC_PROGRESS", raising=False)
    assert sum(prog.progress(range(1000), desc="quick")) == sum(range(1000))
    assert capsys.readouterr().err == ""


def test_env_switch_turns_bars_off(monkeypatch, capsys):
    monkeypatch.setattr(prog, "DELAY_S", 0.0)
    monkeypatch.setenv("HOOKMAGIC_PROGRESS", "0")
    assert not prog.enabled()
    assert list(prog.progress(iter("abc"), desc="off")) == ["a", "b", "c"]
    with prog.bar("off too", total=3) as b:
        b.update(3)
    assert capsys.readouterr().err == ""


def test_sweep_shows_its_progress(monkeypatch, capsys):
    from hookmagic.sched.sweep import sweep

    from .test_sched_sweep_export import SPECS, workload
    monkeypatch.setattr(prog, "DELAY_S", 0.0)
    monkeypatch.delenv("HOOKMAGIC_PROGRESS", raising=False)
    sweep(SPECS, workload(), {"streams": [1, 2, 3]})
    err = capsys.readouterr().err
    assert "sweep" in err and "/3 [" in err and "policy" in err
