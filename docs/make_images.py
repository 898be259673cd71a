"""Re-draw the pictures in docs/images/ from the bundled recordings and samples (real data
recorded on GPUs; each picture's page says which), through Debian's Chromium:

    python docs/make_images.py            # needs `pip install playwright` and /usr/bin/chromium
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import plotly.io as pio

import hookmagic
from hookmagic.analysis.memory import memory_over_time
from hookmagic.layers.breakdown import top_layers
from hookmagic.layers.samples import load_sample
from hookmagic.views.layers import layer_bars
from hookmagic.views.memory_timeline import memory_timeline_figure

OUT = Path(__file__).resolve().parent / "images"


def figures() -> dict[str, object]:
    resnet = hookmagic.recordings.load("resnet18_inference_churn")
    mlp = hookmagic.recordings.load("mlp_training")
    step = resnet.ranges[resnet.ranges["name"].str.startswith("step 3")].iloc[0]
    mobilenet = load_sample("mobilenet_qat")
    return {
        "flame": resnet.flame(),
        "timeline": resnet.timeline(start_ns=int(step["start_ns"]), end_ns=int(step["end_ns"])),
        "diff": mlp.diff(resnet),
        "memory_timeline": memory_timeline_figure(memory_over_time(resnet),
                                                  title="resnet18_inference_churn: GPU memory"),
        "memory_map": resnet.memory_map(steps=8, max_segments=20),
        "layers": layer_bars(top_layers(mobilenet, 15), title="mobilenet_qat: slowest layers"),
    }


def main() -> None:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--headless=new", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1100, "height": 700})
        for name, fig in figures().items():
            fig.update_layout(width=1080)
            html = Path(tmp) / f"{name}.html"
            pio.write_html(fig, html, include_plotlyjs="directory", full_html=True)
            page.goto(html.as_uri(), wait_until="load")
            page.locator(".js-plotly-plot").first.wait_for(state="visible")
            page.wait_for_timeout(500)
            page.locator(".js-plotly-plot").first.screenshot(path=str(OUT / f"{name}.png"))
            print(OUT / f"{name}.png")
        browser.close()


if __name__ == "__main__":
    main()
