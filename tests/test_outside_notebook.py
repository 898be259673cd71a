"""Outside a notebook frontend (plain Python, terminal IPython) figures and panels write an HTML
file and print a line about it, instead of asking for a browser that is not there."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SHOW = ("import hookmagic; t = hookmagic.recordings.load('cupy_pipeline'); ")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PLOTLY_RENDERER", "DISPLAY")}
    env["HOOKMAGIC_FIGURES_DIR"] = str(tmp_path / "figures")
    env["BROWSER"] = ""                     # no runnable browser, as on a server
    return env


def _written(out: str) -> Path:
    m = re.search(r"written to (\S+\.html)", out)
    assert m, out
    return Path(m.group(1))


def test_plain_python_show_writes_an_offline_file(tmp_path):
    run = subprocess.run([sys.executable, "-c", SHOW + "t.timeline().show()"], cwd=tmp_path,
                         env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "browser" not in run.stderr
    first = run.stdout.splitlines()[0]
    assert first.startswith("Timeline — cupy_pipeline: 102 GPU events") and "scattergl" in first
    page = _written(run.stdout)
    assert page.parent == tmp_path / "figures" and (page.parent / "plotly.min.js").is_file()
    assert 'src="plotly.min.js"' in page.read_text(encoding="utf-8")


def test_terminal_ipython_displays_figures_and_the_report_as_files(tmp_path):
    code = ("%load_ext hookmagic\n" + SHOW + "from IPython.display import display\n"
            "display(t.flame())\n"
            "from hookmagic.views.outside import show_panel\n"
            "from hookmagic.views.report import report_widget\n"
            "show_panel(lambda: report_widget(t, lazy=False), text=str(t.summary()), title='r')\n")
    run = subprocess.run([sys.executable, "-m", "IPython", "--simple-prompt", "--no-banner",
                          "-c", code], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                         text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    assert "could not locate runnable browser" not in run.stdout + run.stderr
    assert "GPU time by launching call path — cupy_pipeline" in run.stdout
    pages = re.findall(r"written to (\S+\.html)", run.stdout)
    assert len(pages) == 2 and all(Path(p).is_file() for p in pages)
    # the report page is the offline one: widget state and the widget manager inline
    report = Path(pages[1]).read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-state+json" in report
    assert "GPU busy" in run.stdout or "kernels" in run.stdout      # the summary text


def test_plain_python_is_not_a_notebook_frontend(tmp_path):
    run = subprocess.run([sys.executable, "-c", "from hookmagic.views.outside import "
                          "in_notebook_frontend as f; print(f())"], cwd=tmp_path,
                         env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "False", run.stderr
