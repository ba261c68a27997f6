"""One join of Algorithm 1 (paper §6, Fig. 3), written once: `<L, mj> ⋈ <a, mk> → <R, mi>`.

The four ways differ only in *where* the two partial deltas are computed — Δ(ΔL⋈a) at `j1`,
Δ(L⋈Δa) at `j2`:

| case | paper | j1 | j2 |
|---|---|---|---|
| a | in place (Fig. 3a) | mk (a's home) | mj (L's machine) |
| b | copy L (Fig. 3c) | mk | mk |
| c | copy a (Fig. 3b) | mj | mj |
| d | copy both (Fig. 3d) | mi | mi |

Everything else follows: Δ(ΔL⋈a) reads ΔL and the relation a (with Δa, its compensation) where
it runs; Δ(L⋈Δa) reads Δa and the relation L (with ΔL). A side needed away from its own machine
is copied there — only its delta when only the delta is read, else its delta and a relation kept
from it. The partial deltas are copied to mi when computed elsewhere, united and applied there.
The DP's arithmetic, its capacity figures, the plan builder and the exhaustive reference all
read these needs from one `Step`; `steps_from` lists the steps from one pair of inputs in the
order the DP tries them.

Must not: price or build anything itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

CASES = ("a", "b", "c", "d")
Need = Literal["delta", "relation"]


Charge = tuple[int, str, int, bool]
"""(machine that does the work, edge key, machine the edge's input comes from, whether it
keeps a relation there): one item of what a step costs."""


@dataclass(frozen=True)
class Step:
    mj: int
    """The machine of the left input L (a join sequence)."""
    mk: int
    """The home of the right input a (a base relation)."""
    mi: int
    """The machine of the result R = L ⋈ a."""
    case: str
    j1: int
    """Where Δ(ΔL⋈a) is computed."""
    j2: int
    """Where Δ(L⋈Δa) is computed."""

    left: tuple[tuple[int, Need], ...] = ()
    """Machines other than L's own where L is needed, and as what."""
    right: tuple[tuple[int, Need], ...] = ()
    """Machines other than a's home where a is needed, and as what."""
    charges: tuple[Charge, ...] = ()
    """Every edge the step adds, as what it costs where: the copies of L and a (and the
    relations kept from them), the two partial joins, their copies to mi, the union and the
    result's DeltaToRel. Keys name the edge's figures: cL/dL, ca/da, j1, j2, c1, c2, u, dJ."""

    def left_needs(self) -> dict[int, Need]:
        return dict(self.left)

    def right_needs(self) -> dict[int, Need]:
        return dict(self.right)


def _needs(home: int, delta_at: int, relation_at: int) -> dict[int, Need]:
    out: dict[int, Need] = {}
    if delta_at != home:
        out[delta_at] = "delta"
    if relation_at != home:
        out[relation_at] = "relation"  # brings its delta along
    return out


@cache
def step(mj: int, mk: int, mi: int, case: str) -> Step | None:
    """The step of `case`, or None where it is the same as another (a copy of a side to the
    machine it is already on is case (a)).

    >>> step(0, 1, 2, "a").left_needs(), step(0, 1, 2, "a").right_needs()
    ({1: 'delta'}, {0: 'delta'})
    >>> step(0, 1, 2, "d").left_needs(), step(0, 0, 0, "d") is None
    ({2: 'relation'}, True)
    """
    if case == "a":
        j1, j2 = mk, mj
    elif case in ("b", "c"):
        if mj == mk:
            return None
        j1 = j2 = mk if case == "b" else mj
    elif case == "d":
        if mj == mi and mk == mi:
            return None
        j1 = j2 = mi
    else:
        raise ValueError(f"no case {case!r}; the cases are {CASES}")
    left = _needs(mj, delta_at=j1, relation_at=j2)
    right = _needs(mk, delta_at=j2, relation_at=j1)
    charges: list[Charge] = []
    for home, needs, c, d in ((mj, left, "cL", "dL"), (mk, right, "ca", "da")):
        for m, need in needs.items():
            charges.append((m, c, home, False))
            if need == "relation":
                charges.append((m, d, m, True))
    charges += [(j1, "j1", j1, False), (j2, "j2", j2, False)]
    for where, c in ((j1, "c1"), (j2, "c2")):
        if where != mi:
            charges.append((mi, c, where, False))
    charges += [(mi, "u", mi, False), (mi, "dJ", mi, True)]
    return Step(mj, mk, mi, case, j1, j2, tuple(left.items()), tuple(right.items()),
                tuple(charges))


@cache
def steps_from(mj: int, mk: int, machines: int) -> tuple[Step, ...]:
    """Every step joining L on `mj` with a on `mk` into a result on any of `machines`, in the
    order the DP tries them: by result machine, then case.

    >>> [(s.mi, s.case) for s in steps_from(0, 0, 2)]
    [(0, 'a'), (1, 'a'), (1, 'd')]
    """
    return tuple(s for mi in range(machines) for case in CASES
                 if (s := step(mj, mk, mi, case)) is not None)
