"""The history as one self-contained HTML page: a chart per case drawn by inline JavaScript into inline SVG.

Nothing is fetched at view time (no server, no network): the data is a JSON block in the page, the script and the
style are inline. The cases that moved come first. After drawing, the script marks <body data-drawn="N"> and gives
each chart's position on the page in data-rect, which the browser test reads.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..baseline import now_iso
from .changes import DEFAULT_DROP, Series


def series_data(series: Series, drop: float = DEFAULT_DROP) -> dict[str, Any]:
    """One chart's data: points [run, speedup, ci_low, ci_high, baseline, tolerance, commit, branch, time, verdict]."""
    start = series.moved_at
    return {
        "ident": series.ident,
        "hardware_key": series.hardware_key,
        "noise": series.noise,
        "latest_move": series.latest_move,
        "moved_since": start.run_after if start is not None else None,
        "dropped": series.dropped(drop),
        "points": [[p.run_id, p.speedup, p.ci_low, p.ci_high, p.baseline, p.tolerance, p.commit, p.branch, p.run_time,
                    p.verdict] for p in series.points],
        "changes": [{"index": c.index, "before": c.before, "after": c.after, "size": c.size, "commits": c.commits(),
                     "run_before": c.run_before, "run_after": c.run_after} for c in series.changes],
    }


def render_page(series: Sequence[Series], *, title: str, runs: int, drop: float = DEFAULT_DROP) -> str:
    """The page's HTML, the series in the order given."""
    data = {"title": title, "generated": now_iso(), "runs": runs, "drop": drop,
            "series": [series_data(s, drop) for s in series]}
    # In a <script> block only "</" can end it early: JSON allows "<\/" for "</".
    payload = json.dumps(data, sort_keys=True, allow_nan=False).replace("</", "<\\/")
    moved = sum(1 for s in series if s.changes)
    summary = (f"{runs} runs, {len(series)} cases, {moved} with change points "
               f"(the ones that moved first; exit 1 threshold: a latest drop of {drop:.0%})")
    return PAGE.format(title=html.escape(title), summary=html.escape(summary), payload=payload, style=STYLE,
                       script=SCRIPT)


def write_page(path: Path, series: Sequence[Series], *, title: str, runs: int, drop: float = DEFAULT_DROP) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(series, title=title, runs=runs, drop=drop), encoding="utf-8")


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<h1>{title}</h1>
<p class="summary">{summary}</p>
<p class="legend"><span class="key band"></span> blessed speedup &plusmn; tolerance
<span class="key line"></span> blessed speedup <span class="key dot"></span> a run (bar: its 95% interval)
<span class="key change"></span> change point. Hover a point for its run, commit and time.</p>
<main id="charts"></main>
<div id="tip" hidden></div>
<noscript>The charts are drawn by the page's script: allow JavaScript for this file.</noscript>
<script type="application/json" id="history-data">{payload}</script>
<script>{script}</script>
</body>
</html>
"""

STYLE = """
body { font: 13px system-ui, sans-serif; margin: 16px; color: #222; background: #fff; }
h1 { font-size: 18px; margin: 0 0 4px; }
.summary, .legend { margin: 2px 0 10px; color: #555; }
#charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 12px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px; }
.card.dropped { border-color: #d62728; }
.card h2 { font-size: 12px; font-weight: 600; margin: 0; word-break: break-all; }
.card p { margin: 2px 0 4px; color: #555; font-size: 12px; }
.card p.down { color: #d62728; }
svg.chart { display: block; width: 100%; height: auto; }
.key { display: inline-block; width: 14px; height: 9px; margin: 0 3px 0 10px; vertical-align: middle; }
.key.band { background: #e3e3e3; } .key.line { border-top: 2px dashed #888; height: 0; }
.key.dot { background: #1f77b4; border-radius: 50%; width: 8px; height: 8px; }
.key.change { border-left: 2px solid #ff7f0e; height: 12px; width: 0; }
#tip { position: fixed; pointer-events: none; background: #222; color: #fff; padding: 5px 7px; border-radius: 4px;
       font-size: 12px; white-space: pre; z-index: 9; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var W = 470, H = 170, L = 50, R = 10, T = 10, B = 24;
  var COLOURS = {regressed: "#d62728", improved: "#2ca02c", pass: "#1f77b4"};
  var data = JSON.parse(document.getElementById("history-data").textContent);
  var tip = document.getElementById("tip");

  function node(tag, attrs, parent, text) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    if (text !== undefined) { e.textContent = text; }
    parent.appendChild(e);
    return e;
  }
  function pct(v) { return (v >= 0 ? "+" : "") + (100 * v).toFixed(1) + "%"; }
  function short(c) { return c ? c.slice(0, 10) : "?"; }
  function describe(p) {
    var lines = ["run " + p[0] + (p[8] ? "  " + p[8] : ""),
                 "commit " + short(p[6]) + (p[7] ? " (" + p[7] + ")" : ""),
                 p[1].toFixed(3) + "x" + (p[2] !== null && p[3] !== null ?
                   "  [" + p[2].toFixed(3) + ", " + p[3].toFixed(3) + "]" : "") + "  " + p[9]];
    if (p[4] !== null) {
      lines.push("blessed " + p[4].toFixed(3) + "x" + (p[5] !== null ? " \u00b1 " + (100 * p[5]).toFixed(1) + "%" : ""));
    }
    return lines.join("\n");
  }

  function chart(s, parent) {
    var pts = s.points, n = pts.length;
    var values = [];
    pts.forEach(function (p) {
      values.push(p[1]);
      if (p[2] !== null) { values.push(p[2]); } if (p[3] !== null) { values.push(p[3]); }
      if (p[4] !== null && p[5] !== null) { values.push(p[4] * (1 - p[5]), p[4] * (1 + p[5])); }
    });
    var lo = Math.min.apply(null, values), hi = Math.max.apply(null, values);
    var pad = Math.max((hi - lo) * 0.08, hi * 0.002);
    lo -= pad; hi += pad;
    var step = (W - L - R) / Math.max(n - 1, 1);
    function x(i) { return n === 1 ? (L + W - R) / 2 : L + i * step; }
    function y(v) { return T + (hi - v) / (hi - lo) * (H - T - B); }
    var svg = node("svg", {viewBox: "0 0 " + W + " " + H, "class": "chart", role: "img",
                           "aria-label": "speedup of " + s.ident + " over " + n + " runs"}, parent);
    node("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "#fff", stroke: "#ccc"}, svg);
    pts.forEach(function (p, i) {  // the tolerance band, one slice per run (the blessed value can change)
      if (p[4] === null || p[5] === null) { return; }
      var x0 = Math.max(L, x(i) - step / 2), x1 = Math.min(W - R, x(i) + step / 2);
      node("rect", {"class": "band", x: x0, y: y(p[4] * (1 + p[5])), width: Math.max(x1 - x0 + 0.6, 1),
                    height: y(p[4] * (1 - p[5])) - y(p[4] * (1 + p[5])), fill: "#e3e3e3"}, svg);
    });
    var blessed = pts.map(function (p, i) { return p[4] === null ? null : x(i) + "," + y(p[4]); })
                     .filter(function (v) { return v !== null; });
    if (blessed.length) {
      node("polyline", {"class": "blessed", points: blessed.join(" "), fill: "none", stroke: "#888",
                        "stroke-dasharray": "4 3"}, svg);
    }
    for (var t = 0; t <= 3; t++) {
      var v = lo + (hi - lo) * t / 3;
      node("text", {x: L - 4, y: y(v) + 3, "text-anchor": "end", "font-size": 10, fill: "#555"}, svg, v.toFixed(3) + "x");
    }
    node("text", {x: L, y: H - 6, "font-size": 10, fill: "#555"}, svg, "run " + pts[0][0]);
    node("text", {x: W - R, y: H - 6, "font-size": 10, fill: "#555", "text-anchor": "end"}, svg, "run " + pts[n - 1][0]);
    s.changes.forEach(function (c, k) {
      var cx = (x(c.index - 1) + x(c.index)) / 2;
      node("line", {"class": "change", x1: cx, x2: cx, y1: T, y2: H - B, stroke: "#ff7f0e", "stroke-width": 2}, svg);
      node("text", {x: cx + 3, y: T + 11 + 11 * (k % 2), "font-size": 10, fill: "#b35400"}, svg, pct(c.size));
      node("title", {}, svg.lastChild, "run " + c.run_before + " \u2192 " + c.run_after + " (" + c.commits + "): " +
           c.before.toFixed(3) + "x \u2192 " + c.after.toFixed(3) + "x");
    });
    node("polyline", {"class": "speedup", points: pts.map(function (p, i) { return x(i) + "," + y(p[1]); }).join(" "),
                      fill: "none", stroke: "#1f77b4", "stroke-width": 1, "stroke-opacity": 0.5}, svg);
    pts.forEach(function (p, i) {
      if (p[2] !== null && p[3] !== null) {
        node("line", {x1: x(i), x2: x(i), y1: y(p[3]), y2: y(p[2]), stroke: "#1f77b4", "stroke-opacity": 0.5}, svg);
      }
      var dot = node("circle", {"class": "point", cx: x(i), cy: y(p[1]), r: 3, fill: COLOURS[p[9]] || "#7f7f7f",
                                "data-run": p[0]}, svg);
      node("title", {}, dot, describe(p));
      dot.addEventListener("mouseenter", function (ev) {
        tip.textContent = describe(p); tip.hidden = false;
        tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px";
      });
      dot.addEventListener("mouseleave", function () { tip.hidden = true; });
    });
    return svg;
  }

  var main = document.getElementById("charts"), drawn = [];
  data.series.forEach(function (s) {
    var card = document.createElement("section");
    card.className = "card" + (s.dropped ? " dropped" : "");
    var h = document.createElement("h2");
    h.textContent = s.ident + "  [" + s.hardware_key + "]";
    card.appendChild(h);
    var p = document.createElement("p");
    var last = s.points[s.points.length - 1];
    p.textContent = s.points.length + " runs, now " + last[1].toFixed(3) + "x, noise " + (100 * s.noise).toFixed(2) +
      "%, " + s.changes.length + " change" + (s.changes.length === 1 ? "" : "s") +
      (s.latest_move !== null ? "; latest move " + pct(s.latest_move) + " since run " + s.moved_since : "");
    if (s.dropped) { p.className = "down"; }
    card.appendChild(p);
    main.appendChild(card);
    drawn.push(chart(s, card));
  });
  drawn.forEach(function (svg) {
    var r = svg.getBoundingClientRect();
    svg.setAttribute("data-rect", [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]
                     .map(Math.round).join(","));
  });
  document.body.setAttribute("data-drawn", String(drawn.length));
})();
"""
