// websailor view: shared page behaviour. No framework, nothing fetched from elsewhere;
// every server string is put on the page with textContent, never as HTML.
"use strict";

// The runs index follows runs that are still being written: it polls /api/runs.
function pollRuns(table) {
  const url = table.dataset.poll;
  async function refresh() {
    let runs;
    try { runs = await (await fetch(url)).json(); } catch (e) { return; }
    const body = table.tBodies[0];
    const known = new Map([...body.rows].map((tr) => [tr.dataset.rel, tr]));
    for (const run of runs) {
      let tr = known.get(run.rel);
      if (!tr) {
        tr = body.insertRow();
        tr.dataset.rel = run.rel;
        for (let i = 0; i < 7; i++) tr.insertCell();
        const a = document.createElement("a");
        a.href = run.url;
        a.textContent = run.rel;
        tr.cells[0].append(a);
        tr.cells[1].textContent = run.kind;
      }
      tr.cells[6].textContent = figuresText(run);
    }
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
