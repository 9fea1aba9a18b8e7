// websailor view: the eval views. In the question view, opening #step-N (or #rC-step-N) unfolds that step's
// collapsed parts and scrolls it into view. Nothing from the server is put on the page here.
"use strict";

function openStep() {
  if (!location.hash) return;
  let id;
  try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { return; } // a malformed #%E0%A4%A
  const step = document.getElementById(id);
  if (!step || !step.classList.contains("step")) return;
  for (const d of step.querySelectorAll("details")) d.open = true;
  for (let p = step.parentElement; p; p = p.parentElement) if (p.tagName === "DETAILS") p.open = true; // a step a context summary replaced
  step.scrollIntoView({ block: "start" });
}

// A table shown while its file is still being read reloads itself until the file is read.
function reloadWhileReading() {
  const note = document.getElementById("reading");
  if (note && !document.body.dataset.static) setTimeout(() => location.reload(), Number(note.dataset.reload) || 2000);
}

document.addEventListener("DOMContentLoaded", () => { openStep(); reloadWhileReading(); });
window.addEventListener("hashchange", openStep);
