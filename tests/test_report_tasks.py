"""DeepResearch Bench's files in their published layout (written here, small): tasks by language,
criteria and references matched to them, and one-line errors for other layouts."""

import json
from pathlib import Path

import pytest

from websailor.errors import InputFormatError
from websailor.eval.report_tasks import CRITERIA_FILE, QUERY_FILE, REFERENCE_FILE, load_report_tasks

TASKS = [
    {"id": 1, "topic": "Finance & Business", "language": "zh", "prompt": "整理中国保险公司的融资情况"},
    {"id": 51, "topic": "Science & Technology", "language": "en", "prompt": "Survey solid-state battery startups"},
    {"id": 52, "topic": "Health", "language": "en", "prompt": "Compare GLP-1 drugs by trial outcomes"},
]


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _criteria(task: dict) -> dict:
    return {
        "id": task["id"],
        "prompt": task["prompt"],
        "dimension_weight": {"comprehensiveness": 0.3, "insight": 0.35, "instruction_following": 0.2, "readability": 0.15},
        "criterions": {
            "comprehensiveness": [{"criterion": "Covers the main players", "explanation": "names them", "weight": 0.6},
                                  {"criterion": "Gives figures", "explanation": "with dates", "weight": 0.4}],
            "insight": [{"criterion": "Explains causes", "explanation": "not only lists", "weight": 1.0}],
        },
    }  # fmt: skip


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    root = tmp_path / "deep_research_bench"
    _write(root / QUERY_FILE, TASKS)
    _write(root / CRITERIA_FILE, [_criteria(TASKS[0]), _criteria(TASKS[1])])  # none for task 52
    # the benchmark's own scripts match references by prompt; task 52's has none
    _write(root / REFERENCE_FILE, [{"id": 1, "prompt": TASKS[0]["prompt"], "article": "# 报告\n正文"},
                                   {"prompt": TASKS[1]["prompt"], "article": "# Report\nBody [1]"}])  # fmt: skip
    return root


def test_tasks_criteria_and_references_in_the_published_layout(bench: Path):
    tasks = load_report_tasks(bench)
    assert [t.id for t in tasks] == ["1", "51", "52"] and tasks[0].language == "zh"
    t = tasks[1]
    assert t.topic == "Science & Technology" and t.reference == "# Report\nBody [1]" and t.missing == []
    assert abs(sum(t.weights.values()) - 1) < 1e-9 and [c.weight for c in t.criteria["comprehensiveness"]] == [0.6, 0.4]
    assert t.criteria["insight"][0].criterion == "Explains causes"
    assert tasks[2].missing == ["criteria: no entry for this task", "reference: no report for this task"]
    # by language, and from the three files in one folder or the task file alone
    assert [t.id for t in load_report_tasks(bench, language="en")] == ["51", "52"]
    flat = bench.parent / "flat"
    flat.mkdir()
    for rel in (QUERY_FILE, CRITERIA_FILE, REFERENCE_FILE):
        (flat / rel.name).write_bytes((bench / rel).read_bytes())
    assert [t.reference for t in load_report_tasks(flat)] == [t.reference for t in tasks]
    alone = load_report_tasks(bench / QUERY_FILE)
    assert len(alone) == 3 and alone[0].missing == ["criteria: no criteria file", "reference: no reference file"]


def test_other_layouts_get_one_line_naming_the_expected_fields(tmp_path: Path, bench: Path):
    with pytest.raises(InputFormatError, match="no DeepResearch Bench task file"):
        load_report_tasks(tmp_path / "nowhere")
    qa = tmp_path / "qa.jsonl"
    _write(qa, [{"question": "Who?", "answer": "Me"}])
    with pytest.raises(
        InputFormatError,
        match=r"line 1 is not a DeepResearch Bench task: expected the fields id, topic, language, prompt, got answer, question",
    ):
        load_report_tasks(qa)
    bad = _criteria(TASKS[0]) | {"dimension_weight": {"depth": 1.0}}
    _write(bench / CRITERIA_FILE, [bad])
    with pytest.raises(InputFormatError, match="unknown dimension 'depth'"):
        load_report_tasks(bench)
    bad = _criteria(TASKS[0])
    bad["criterions"]["insight"] = [{"criterion": "x", "weight": "heavy"}]
    _write(bench / CRITERIA_FILE, [bad])
    with pytest.raises(InputFormatError, match="needs 'criterion' and a numeric 'weight'"):
        load_report_tasks(bench)
    (bench / QUERY_FILE).write_text('{"id": 1, "topic": "t", "language": "en", "prompt": "p"}\n{"id": 2, "to')
    with pytest.raises(InputFormatError, match="cut off"):
        load_report_tasks(bench)
