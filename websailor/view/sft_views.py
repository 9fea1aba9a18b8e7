"""Views of ``train sft`` runs.

- ``GET /sft/{rel}``: an SFT run's summary (its settings while it trains), the training loss
  curve (from the summary's ``loss_history``, or from the newest checkpoint's
  ``trainer_state.json`` while it trains) and its memory settings.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from websailor.view.context import context, json_file, number, run_folder, script_json
from websailor.view.discover import run_file

router = APIRouter()

SFT_SUMMARY = "sft_summary.json"
SFT_SETTINGS = "sft_settings.json"


def _mapping(summary: dict | None, key: str) -> dict:
    """``summary[key]`` when it is an object, else nothing (a hand-edited summary)."""
    value = (summary or {}).get(key)
    return value if isinstance(value, dict) else {}


def _sft_losses(run: Path, summary: dict | None) -> list[list[float]]:
    """``[[step, loss]]`` from the summary's ``loss_history``, or while the run trains, from the
    newest checkpoint's ``trainer_state.json``."""
    history = (summary or {}).get("loss_history")
    if history is None:
        states = sorted(run.glob("checkpoints/*/trainer_state.json"), key=lambda p: p.stat().st_mtime)
        state = json_file(run_file(run, str(states[-1].relative_to(run)))) if states else None
        history = (state or {}).get("log_history")
    points = []
    for h in history if isinstance(history, list) else []:
        if isinstance(h, dict) and number(h.get("step")) is not None and number(h.get("loss")) is not None:
            points.append([h["step"], h["loss"]])
    return points


@router.get("/sft", response_class=HTMLResponse)
def sft_root(request: Request) -> Response:
    """The SFT run that is the root itself."""
    return sft_run(".", request)


@router.get("/sft/{rel:path}", response_class=HTMLResponse)
def sft_run(rel: str, request: Request) -> Response:
    """An SFT run: its summary (or settings while it trains), loss curve and memory settings."""
    ctx = context(request)
    rel = rel.rstrip("/") or "."
    run = run_folder(ctx, rel, "sft")
    summary = json_file(run_file(run, SFT_SUMMARY))
    settings = (summary or {}).get("settings") or json_file(run_file(run, SFT_SETTINGS))
    losses = _sft_losses(run, summary)
    data = {"curves": [{"key": "loss", "title": "training loss", "points": losses}]}
    scalars = {
        k: v for k, v in (summary or {}).items() if k not in ("settings", "memory", "loss_history", "counts", "data")
    }
    return ctx.page(
        "sft_run.html",
        title=f"SFT run {rel}",
        rel=rel,
        summary=summary,
        scalars=scalars,
        settings=settings if isinstance(settings, dict) else {},
        memory=_mapping(summary, "memory"),
        counts=_mapping(summary, "counts"),
        data_files=[d for d in (summary or {}).get("data") or [] if isinstance(d, (str, dict))]
        if isinstance((summary or {}).get("data"), list)
        else [],
        data=script_json(data),
        has_losses=bool(losses),
    )
