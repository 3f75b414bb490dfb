"""The HTML report: self-contained (PNG data URLs only), escaped, and its images load in a
real browser (headless Chromium, Debian package ``chromium``)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from qcllp.learn import KMeansLabeler
from qcllp.learn.baselines import MeanMap
from qcllp.learn.synthetic import bags_from_labels, make_gaussian_mixture
from qcllp.reporting.report import StationSection, model_importances, render_report, write_report

CHROMIUM = shutil.which("chromium")
PROBE = (
    "<script>window.addEventListener('load', () => document.body.setAttribute('data-images',"
    " JSON.stringify([...document.images].map(i => i.complete && i.naturalWidth > 0))));"
    "</script>"
)
BROKEN_IMG = '<img alt="broken" src="data:image/png;base64,AAAA">'


def _section(station: str, seed: int) -> StationSection:
    rng = np.random.default_rng(seed)
    actual = rng.uniform(0, 0.4, 30)
    per_charge = pd.DataFrame(
        {"actual_share": actual, "predicted_share": actual + rng.normal(0, 0.03, 30)},
        index=[f"CH{i:04d}" for i in range(30)],
    )
    importances = pd.Series(rng.normal(size=15), index=[f"{station}.s{i}.mean" for i in range(15)])
    days = pd.date_range("2026-01-05", periods=14, freq="D", tz="UTC")
    lockout = pd.Series(rng.uniform(0, 0.1, 14), index=days)
    model = {"id": seed, "method": "alter-psvm", "bag_error": 0.0812345, "threshold": 0.88}
    return StationSection(station, model, per_charge, importances, lockout, ["a note"])


@pytest.fixture(scope="module")
def report() -> str:
    comparison = pd.DataFrame(
        {"station": ["furnace", "cooling"], "method": ["meanmap", "alter-psvm"], "auc": [0.8, 0.9]}
    )
    sections = [_section("furnace", 1), _section("cooling", 2), StationSection("empty", {})]
    return render_report("<mill & co>", sections, comparison)


def _image_sources(text: str) -> list[str]:
    return re.findall(r'<img[^>]*\ssrc="([^"]*)"', text)


def test_report_is_self_contained_with_three_png_plots_per_station(report):
    text = report
    sources = _image_sources(text)
    assert len(sources) == 6
    for src in sources:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    assert not re.search(r'(src|href)="(?!data:)', text)  # nothing fetched from elsewhere
    assert "Model comparison" in text and "alter-psvm" in text and "0.08123" in text


def test_plant_name_is_escaped(report):
    text = report
    assert "&lt;mill &amp; co&gt;" in text and "<mill" not in text


def test_linear_and_kmeans_models_report_one_weight_per_feature():
    X, y = make_gaussian_mixture(300, 4, separation=2.0, random_state=0)
    bags, shares = bags_from_labels(y, 30, random_state=0)
    names = ["a", "b", "c", "d"]
    linear = model_importances(MeanMap().fit(X, bags, shares), names)
    assert list(linear.index) == names and (linear > 0).all()  # every feature raises the risk
    kmeans = KMeansLabeler(n_clusters=2, maxgen=2, psize=4, random_state=0).fit(X, bags, shares)
    assert list(model_importances(kmeans, names).index) == names
    rbf = MeanMap(kernel="rbf").fit(X, bags, shares)
    assert model_importances(rbf, names) is None


def _images_loaded_in_chromium(html_path: Path, tmp_path: Path) -> list[bool]:
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--virtual-time-budget=10000",
        "--dump-dom",
        html_path.as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    found = re.search(r'data-images="([^"]*)"', result.stdout)
    assert found, f"the probe did not run; chromium said: {result.stderr[-500:]}"
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_every_report_image_loads_in_headless_chromium(tmp_path):
    path = write_report(tmp_path / "report" / "index.html", "mill", [_section("cooling", 3)], None)
    probed = tmp_path / "probed.html"
    probed.write_text(path.read_text().replace("</body>", PROBE + "</body>"))
    # a broken image in the same page proves the probe can tell
    control = tmp_path / "control.html"
    control.write_text(path.read_text().replace("</body>", BROKEN_IMG + PROBE + "</body>"))
    assert _images_loaded_in_chromium(probed, tmp_path) == [True, True, True]
    assert _images_loaded_in_chromium(control, tmp_path) == [True, True, True, False]


# ----------------------------------------------------------------------------- the plant's report
LAYOUT_PROBE = (
    "<script>window.addEventListener('load', () => {"
    "const w = window.innerWidth;"
    "const wide = [...document.querySelectorAll('body *')]"
    ".filter(e => !e.closest('.scroll') && e.getBoundingClientRect().right > w + 1)"
    ".map(e => e.tagName + (e.id ? '#' + e.id : ''));"
    "const h2 = [...document.querySelectorAll('h2')].map(e => e.textContent);"
    "document.body.setAttribute('data-layout', JSON.stringify({width: w,"
    " scroll: document.documentElement.scrollWidth, wide: wide, headings: h2}));"
    "});</script>"
)


@pytest.fixture(scope="module")
def plant_report(history_plant, tmp_path_factory):
    """The report of the history plant: every station trained, promoted, its fresh charges
    scored, the simulator's truth given."""
    from qcllp.reporting.plant_report import build_plant_report
    from qcllp.scoring.step import score_station
    from qcllp.station.registry import promote
    from qcllp.store import Store

    folder = tmp_path_factory.mktemp("plant_report")
    config = history_plant.config
    with Store.open(history_plant.copy_to(folder)) as store:
        for station in config.station_names:
            promote(store, history_plant.record_trained(store, config, station))
            score_station(store, config, station)
        truth = history_plant.fresh.truth.astype(str).set_index(["charge_id", "stick_id"])
        path = build_plant_report(store, config, folder / "report.html", truth=truth["defect"])
    return path, config


def test_the_summary_comes_first_with_every_station_and_its_figures(plant_report):
    path, config = plant_report
    text = path.read_text()
    summary = text.index("<h2>Summary</h2>")
    assert summary < text.index("<h2>Station ")
    for station in config.station_names:
        assert f"<td>{station}</td>" in text.split("<h2>Station ")[0]
        assert f"id='station-{station}'" in text
    assert "expected saving per 1,000 sticks (90 % interval)" in text
    assert "fresh ROC AUC" in text and f"realized saving per 1,000 ({config.currency})" in text
    assert "roc_auc" not in text.split("<h2>Model comparison</h2>")[1]  # no column of Nones


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_the_plant_report_fits_a_1280_px_screen_in_headless_chromium(plant_report, tmp_path):
    path, config = plant_report
    probed = path.with_name("probed.html")
    probed.write_text(path.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    common = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1280,1000",
        "--virtual-time-budget=10000",
    ]
    result = subprocess.run(
        [*common, "--dump-dom", probed.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = re.search(r'data-layout="([^"]*)"', result.stdout)
    assert found, f"the probe did not run; chromium said: {result.stderr[-500:]}"
    layout = json.loads(found.group(1).replace("&quot;", '"'))
    assert layout["width"] == 1280
    assert layout["scroll"] <= 1280 and layout["wide"] == [], layout
    assert layout["headings"][0] == "Summary"
    assert layout["headings"][1 : 1 + len(config.station_names)] == [
        f"Station {s}" for s in config.station_names
    ]
    shot = tmp_path / "report-1280.png"
    subprocess.run(
        [*common, f"--screenshot={shot}", path.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes().startswith(b"\x89PNG")
    keep = Path(tempfile.gettempdir()) / "qcllp-report-1280.png"  # for a person to look at
    shutil.copy(shot, keep)
