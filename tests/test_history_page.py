"""The history page: self-contained, sorted, escaped; drawn by a real headless Chromium; and the PNGs (CPU)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_history_changes import history_db, noisy, points

from speedgate.history import cli
from speedgate.history.page import render_page
from speedgate.history.png import file_name

pytest.importorskip("ruptures", reason="the history extra: pip install -e '.[history]'")

SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def page_data(text: str) -> dict:
    block = re.search(r'<script type="application/json" id="history-data">(.*?)</script>', text, re.S)
    assert block is not None
    return json.loads(block.group(1))


def test_the_page_is_self_contained_and_lists_the_moved_cases_first(tmp_path: Path) -> None:
    db = history_db(tmp_path, step=-0.05)
    out = tmp_path / "page.html"
    assert cli.main(["page", "--db", str(db), "--out", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    # Nothing to fetch at view time: no external script, style, image or font; the only URL is the SVG namespace.
    assert not re.search(r"<link|<img|<iframe|\bsrc=|@import|url\(", text)
    assert set(re.findall(r"https?://[^\s\"']+", text)) == {SVG_NAMESPACE}
    data = page_data(text)
    assert [s["ident"] for s in data["series"]] == ["t.py::test_moves", "t.py::test_other", "t.py::test_steady"]
    moved = data["series"][0]
    assert moved["dropped"] and moved["moved_since"] == 20 and moved["latest_move"] == pytest.approx(-0.05, abs=0.005)
    assert len(moved["points"]) == 30 and [c["index"] for c in moved["changes"]] == [19]
    run, speedup, low, high, blessed, tolerance, commit, branch, when, verdict = moved["points"][0]
    assert (run, blessed, tolerance, commit, branch, when, verdict) == (1, 1.5, 0.1, "001".ljust(40, "f"), "main",
                                                                        "2026-11-01T00:00:00Z", "pass")
    assert low < speedup < high
    assert data["runs"] == 30


def test_a_case_id_cannot_end_the_script_block() -> None:
    from speedgate.history.changes import changes_in

    nasty = "t.py::test_x[</script><script>alert(1)</script>]"
    text = render_page([changes_in(points(noisy(12, 0.003, 1), nasty))], title="<b>t</b>", runs=12)
    assert "</script><script>alert(1)" not in text and "<b>t</b>" not in text
    assert page_data(text)["series"][0]["ident"] == nasty


def test_a_png_per_case(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    db = history_db(tmp_path, step=-0.05)
    assert cli.main(["page", "--db", str(db), "--out", str(tmp_path / "p.html"), "--png", str(tmp_path / "png")]) == 0
    files = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert files == ["t.py_test_moves__nvidia-h100-80gb-hbm3.png", "t.py_test_other__nvidia-h100-80gb-hbm3.png",
                     "t.py_test_steady__nvidia-h100-80gb-hbm3.png"]
    for name in files:
        assert (tmp_path / "png" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_file_names_are_plain() -> None:
    from speedgate.history.changes import changes_in

    series = changes_in(points([1.0] * 3, "perftests/test_a.py::test_b[8192-bf16]::vs eager/x"))
    assert file_name(series) == "perftests_test_a.py_test_b_8192-bf16_vs_eager_x__box.png"


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("SPEEDGATE_REQUIRE_BROWSER"):
            pytest.fail("SPEEDGATE_REQUIRE_BROWSER is set but chromium is not installed (.ci/run installs Debian's)")
        pytest.skip("no chromium here: apt-get install chromium")
    return found


def _browse(chromium: str, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # As root (CI), Chromium refuses to start without --no-sandbox. The window is wide enough for two charts a row.
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--window-size=1100,1400", *args, page.as_uri()], capture_output=True, text=True, timeout=120)


def test_chromium_draws_every_chart(tmp_path: Path) -> None:
    """Load the page in headless Chromium: after its script ran the DOM holds an SVG chart per case with a point per
    run and a line per change point; the screenshot has the points' colour inside every chart's rectangle."""
    chromium = _chromium()
    db = history_db(tmp_path, step=-0.05)
    page = tmp_path / "page.html"
    assert cli.main(["page", "--db", str(db), "--out", str(page)]) == 0
    dom = _browse(chromium, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr
    html = dom.stdout
    assert 'data-drawn="3"' in html
    charts = re.findall(r'<svg[^>]*class="chart".*?</svg>', html, re.S)
    assert len(charts) == 3
    for chart in charts:
        assert len(re.findall(r'<circle[^>]*class="point"', chart)) == 30
        assert len(re.findall(r'<rect[^>]*class="band"', chart)) == 30
    assert len(re.findall(r'<line[^>]*class="change"', charts[0])) == 1
    assert all('class="change"' not in chart for chart in charts[1:])
    rects = [tuple(int(v) for v in r.split(",")) for r in re.findall(r'data-rect="([0-9,.-]+)"', html)]
    assert len(rects) == 3 and all(w > 200 and h > 60 for _, _, w, h in rects)

    shot = tmp_path / "shot.png"
    done = _browse(chromium, page, f"--screenshot={shot}")
    assert done.returncode == 0 and shot.exists(), done.stderr
    import matplotlib.image

    pixels = (matplotlib.image.imread(str(shot))[..., :3] * 255).astype(int)
    blue = np.array([0x1F, 0x77, 0xB4])  # the points' colour (verdict pass)
    for x, y, w, h in rects:
        area = pixels[y:y + h, x:x + w]
        assert area.size, f"chart at {x},{y} outside the screenshot {pixels.shape}"
        near = (np.abs(area - blue).sum(axis=2) < 40).sum()
        assert near > 30 * 10, f"chart at {x},{y}: only {near} pixels of the points' colour"
    # The page outside the charts stays background: the colour is where the charts are.
    assert (np.abs(pixels[: rects[0][1] - 60] - blue).sum(axis=2) < 40).sum() < 200
