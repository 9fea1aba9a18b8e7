// websailor view: the question view. Opening #step-N (or #rC-step-N) unfolds that step's
// collapsed parts and scrolls it into view. Nothing from the server is put on the page here.
"use strict";

function openStep() {
  if (!location.hash) return;
  const step = document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (!step || !step.classList.contains("step")) return;
  for (const d of step.querySelectorAll("details")) d.open = true;
  step.scrollIntoView({ block: "start" });
}

document.addEventListener("DOMContentLoaded", openStep);
window.addEventListener("hashchange", openStep);
