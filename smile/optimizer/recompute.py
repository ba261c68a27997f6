"""Recomputing a relation vertex instead of applying its delta, and the choice between the two
per push (docs/design/recompute.md).

A `Recompute` edge is the alternative to the DeltaToRel (or Aggregate) that keeps a relation
vertex `v`: it computes v's contents at `t` from relations whose contents at `t` it can read,
in one transaction with TS(v) (`operators/recompute.py`). It is derived from D, never stored:
every relation vertex of D that is not a captured base has one (`recomputes`), read from the
incremental edges that feed it:

- a copy of a base relation (DeltaToRel ← CopyDelta ← ΔR): R̂ on its own machine, filtered
  and projected as the copy is, its contents moved when R̂ lives elsewhere;
- a join step's relation (DeltaToRel ← Union ← two Joins): the two relations the joins probe,
  L̂ and X̂, on v's machine, joined on the joins' predicates — an input that is itself a join
  step's relation on v's machine replaced by the relations it is computed from (`_flattened`);
- anything else (an aggregate, an outer join, a copy of an intermediate): the parts' base
  relations as of `t`, moved to v's machine, as a deploy's first fill computes them
  (`from_bases`).

A push then takes a path (`push_paths`). *Incremental*: every vertex of the push runs its
incoming edge, as always. *Recompute*: every relation vertex of the push that is not a
captured base is recomputed, and a delta vertex whose every reader is then at `t` is *skipped*
— its TS moved to `t` with no row written, as no reader will ever read that interval — while a
delta some other vertex still reads from below `t` (a sharing outside the push) is advanced as
always, with everything it reads. *Mixed*: some relation vertices recomputed, the others kept
by their deltas (a copy of a base whose delta is small, under joins whose deltas are not),
the deltas skipped by the same rule. A relation other than an MV that would be recomputed and
that nothing in the push reads at `t` — a join step under an MV recomputed from the relations
below it — is *left stale* instead: emptied, its TS moved, marked, recomputed before anything
reads it again (`may_leave_stale`; docs/design/recompute.md, *Stale relations*). Every path is
priced by the time model: an edge run as always by its line at the pending delta sizes, a
recomputation by the `recompute` line at the sizes of what it reads and writes; the executor
takes the cheapest (no ratio constant: the crossover falls out of the lines).

Must not: touch a database; say how a recomputation is written in SQL (operators do).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from smile.optimizer.expr import Expr
from smile.optimizer.plan import Aggregate, CopyDelta, DeltaToRel, Join, Union, Vertex, edge_seconds

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Iterator

    from smile.costmodel.time_model import TimeModel
    from smile.optimizer.global_plan import GlobalPlan

Mode = Literal["incremental", "recompute", "skip", "stale"]
Path = Literal["incremental", "recompute", "mixed"]
Forced = Literal["incremental", "recompute"]


@dataclass(frozen=True)
class Recompute:
    """v's contents at t from `inputs` at t (see the module)."""

    inputs: tuple[Vertex, ...]
    """Relation vertices read at `t`: on dst's machine, or (a base's R̂) moved from their own.
    Empty with `from_bases`."""
    dst: Vertex
    aliases: tuple[tuple[str, ...], ...] = ()
    """The aliases of dst's parts each input holds."""
    predicates: tuple[tuple[str, str], ...] = ()
    """Equalities between the inputs (alias-qualified), for a join step's relation."""
    filters: tuple[str, ...] = ()
    """Selections still to apply, over alias-qualified columns (a copy's, a join's)."""
    from_bases: bool = False
    """Computed from the parts' base relations as of t, as a deploy's fill does."""
    kind: Literal["recompute"] = field(default="recompute", init=False)

    @property
    def sources(self) -> tuple[Vertex, ...]:
        return self.inputs

    def moved(self) -> tuple[Vertex, ...]:
        """The inputs whose contents cross machines."""
        return tuple(s for s in self.inputs if s.machine != self.dst.machine)


def shadow(base_delta: Vertex) -> Vertex:
    """A base relation's R̂ on the machine of its captured ΔR."""
    return Vertex("relation", base_delta.expr, base_delta.machine)


def derive(plan: GlobalPlan, v: Vertex) -> Recompute | None:
    """The Recompute edge of relation vertex `v` in D (None for a captured base, a delta, or
    a vertex without an incoming edge)."""
    e = plan.incoming.get(v)
    if v.kind != "relation" or v.base or e is None:
        return None
    if isinstance(e, DeltaToRel):
        feed = plan.incoming.get(e.src)
        if isinstance(feed, CopyDelta) and feed.src.base:
            return Recompute((shadow(feed.src),), v, ((v.expr.parts[0].alias,),),
                             filters=feed.selection)
        if isinstance(feed, Union) and not v.expr.beyond:
            joins = [plan.incoming.get(s) for s in feed.sources]
            if all(isinstance(j, Join) for j in joins):
                by_side = {j.delta_side: j for j in joins if isinstance(j, Join)}
                if set(by_side) == {"left", "right"}:
                    lj, rj = by_side["left"], by_side["right"]
                    side = lj.dst.expr
                    return _flattened(plan, Recompute(
                        (rj.other, lj.other), v, (side.left, (side.right,)), lj.predicates,
                        tuple(dict.fromkeys((*lj.filters, *rj.filters)))))
    if isinstance(e, (DeltaToRel, Aggregate)):
        return Recompute((), v, from_bases=True)
    return None


def _flattened(plan: GlobalPlan, r: Recompute) -> Recompute:
    """A join step's Recompute reading, in place of each input that is itself a join step's
    relation on the same machine, the relations that one is recomputed from (recursively):
    the MV of `(a ⋈ b) ⋈ c` from â, b̂ and ĉ, not from `a ⋈ b`, which it then need not wait
    for — recomputed beside it, or left stale (`recompute_modes`)."""
    inputs: list[Vertex] = []
    aliases: list[tuple[str, ...]] = []
    predicates, filters = list(r.predicates), list(r.filters)
    for s, names in zip(r.inputs, r.aliases, strict=True):
        inner = derive(plan, s) if s.machine == r.dst.machine else None
        if inner is not None and not inner.from_bases and len(inner.inputs) > 1:
            inputs += inner.inputs
            aliases += inner.aliases
            predicates += inner.predicates
            filters += inner.filters
        else:
            inputs.append(s)
            aliases.append(names)
    return Recompute(tuple(inputs), r.dst, tuple(aliases), tuple(dict.fromkeys(predicates)),
                     tuple(dict.fromkeys(filters)))


def recomputes(plan: GlobalPlan) -> dict[Vertex, Recompute]:
    """Every relation vertex's Recompute edge in D, derived once per plan value."""
    cached: dict[Vertex, Recompute] | None = plan.__dict__.get("_recomputes")
    if cached is None:
        cached = {}
        for v in plan.incoming:
            r = derive(plan, v)
            if r is not None:
                cached[v] = r
        plan.__dict__["_recomputes"] = cached  # frozen: written past __setattr__, as caches are
    return cached


def readers(plan: GlobalPlan, d: Vertex) -> set[Vertex]:
    """The vertices that may read delta `d` from below their own TS: those whose incoming
    edge reads it, and those whose Recompute reads the relation `d` keeps (rolled back to an
    earlier `t` with `d`'s rows). Told once per plan value."""
    table: dict[Vertex, set[Vertex]] | None = plan.__dict__.get("_recompute_readers")
    if table is None:
        table = {}
        for e in plan.edges:
            for s in e.sources:
                table.setdefault(s, set()).add(e.dst)
        kept = {e.dst: e.src for e in plan.edges if isinstance(e, DeltaToRel)}
        for r in recomputes(plan).values():
            for i in r.inputs:
                if i in kept:
                    table.setdefault(kept[i], set()).add(r.dst)
        plan.__dict__["_recompute_readers"] = table
    return table.get(d, set())


def relation_readers(plan: GlobalPlan, v: Vertex) -> set[Vertex]:
    """The vertices that read relation `v`: those whose incoming edge reads it (a join
    probing it), and those whose Recompute reads it. Told once per plan value."""
    table: dict[Vertex, set[Vertex]] | None = plan.__dict__.get("_relation_readers")
    if table is None:
        table = {}
        for e in plan.edges:
            for s in e.sources:
                if s.kind == "relation":
                    table.setdefault(s, set()).add(e.dst)
        for r in recomputes(plan).values():
            for i in r.inputs:
                table.setdefault(i, set()).add(r.dst)
        plan.__dict__["_relation_readers"] = table
    return table.get(v, set())


def recoverable(plan: GlobalPlan, d: Vertex) -> bool:
    """Whether a crash may empty delta `d` (an UNLOGGED table, docs/design/agents.md,
    *Unlogged deltas*): its loss is made good by one push of the one sharing it feeds, which
    recomputes every relation below it and skips it (`lost_below`). So `d` is an
    intermediate delta (a join's, a copy's, a Union's view of them) that feeds one sharing,
    outside any consistent group (whose MVs always apply deltas); and everything below it is
    kept by joins, Unions, copies and DeltaToRels, every relation among it recomputable."""
    e = plan.incoming.get(d)
    if not d.is_delta or d.base or not isinstance(e, (Join, CopyDelta, Union)) \
            or len(plan.shr.get(d, ())) != 1:
        return False
    (name,) = plan.shr[d]
    if plan.sharing(name).group:
        return False
    rec = recomputes(plan)
    for u in plan.descendants(d):
        if not isinstance(plan.incoming[u], (Join, CopyDelta, Union, DeltaToRel)) or (
                u.kind == "relation" and u not in rec):
            return False
    return True


def lost_below(plan: GlobalPlan, lost: Collection[Vertex], todo: Collection[Vertex]
               ) -> set[Vertex]:
    """The relations of a push over `todo` that must be recomputed because deltas above them
    lost their rows in a crash (`lost`): every relation below one, so that it, and every
    delta between, is skipped past the interval that is gone."""
    return {u for d in lost if d in todo for u in plan.descendants(d)
            if u in todo and u.kind == "relation"}


def recompute_modes(plan: GlobalPlan, todo: Iterable[Vertex],
                    chosen: Collection[Vertex] | None = None, stale: Collection[Vertex] = (),
                    leave_stale: bool = True) -> dict[Vertex, Mode]:
    """The recompute path over the push's vertices `todo`: each relation vertex that has a
    Recompute edge (and is among `chosen`, if given, or is `stale` now) recomputed, the
    others advanced by their deltas; each delta skipped unless a vertex outside the push
    reads it, or an advanced vertex does (then it and all it reads are advanced as always).
    With `leave_stale`, a relation to recompute that nothing reads at `t` is left stale
    instead (`may_leave_stale`): its recomputation deferred to a push that needs it. A
    delta among `stale` lost its rows in a crash: every relation below it is recomputed (or
    left stale, as above), so that it is skipped (`lost_below`)."""
    todo = set(todo)
    rec = recomputes(plan)
    stale = set(stale) | lost_below(plan, {d for d in stale if d.is_delta}, todo)
    modes: dict[Vertex, Mode] = {}
    for v in todo:
        if v.kind == "relation":
            modes[v] = "recompute" if v in rec and (
                chosen is None or v in chosen or v in stale) else "incremental"
        else:
            modes[v] = "incremental" if readers(plan, v) - todo else "skip"
    stack = [v for v, m in modes.items() if m == "incremental"]
    while stack:
        e = plan.incoming[stack.pop()]
        for s in e.sources:
            if modes.get(s) == "skip":
                modes[s] = "incremental"
                stack.append(s)
    if leave_stale:
        mvs = {s.mv for s in plan.sharings}
        while left := [v for v, m in modes.items() if m == "recompute" and v not in mvs
                       and may_leave_stale(plan, v, todo, modes)]:
            for v in left:
                modes[v] = "stale"
    return modes


def may_leave_stale(plan: GlobalPlan, v: Vertex, todo: Collection[Vertex],
                    modes: dict[Vertex, Mode]) -> bool:
    """Whether relation `v` may be left stale in a push over `todo` in `modes`: every vertex
    that reads it is in the push and does not read it there — a delta skipped, a relation
    stale, or one recomputed from other relations."""
    rec = recomputes(plan)
    for r in relation_readers(plan, v):
        mode = modes.get(r) if r in todo else None
        if mode in ("skip", "stale"):
            continue
        if mode == "recompute" and v not in rec[r].inputs:
            continue
        return False
    return True


def waits_for(plan: GlobalPlan, v: Vertex, mode: Mode, mode_of: Callable[[Vertex], Mode],
              roll_forward: bool = True) -> set[Vertex]:
    """What `v` must wait for in a push (`mode_of`: each vertex's mode in it): the sources
    of its edge (incremental) — a join not the relation it probes where that rolls forward
    (`rolls_forward`, unless `roll_forward` is False) —, or (a skip) its readers;
    recomputed, the relations its Recompute reads, and its own delta unless that is
    skipped — a relation ahead of its delta could not be rolled back by a reader (a join's
    compensation) until the delta caught up (`operators.vertex_ts.lock_rolled`)."""
    if mode == "recompute":
        own = plan.incoming.get(v)
        kept = {own.src} if isinstance(own, DeltaToRel) and mode_of(own.src) != "skip" \
            else set()
        return set(recomputes(plan)[v].inputs) | kept
    if mode == "skip":
        return readers(plan, v)
    if mode == "stale":  # nothing in the push reads it (`may_leave_stale`)
        return set()
    e = plan.incoming[v]
    if roll_forward and isinstance(e, Join) and rolls_forward(plan, e, mode_of):
        return {e.delta, e.other_delta}
    return set(e.sources)


def rolls_forward(plan: GlobalPlan, e: Join, mode_of: Callable[[Vertex], Mode]) -> bool:
    """Whether join `e` need not wait for X̂ (`e.other`) in a push: X̂ is kept by its
    DeltaToRel from `e.other_delta`, which the join waits for anyway, so the join reads X̂
    as it is and rolls it forward with that delta's rows past TS(X̂) (`operators.join`:
    X(τ) adds the rows in `(TS(X̂), τ]` as it backs out those in `(τ, TS(X̂)]`). A
    recomputed X̂ is still waited for."""
    keep = plan.incoming.get(e.other)
    return (mode_of(e.other) == "incremental" and isinstance(keep, DeltaToRel)
            and keep.src == e.other_delta)


def push_waits(plan: GlobalPlan, todo: Collection[Vertex], mode_of: Callable[[Vertex], Mode],
               roll_forward: bool = True) -> dict[Vertex, set[Vertex]]:
    """What each vertex of a push over `todo` waits for (`waits_for`, within `todo`); and a
    relation that joins roll forward (`rolls_forward`) and nothing else in the push reads,
    after those joins: they read X̂ as it was, before its DeltaToRel takes X̂'s lock (the two
    would otherwise run at once and the join wait on the lock), so the joins of a chain
    follow each other with no DeltaToRel in between. Such an X̂ is read by nothing after it,
    so this closes no cycle and makes no path longer than the plan's critical path, which
    counts X̂'s DeltaToRel before the joins. `roll_forward` False: every join waits for X̂
    instead (a benchmark's baseline)."""
    todo = set(todo)
    waits = {v: waits_for(plan, v, mode_of(v), mode_of, roll_forward) & todo for v in todo}
    if not roll_forward:
        return waits
    read = {s for w in waits.values() for s in w}
    for v in todo:
        e = plan.incoming.get(v)
        if isinstance(e, Join) and e.other in todo and e.other not in read \
                and mode_of(v) == "incremental" and rolls_forward(plan, e, mode_of):
            waits[e.other].add(v)
    return waits


def push_readers(waits: dict[Vertex, set[Vertex]]) -> dict[Vertex, list[Vertex]]:
    """Per vertex of a push, those that wait for it (`push_waits`), in the order to start
    them once ready: those others wait for in turn first, those nothing waits for (an MV, a
    relation joins roll forward) last, so an agent's workers take the next step of a chain
    before a DeltaToRel no one waits for."""
    readers: dict[Vertex, list[Vertex]] = {}
    for v, srcs in waits.items():
        for s in srcs:
            readers.setdefault(s, []).append(v)
    for rs in readers.values():
        rs.sort(key=lambda r: (r not in readers, r.label))
    return readers


@dataclass(frozen=True)
class PushPaths:
    """The paths of one push, priced; `modes` of the cheapest (or of the one forced)."""

    incremental_s: float
    """Every relation vertex by its delta (a stale one recomputed)."""
    recompute_s: float | None
    """Every relation vertex recomputed; None where the push's target cannot be, or where
    no recomputation alone costs less than the incremental push (not priced further)."""
    chosen: Path
    """"incremental" (no vertex recomputed), "recompute" (all of them, recomputed or left
    stale) or "mixed" (some; a push that only recomputes a relation left stale before)."""
    modes: dict[Vertex, Mode]
    chosen_s: float = 0.0
    """What the model says the chosen path takes."""

    @property
    def recomputed(self) -> list[str]:
        return sorted(v.label for v, m in self.modes.items() if m == "recompute")

    @property
    def left_stale(self) -> list[str]:
        return sorted(v.label for v, m in self.modes.items() if m == "stale")

    def to_json(self) -> dict[str, object]:
        return {"incremental_s": round(self.incremental_s, 6),
                "recompute_s": None if self.recompute_s is None else round(self.recompute_s, 6),
                "chosen": self.chosen, "chosen_s": round(self.chosen_s, 6),
                "recomputed": self.recomputed, "left_stale": self.left_stale}


def recompute_key(label: str) -> str:
    """The key a vertex's recomputations are scaled under in the time model (its own label
    scales its incremental edge)."""
    return f"{label}⟳"


def recompute_tuples(r: Recompute, rows_of: Callable[[Vertex], float]) -> float:
    """The tuples the time model charges a recomputation: the rows it reads, those it moves
    between machines once more, and those it writes."""
    read = sum(rows_of(s) for s in r.inputs) if not r.from_bases else sum(
        rows_of(Vertex("relation", Expr.base(p.relation), "")) for p in r.dst.expr.parts)
    moved = sum(rows_of(s) for s in r.moved()) if not r.from_bases else read
    return read + moved + rows_of(r.dst)


MAX_SUBSETS = 256
"""Up to this many choices of the relation vertices to recompute are priced one by one
(every subset of up to 8 of them); beyond, the `k` furthest downstream for each `k`."""


def _choices(plan: GlobalPlan, candidates: list[Vertex]) -> Iterator[frozenset[Vertex]]:
    """Sets of relation vertices to recompute: every non-empty subset of few candidates, else
    for each `k` the `k` of them furthest downstream (an MV first)."""
    if 2 ** len(candidates) <= MAX_SUBSETS:
        for mask in range(1, 2 ** len(candidates)):
            yield frozenset(c for i, c in enumerate(candidates) if mask >> i & 1)
        return
    rank = {v: i for i, v in enumerate(plan.order())}
    downstream = sorted(candidates, key=lambda v: -rank.get(v, 0))
    for k in range(1, len(downstream) + 1):
        yield frozenset(downstream[:k])


def push_paths(plan: GlobalPlan, targets: Iterable[Vertex], model: TimeModel, x: float,
               rows_of: Callable[[Vertex], float], force: Forced | None = None,
               stale: Collection[Vertex] = ()) -> PushPaths:
    """The paths of a push of `targets` carrying `x` seconds of updates, priced by `model`
    (`rows_of`: a relation vertex's rows now; a base's by its relation, any machine), and
    the modes of the cheapest (or of `force`: every relation vertex by its delta, or every
    one recomputed). An edge run as always is charged its line at `x` seconds of the plan's
    rates; a recomputation its line at the sizes it reads and writes; a skip, and a relation
    left stale, the `skip` line (it moves a TS, as a Union does). Between the two, the
    relation vertices to recompute are chosen (`_choices`): a copy of a base may be cheaper
    kept by its delta while the joins above it are recomputed. A relation `stale` now is
    recomputed whatever the path (or left stale again where nothing reads it), never
    advanced by its delta; forced incremental, no other delta is skipped and nothing left
    stale.
    A delta in `stale` lost its rows in a crash: whatever the path, every relation below it
    is recomputed and it is skipped (`lost_below`)."""
    todo = plan.advanced_by(targets)
    rec = recomputes(plan)
    lost = {v for v in stale if v in todo and v.is_delta}
    stale = {v for v in stale if v in todo and v in rec} | (lost_below(plan, lost, todo) & set(rec))
    plain: dict[Vertex, Mode] = recompute_modes(plan, todo, stale, leave_stale=False) \
        if lost else {v: "recompute" if v in stale else "incremental" for v in todo}

    def price(modes: dict[Vertex, Mode]) -> float:
        cost = 0.0
        for v, m in modes.items():
            if m == "recompute":
                cost += model.seconds("recompute", recompute_tuples(rec[v], rows_of),
                                      recompute_key(v.label))
            elif m in ("skip", "stale"):
                cost += model.seconds("skip", 0.0)
            else:
                cost += edge_seconds(plan.incoming[v], model, x)
        return cost

    incremental = price(plain)
    plain_path: Path = "mixed" if stale else "incremental"
    candidates = sorted(v for v in todo if v in rec)
    if not candidates or force == "incremental" or not any(t in rec for t in targets):
        whole = price(recompute_modes(plan, todo, leave_stale=False)) if candidates else None
        return PushPaths(incremental, whole, plain_path, plain, incremental)
    full = recompute_modes(plan, todo, leave_stale=False)
    if force is None and min(model.seconds("recompute", recompute_tuples(rec[v], rows_of),
                                           recompute_key(v.label)) for v in candidates
                             ) >= incremental:  # any choice recomputes one at least: none pays
        return PushPaths(incremental, None, plain_path, plain, incremental)
    whole = price(full)
    if force == "recompute":
        return PushPaths(incremental, whole, "recompute", full, whole)
    best: tuple[float, int, dict[Vertex, Mode]] = (incremental, len(stale), plain)
    for chosen in _choices(plan, candidates):
        modes = recompute_modes(plan, todo, chosen, stale)
        cost = price(modes)
        if (cost, len(chosen)) < best[:2]:
            best = (cost, len(chosen), modes)
    cost, _, modes = best
    n = sum(m in ("recompute", "stale") for m in modes.values())
    path: Path = "incremental" if n == 0 else "recompute" if all(
        modes[v] in ("recompute", "stale") for v in candidates) else "mixed"
    return PushPaths(incremental, whole, path, modes, cost)


def update_rates(plan: GlobalPlan, targets: Iterable[Vertex]) -> dict[Vertex, float]:
    """The base deltas whose pending rows price a push of `targets` (those its copies and
    DeltaToRels read), with the plan's rate of each."""
    return {e.src: e.tuples_per_s for v in plan.advanced_by(targets)
            for e in [plan.incoming[v]] if isinstance(e, (CopyDelta, DeltaToRel)) and e.src.base}


def seconds_of_updates(plan: GlobalPlan, targets: Iterable[Vertex],
                       pending: dict[Vertex, int]) -> float:
    """How many seconds of the plan's update rates `pending` (rows of each base delta of
    `update_rates`) amount to: the `x` its edges are priced at."""
    rates = update_rates(plan, targets)
    total = sum(rates.values())
    return sum(pending.get(s, 0) for s in rates) / total if total > 0 else 0.0
