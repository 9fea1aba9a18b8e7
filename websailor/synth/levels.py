"""The difficulty ladder of synthesized items (docs/synthesis.md, "Difficulty levels"): what each
level stands for (:class:`Level`, :data:`LEVELS`) and the knobs of one item at a level
(:class:`ItemConfig`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Level:
    """What one rung of the difficulty ladder stands for (docs/synthesis.md, "Difficulty
    levels"). ``hops``: the fewest linked entities (hops) an item states; ``n_nodes``,
    ``min_constraints``, ``max_constraints``: the defaults of :class:`ItemConfig` at this level;
    ``describe``: linked entities are named by their description (else plainly, by title);
    ``attributes``: blurred-attribute operators (``vague_period``, ``vague_number``,
    ``comparison``, ``relative_time``) may be stated, and one is forced when the target has a
    value; ``topology_cap`` / ``cycle_share``: whether the dataset loop's topology and cycle
    balancing applies to items of this level (only where several shapes, or cycles, can occur);
    ``value_tries``: subgraphs drawn until one has a node with a value to blur (the last is kept
    either way); ``mask_p``: the chance that an item may state a name mask at all (the
    target's name is otherwise left for the other constraints to pin down);
    ``max_mask_share``: the dataset loop refuses an item with a name mask that would lift the
    share of such items of this level above it (``mask_cap``)."""

    level: int
    hops: int
    n_nodes: tuple[int, ...]
    min_constraints: int
    max_constraints: int
    describe: bool
    attributes: bool
    topology_cap: bool
    cycle_share: bool
    value_tries: int = 1
    mask_p: float = 1.0
    max_mask_share: float = 1.0


#: the difficulty ladder, level 1 (a one-hop lookup) to level 4 (today's multi-hop, obfuscated,
#: cyclic SailorFog-QA-V2 items, the default)
LEVELS: dict[int, Level] = {
    1: Level(1, 1, (2,), 2, 2, describe=False, attributes=False, topology_cap=False, cycle_share=False),
    2: Level(2, 1, (2,), 2, 3, describe=True, attributes=True, topology_cap=False, cycle_share=False, value_tries=3),
    3: Level(
        3,
        2,
        (3, 4, 5),
        3,
        4,
        describe=True,
        attributes=True,
        topology_cap=True,
        cycle_share=False,
        mask_p=0.2,
        max_mask_share=0.25,
    ),
    4: Level(
        4,
        1,
        (3, 4, 5, 6),
        3,
        5,
        describe=True,
        attributes=True,
        topology_cap=True,
        cycle_share=True,
        mask_p=0.2,
        max_mask_share=0.25,
    ),
}
#: the level of an item made without one (and of files written before levels existed)
DEFAULT_LEVEL = 4
#: operators that blur one of the target's attributes (the share the ladder keeps at levels 2-4)
ATTRIBUTE_OPS = frozenset({"vague_period", "vague_number", "comparison", "relative_time"})


def check_level(level: object) -> int:
    """``level`` as an int in 1..4.

    Raises:
        ValueError: anything else (the message names ``--level``).
    """
    if isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS:
        raise ValueError(f"--level must be 1, 2, 3 or 4 (one-hop lookup to multi-hop cyclic), got {level!r}")
    return level


@dataclass
class ItemConfig:
    """Knobs of one item. ``level``: the rung of the difficulty ladder (:data:`LEVELS`; 4, the
    default, is the multi-hop obfuscated item); the other fields default to that level's
    budgets. ``n_nodes``: subgraph sizes to draw from; ``min_constraints``: constraints stated
    even when fewer already make the target unique (more clues to combine, none sufficient
    alone); ``max_constraints``: constraints added before giving up on uniqueness;
    ``worded_p``: at each step of the subgraph walk, the chance that it prefers a link whose
    evidence states a relation phrase (so that questions word links by their relation, not
    as associations); ``described_p``: the chance that the question also describes the answer
    by its own description (a ``described`` constraint: "Which place is a major river in
    northeast Africa, and ...?"), so that a search of the question's own text lists the
    answer's page, as in most questions people write (issue 38). 0 draws nothing (items of a
    seed stay as they were).

    Raises:
        ValueError: a level outside 1..4, or budgets that contradict each other.
    """

    n_nodes: tuple[int, ...] | None = None
    backtrack_p: float = 0.3
    min_constraints: int | None = None
    max_constraints: int | None = None
    level: int = DEFAULT_LEVEL
    worded_p: float = 0.8
    described_p: float = 0.0

    def __post_init__(self) -> None:
        spec = LEVELS[check_level(self.level)]
        self.n_nodes = tuple(self.n_nodes) if self.n_nodes is not None else spec.n_nodes
        self.min_constraints = self.min_constraints if self.min_constraints is not None else spec.min_constraints
        self.max_constraints = self.max_constraints if self.max_constraints is not None else spec.max_constraints
        if not self.n_nodes or min(self.n_nodes) < 2:
            raise ValueError(f"n_nodes must be sizes of at least 2, got {self.n_nodes}")
        if not 1 <= self.min_constraints <= self.max_constraints:
            raise ValueError(
                f"need 1 <= min_constraints <= max_constraints, got {self.min_constraints}, {self.max_constraints}"
            )
        if not 0.0 <= self.backtrack_p <= 1.0:
            raise ValueError(f"backtrack_p must be in [0, 1], got {self.backtrack_p}")
        if not 0.0 <= self.worded_p <= 1.0:
            raise ValueError(f"worded_p must be in [0, 1], got {self.worded_p}")
        if not 0.0 <= self.described_p <= 1.0:
            raise ValueError(f"--described-share must be in [0, 1], got {self.described_p}")

    @property
    def spec(self) -> Level:
        """The :class:`Level` this config is at."""
        return LEVELS[self.level]
