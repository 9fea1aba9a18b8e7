// websailor view: shared page behaviour. No framework, nothing fetched from elsewhere;
// every server string is put on the page with textContent, never as HTML.
"use strict";

// The runs index follows runs that are still being written: it polls /api/runs, adds the runs
// that appeared, updates every row (a running eval becomes graded, sizes grow) and drops the
// runs that are gone.
function runLink(run) {
  const a = document.createElement("a");
  a.href = run.url;
  a.textContent = run.rel;
  return a;
}

function pollRuns(table) {
  const url = table.dataset.poll;
  async function refresh() {
    let runs;
    try { runs = await (await fetch(url)).json(); } catch (e) { return; }
    if (!Array.isArray(runs)) return;
    const body = table.tBodies[0];
    const known = new Map([...body.rows].filter((tr) => tr.dataset.rel !== undefined).map((tr) => [tr.dataset.rel, tr]));
    const seen = new Set();
    for (const run of runs) {
      seen.add(run.rel);
      let tr = known.get(run.rel);
      if (!tr) {
        tr = body.insertRow();
        tr.dataset.rel = run.rel;
        for (let i = 0; i < 7; i++) tr.insertCell();
      }
      if (tr.dataset.kind !== run.kind) {
        tr.dataset.kind = run.kind;
        tr.cells[0].replaceChildren(runLink(run));
        tr.cells[1].textContent = run.kind;
      }
      const f = run.figures || {};
      tr.cells[2].textContent = f.model || "";
      tr.cells[3].textContent = f.env || "";
      tr.cells[4].textContent = run.modified || "";
      tr.cells[5].textContent = run.size || "";
      tr.cells[6].textContent = figuresText(run);
      tr.cells[6].classList.toggle("error", Boolean(f.error));
    }
    for (const [rel, tr] of known) if (!seen.has(rel)) tr.remove();
    for (const tr of [...body.rows]) if (tr.classList.contains("none") && runs.length) tr.remove();
  }
  setInterval(refresh, 5000);
}

// "1 step", "2 steps"
function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

function pct(x) { return x === null || x === undefined ? "n/a" : (100 * x).toFixed(1); }

function figuresText(run) {
  const f = run.figures || {};
  if (f.error) return f.error;
  if (run.kind === "eval" && f.avg_at_k !== undefined) {
    const ci = f.ci ? " (" + pct(f.ci[0]) + "-" + pct(f.ci[1]) + ")" : "";
    return "Avg@" + f.k + " " + pct(f.avg_at_k) + ci + ", Pass@" + f.k + " " + pct(f.pass_at_k) + ", format validity " + pct(f.format_validity);
  }
  if (run.kind === "rl") return plural(f.steps, "step") + (f.reward !== null && f.reward !== undefined ? ", last reward " + f.reward.toFixed(3) : "");
  return f.note || "";
}

document.addEventListener("DOMContentLoaded", () => {
  const runs = document.getElementById("runs");
  if (runs && runs.dataset.poll && !document.body.dataset.static) pollRuns(runs);
});
