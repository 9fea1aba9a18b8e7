"""The shape of a synthesized QA item's nested fields, checked when a QA file is read
(:func:`websailor.synth.dataset.read_items`), so that a hand-edited or foreign file gets one
line naming the field (``subgraph.edges.0.evidence``), not a ``TypeError`` deep inside
``synth stats``, training or the viewer.

Only the types are checked, and only of the fields present (older files lack some): fields
this schema does not name are kept as they are. The top-level fields every item must have are
:data:`websailor.synth.dataset.ITEM_FIELDS`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from websailor.synth.constraints import KINDS

#: a count: a whole number, not negative
Count = Annotated[StrictInt, Field(ge=0)]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class Node(_Shape):
    """A page of the subgraph."""

    id: StrictStr


class Edge(_Shape):
    """A link of the subgraph, with the sentence that supports it."""

    src: StrictStr
    dst: StrictStr
    evidence: StrictStr | None = None


class Subgraph(_Shape):
    """The sampled subgraph (paper section 3.1)."""

    nodes: list[Node]
    edges: list[Edge]


class Evidence(_Shape):
    """A sentence that supports a constraint."""

    sentence: StrictStr | None = None


class ConstraintParams(_Shape):
    """A constraint's parameters; a link worded by its evidence names the phrase and its form."""

    relation: StrictStr | None = None
    form: Literal["subject", "object"] | None = None
    key: StrictStr | None = None


class Constraint(_Shape):
    """One constraint of the question: a kind :class:`websailor.synth.constraints.Constraint`
    knows, the phrase the question states, and, for a ``described`` one, the description's key."""

    kind: Literal[KINDS]  # type: ignore[valid-type]
    params: ConstraintParams
    phrase: StrictStr
    evidence: list[Evidence] | None = None

    @model_validator(mode="after")
    def _described_has_a_key(self) -> Constraint:
        if self.kind == "described" and self.params.key is None:
            raise ValueError("a described constraint needs params.key, the description it names (text)")
        return self


class Operator(_Shape):
    """One uncertainty operator applied to the question (paper section 3.1)."""

    op: StrictStr
    params: dict[str, Any] | None = None


class Step(_Shape):
    """One step of the solution path: a search names its query, a visit its URL."""

    action: StrictStr | None = None
    mentions: list[StrictStr] | None = None
    query: StrictStr | None = None
    url: StrictStr | None = None

    @model_validator(mode="after")
    def _names_its_target(self) -> Step:
        needs = {"search": "query", "visit": "url"}.get(self.action or "")
        if needs and getattr(self, needs) is None:
            raise ValueError(f"a {self.action} step needs its {needs} (text)")
        return self


class Rendering(_Shape):
    """How the question was written: the template, or the LLM writer (and why it was not)."""

    mode: StrictStr | None = None
    reason: StrictStr | None = None
    detail: StrictStr | None = None
    template: StrictStr | None = None
    facts_used: list[StrictInt] | None = None


class Difficulty(_Shape):
    """The difficulty filter's rating; present fields may not be null."""

    k: Count = None  # type: ignore[assignment]  # absent is fine, an explicit null is not
    correct: Count = None  # type: ignore[assignment]


class ItemShape(_Shape):
    """The nested fields of an item, each optional."""

    subgraph: Subgraph | None = None
    constraints: list[Constraint] | None = None
    uncertainty: list[Operator] | None = None
    procedure: list[Step] | None = None
    verification: dict[str, Any] | None = None
    rendering: Rendering | None = None
    difficulty: Difficulty | StrictFloat | StrictInt | None = None
    rejected_before: dict[str, Count] | None = None
    split: StrictStr | None = None
    aliases: list[StrictStr] | None = None
    has_cycle: StrictBool | None = None


_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", str: "text", list: "a list", dict: "an object"}
_UNION_MEMBERS = ("str", "int", "float", "bool", "dict[", "list[", "function-", "tagged-", "Difficulty")


def _is_text(text: str) -> bool:
    """Whether ``text`` is printable Unicode text: no lone surrogates, no control characters
    other than tab and newline."""
    return not any(0xD800 <= ord(ch) <= 0xDFFF or (ord(ch) < 32 and ch not in "\t\n") or ord(ch) == 127 for ch in text)


def shape_error(record: dict) -> str | None:
    """Why ``record``'s nested fields are not those of a QA item (``"field
    'subgraph.edges.0.evidence' is a number: input should be a valid string"``), ``None`` when
    they are."""
    question = record.get("question")
    if isinstance(question, str) and not _is_text(question):
        return "field 'question' holds characters that are not text (a lone surrogate or a control character)"
    try:
        ItemShape.model_validate(record)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(x) for x in err["loc"]]
        where = ".".join(x for i, x in enumerate(loc) if not (i and x.startswith(_UNION_MEMBERS)))
        if err["type"] == "missing":
            return f"field {where!r} is missing"
        given = err.get("input")
        got = "null" if given is None else _JSON_TYPES.get(type(given), type(given).__name__)
        if isinstance(given, float) and given != given or given in (float("inf"), float("-inf")):
            got = f"{given} (not a finite number)"
        msg = err["msg"]
        return f"field {where!r} is {got}: {msg[:1].lower()}{msg[1:]}"
    return None
