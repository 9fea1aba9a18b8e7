// websailor view: small SVG line charts of run curves (RL step log, SFT loss). No library;
// every value reaches the page with textContent or setAttribute, never as HTML.
//
// A container <div class="charts" data-source="ID" [data-poll="URL"]> is filled with one
// panel per curve of the JSON in <script type="application/json" id="ID">: {curves: [{key,
// title, points: [[step, value], ...]}]}. With data-poll, the URL is fetched every few seconds
// and the panels are redrawn when new steps appear. A curve of a single step is drawn as one
// point in the middle of the panel, its value written beside it, with the step under it.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const W = 340, H = 190, PAD = { l: 48, r: 10, t: 22, b: 26 };
const POLL_MS = 2000;

function svgEl(name, attrs) {
  const el = document.createElementNS(SVG_NS, name);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  return el;
}

function fmt(v) {
  if (!isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
  return Number.isInteger(v) ? String(v) : v.toFixed(a >= 100 ? 1 : 3);
}

// [lo, hi] of the values; when they are all one value v, a range around it with v in the middle
// (steps: one step either side).
function extent(values, steps) {
  let lo = Math.min(...values), hi = Math.max(...values);
  if (lo === hi && steps) { lo -= 1; hi += 1; }
  else if (lo === hi) { lo -= Math.abs(lo) * 0.1 || 0.5; hi += Math.abs(hi) * 0.1 || 0.5; }
  return [lo, hi];
}

function tick(svg, x, y, anchor, text) {
  const t = svgEl("text", { x: x, y: y, "text-anchor": anchor, class: "tick" });
  t.textContent = text;
  svg.append(t);
}

// One panel: an <svg class="chart"> with axes, the curve as a <path>, a dot per step and a
// hover read-out of the nearest step and its value.
function lineChart(curve) {
  const svg = svgEl("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H, "data-key": curve.key });
  const title = svgEl("text", { x: PAD.l, y: 14, class: "chart-title" });
  title.textContent = curve.title;
  svg.append(title);
  const pts = curve.points;
  if (!pts.length) {
    const none = svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "mute" });
    none.textContent = "not logged";
    svg.append(none);
    return svg;
  }
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const oneStep = Math.min(...xs) === Math.max(...xs), oneValue = Math.min(...ys) === Math.max(...ys);
  const [x0, x1] = extent(xs, true);
  const [y0, y1] = extent(ys, false);
  const sx = (x) => PAD.l + ((x - x0) / (x1 - x0)) * (W - PAD.l - PAD.r);
  const sy = (y) => H - PAD.b - ((y - y0) / (y1 - y0)) * (H - PAD.t - PAD.b);
  svg.append(svgEl("line", { x1: PAD.l, y1: H - PAD.b, x2: W - PAD.r, y2: H - PAD.b, class: "axis" }));
  svg.append(svgEl("line", { x1: PAD.l, y1: PAD.t, x2: PAD.l, y2: H - PAD.b, class: "axis" }));
  // the value axis: its two ends, or the one value when every point has it
  for (const v of oneValue ? [ys[0]] : [y0, y1]) tick(svg, PAD.l - 4, sy(v) + 4, "end", fmt(v));
  // the step axis: the first and last step, or the one step under its point
  if (oneStep) tick(svg, sx(xs[0]), H - PAD.b + 14, "middle", "step " + fmt(xs[0]));
  else for (const [v, anchor] of [[x0, "start"], [x1, "end"]]) tick(svg, sx(v), H - PAD.b + 14, anchor, "step " + fmt(v));
  const d = pts.map((p, i) => (i ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
  svg.append(svgEl("path", { d: d, class: "curve", fill: "none" }));
  if (pts.length === 1) {
    const value = svgEl("text", { x: sx(xs[0]) + 8, y: sy(ys[0]) - 8, class: "point-value" });
    value.textContent = fmt(ys[0]);
    svg.append(value);
  }
  if (pts.length <= 400) {
    for (const p of pts) svg.append(svgEl("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2, class: "dot" }));
  }
  const marker = svgEl("circle", { r: 4, class: "hover-dot", visibility: "hidden" });
  const label = svgEl("text", { x: W - PAD.r, y: 14, "text-anchor": "end", class: "hover-label" });
  svg.append(marker, label);
  svg.addEventListener("mousemove", (ev) => {
    const box = svg.getBoundingClientRect();
    const x = ((ev.clientX - box.left) / box.width) * W;
    let best = pts[0];
    for (const p of pts) if (Math.abs(sx(p[0]) - x) < Math.abs(sx(best[0]) - x)) best = p;
    marker.setAttribute("cx", sx(best[0]));
    marker.setAttribute("cy", sy(best[1]));
    marker.setAttribute("visibility", "visible");
    label.textContent = "step " + best[0] + ": " + fmt(best[1]);
  });
  svg.addEventListener("mouseleave", () => {
    marker.setAttribute("visibility", "hidden");
    label.textContent = "";
  });
  return svg;
}

function drawCharts(box, data) {
  box.replaceChildren(...(data.curves || []).map(lineChart));
  box.dataset.steps = String(data.steps === undefined ? "" : data.steps);
  box.dataset.lastStep = String(data.last_step === undefined || data.last_step === null ? "" : data.last_step);
}

// New steps of rollouts.jsonl become rows of the steps table.
function addStepRows(steps) {
  const table = document.getElementById("rl-steps-table");
  if (!table || !steps) return;
  const body = table.tBodies[0];
  const known = new Set([...body.rows].map((tr) => tr.dataset.step || tr.cells[0].textContent.replace("step ", "")));
  const run = table.dataset.run; // the run page's URL, without a query
  for (const [step, n] of steps) {
    if (known.has(String(step))) continue;
    const tr = body.insertRow();
    tr.dataset.step = String(step);
    const a = document.createElement("a");
    a.href = run + "?step=" + encodeURIComponent(String(step));
    a.textContent = "step " + step;
    tr.insertCell().append(a);
    tr.insertCell().textContent = String(n);
  }
}

function follow(box) {
  const error = document.getElementById("rl-poll-error");
  async function refresh() {
    let data;
    try {
      const resp = await fetch(box.dataset.poll);
      data = await resp.json();
    } catch (e) {
      return; // the server is restarting or gone: keep what is drawn
    }
    if (data.error) {
      if (error) { error.textContent = data.error; error.hidden = false; }
      return;
    }
    if (error) error.hidden = true;
    const tail = document.getElementById("rl-log-tail"); // a half-written last line of the log
    if (tail) { tail.textContent = data.unfinished || ""; tail.hidden = !data.unfinished; }
    if (String(data.steps) !== box.dataset.steps || String(data.last_step) !== box.dataset.lastStep) {
      drawCharts(box, data);
      const count = document.getElementById("rl-steps");
      if (count) count.textContent = data.steps + (data.steps === 1 ? " step" : " steps");
    }
    addStepRows(data.rollout_steps);
  }
  setInterval(refresh, POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  for (const box of document.querySelectorAll("div.charts[data-source]")) {
    const src = document.getElementById(box.dataset.source);
    if (!src) continue;
    drawCharts(box, JSON.parse(src.textContent));
    if (box.dataset.poll && !document.body.dataset.static) follow(box);
  }
});
