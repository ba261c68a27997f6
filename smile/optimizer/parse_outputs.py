"""A sharing's output columns, resolved: the projections of an SPJ query, or an aggregation —
its group keys, its aggregate calls, its outputs and HAVING written over the aggregate's
slots (`sharing.SLOT`), and DISTINCT — with the checks PostgreSQL makes (a column outside an
aggregate must be grouped) and those of what SMILE maintains (sum and avg of numbers, min and
max of ordered values).

Must not: plan; no database access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pglast import ast, enums
from pglast.stream import RawStream

from smile.optimizer.column_types import (
    ORDERABLE,
    SUMMABLE,
    Category,
    category,
    combine,
    function_result,
)
from smile.optimizer.sharing import SLOT, AggCall, Aggregation, ColRef, Projection
from smile.optimizer.sql_guard import (
    Refuse,
    check_aggregate,
    check_expression,
    is_aggregate,
    names,
    walk,
)

if TYPE_CHECKING:
    from smile.optimizer.resolve import Resolver

MAX_NAME = 63
"""PostgreSQL's longest identifier, in bytes."""


def qualify(node: Any, resolver: Resolver) -> tuple[str, frozenset[ColRef]]:
    """SQL text of `node` with every column qualified by its canonical alias (a column a FULL
    JOIN merged, as PostgreSQL's COALESCE of both), and the columns it reads. Rewrites the
    tree in place."""
    cols: set[ColRef] = set()
    for n in list(walk(node)):
        for attr in getattr(type(n), "__slots__", ()):
            value = getattr(n, attr, None)
            if isinstance(value, ast.ColumnRef):
                setattr(n, attr, _qualified(value, resolver, cols))
            elif isinstance(value, tuple) and any(isinstance(v, ast.ColumnRef) for v in value):
                setattr(n, attr, tuple(_qualified(v, resolver, cols)
                                       if isinstance(v, ast.ColumnRef) else v for v in value))
    if isinstance(node, ast.ColumnRef):
        node = _qualified(node, resolver, cols)
    return RawStream()(node), frozenset(cols)


def _qualified(n: ast.ColumnRef, resolver: Resolver, cols: set[ColRef]) -> Any:
    if any(isinstance(f, ast.A_Star) for f in n.fields):
        raise Refuse("* inside an expression", n)
    refs = resolver.refs(n)
    cols.update(refs)
    if len(refs) == 2:  # a FULL JOIN's merged column
        return ast.CoalesceExpr(args=tuple(_ref_node(r) for r in refs))
    return _ref_node(refs[0])


def _ref_node(ref: ColRef) -> ast.ColumnRef:
    return ast.ColumnRef(fields=(ast.String(sval=ref.alias), ast.String(sval=ref.column)))


def _output_name(target: ast.ResTarget, fallback: str | None, text: str, node: Any) -> str:
    name = target.name or fallback
    if not name:
        raise Refuse(f"an output expression without a name ({text}); add AS name", node)
    if len(name.encode()) > MAX_NAME:
        raise Refuse(f"the output name {name[:20]!r}… longer than PostgreSQL's 63 bytes", node)
    return name


def _bare_name(val: Any) -> str | None:
    """The name PostgreSQL gives an output it does not name: a column's, an aggregate's."""
    if isinstance(val, ast.ColumnRef):
        fields = [f.sval for f in val.fields if isinstance(f, ast.String)]
        return fields[-1] if fields else None
    if isinstance(val, ast.FuncCall) and is_aggregate(val):
        return names(val.funcname)[-1].lower()
    return None


def _check_unique(out: list[tuple[str, Any]], node: Any) -> None:
    seen = [n for n, _ in out]
    dupes = sorted({n for n in seen if seen.count(n) > 1})
    if dupes:
        raise Refuse(f"duplicate output columns {dupes} (give them distinct names with AS)",
                     node)


def star(val: ast.ColumnRef, resolver: Resolver) -> list[Projection]:
    """`*` or `alias.*`: every column of the relations it names; a bare `*` lists a column
    merged by USING or NATURAL once, ahead of the others, as PostgreSQL lists it."""
    fields = [f.sval for f in val.fields if isinstance(f, ast.String)]
    for user in fields[:1]:
        if user not in resolver.users:
            raise Refuse(f"an unknown table or alias {user!r}", val)
    aliases = [resolver.users[u] for u in fields[:1]] or [r.alias for r in resolver.rels]
    merged = {ref for m in resolver.merged for ref in m.members} if not fields else set()
    out: list[Projection] = []
    for name in dict.fromkeys(m.name for m in resolver.merged if not fields):
        text, cols = qualify(ast.ColumnRef(fields=(ast.String(sval=name),)), resolver)
        out.append(_projection(name, text, cols))
    for alias in aliases:
        rel = resolver.catalog.relation(resolver.relation(alias))
        resolver.refuse_lost(alias, rel.lost, val)
        for c in rel.columns:
            ref = ColRef(alias, c.name)
            if ref not in merged:
                out.append(Projection(c.name, ref.sql(), alias, frozenset({c.name})))
    return out


def _projection(name: str, text: str, cols: frozenset[ColRef]) -> Projection:
    aliases = {r.alias for r in cols}
    if len(aliases) == 1:
        return Projection(name, text, next(iter(aliases)), frozenset(r.column for r in cols))
    return Projection(name, text, None, frozenset(), cols)


def projections(stmt: ast.SelectStmt, resolver: Resolver) -> list[Projection]:
    """The outputs of an SPJ query: expressions of the relations' columns, computed in the
    consumer's view over the MV's columns."""
    out: list[Projection] = []
    for target in stmt.targetList:
        val = target.val
        if isinstance(val, ast.ColumnRef) and any(isinstance(f, ast.A_Star) for f in val.fields):
            out.extend(star(val, resolver))
            continue
        check_expression(val, clause="an SPJ output")
        fallback = _bare_name(val)
        text, cols = qualify(val, resolver)
        out.append(_projection(_output_name(target, fallback, text, val), text, cols))
    _check_unique([(p.name, p) for p in out], stmt.targetList[0])
    return out


def wants_aggregation(stmt: ast.SelectStmt) -> bool:
    """GROUP BY, HAVING, DISTINCT or an aggregate call among the outputs."""
    if stmt.groupClause or stmt.havingClause is not None or stmt.distinctClause:
        return True
    return any(is_aggregate(n) for t in stmt.targetList for n in walk(t))


class _Slots:
    """Group keys and aggregate calls, each once, as the slots outputs read."""

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        self.keys: list[tuple[str, frozenset[ColRef]]] = []
        self.calls: list[AggCall] = []

    def key(self, text: str, cols: frozenset[ColRef]) -> int:
        if (text, cols) not in self.keys:
            self.keys.append((text, cols))
        return self.keys.index((text, cols))

    def call(self, c: AggCall) -> int:
        if c not in self.calls:
            self.calls.append(c)
        return self.calls.index(c)


def aggregation(stmt: ast.SelectStmt, resolver: Resolver) -> Aggregation:
    """The aggregation of a query with GROUP BY, aggregates or DISTINCT."""
    distinct = bool(stmt.distinctClause)
    slots = _Slots(resolver)
    for g in stmt.groupClause or ():
        _group_key(g, stmt, slots)
    if distinct:
        if stmt.groupClause or stmt.havingClause is not None or any(
                is_aggregate(n) for t in stmt.targetList for n in walk(t)):
            raise Refuse("DISTINCT with GROUP BY or aggregates (drop one)",
                         stmt.targetList[0])
        outputs = _distinct_outputs(stmt, slots)
    else:
        outputs = [(_output_name(t, _bare_name(t.val), "", t.val), _over_slots(t.val, slots,
                                                                            "the outputs"))
                   for t in stmt.targetList]
    _check_unique(outputs, stmt.targetList[0])
    having = None
    if stmt.havingClause is not None:
        having = _over_slots(stmt.havingClause, slots, "HAVING")
    return Aggregation(tuple(_key_ref(k) for k in slots.keys), tuple(slots.calls),
                       tuple(outputs), having, distinct)


def _key_ref(key: tuple[str, frozenset[ColRef]]) -> ColRef:
    """A group key as the aggregation keeps it: a column (`GROUP BY` takes columns)."""
    text, cols = key
    (ref,) = cols
    del text
    return ref


def _group_key(g: Any, stmt: ast.SelectStmt, slots: _Slots) -> None:
    """A GROUP BY item: a column, or the position of an output that is one."""
    if isinstance(g, ast.A_Const) and isinstance(g.val, ast.Integer):
        pos = g.val.ival or 0
        if not 1 <= pos <= len(stmt.targetList):
            raise Refuse(f"GROUP BY position {pos} (the query has {len(stmt.targetList)} "
                         "outputs)", g)
        g = stmt.targetList[pos - 1].val
    if not isinstance(g, ast.ColumnRef):
        raise Refuse("a GROUP BY item that is not a column (group by columns; compute the "
                     "expression in the output)", g)
    text, cols = qualify(g, slots.resolver)
    if len(cols) != 1:
        raise Refuse("a GROUP BY on a column a FULL JOIN merged (group by one side's)", g)
    slots.key(text, cols)


def _distinct_outputs(stmt: ast.SelectStmt, slots: _Slots) -> list[tuple[str, str]]:
    """SELECT DISTINCT over columns: each output a group key."""
    out = []
    for t in stmt.targetList:
        val = t.val
        if isinstance(val, ast.ColumnRef) and any(isinstance(f, ast.A_Star) for f in val.fields):
            raise Refuse("SELECT DISTINCT * (list the columns)", val)
        if not isinstance(val, ast.ColumnRef):
            raise Refuse("SELECT DISTINCT of an expression (list columns)", val)
        text, cols = qualify(val, slots.resolver)
        if len(cols) != 1:
            raise Refuse("SELECT DISTINCT of a column a FULL JOIN merged", val)
        i = slots.key(text, cols)
        out.append((_output_name(t, _bare_name(val), text, val), _slot(f"g{i}")))
    return out


def _slot(name: str) -> str:
    return f'"{SLOT}"."{name}"'


def _over_slots(node: Any, slots: _Slots, clause: str) -> str:
    """`node` with each aggregate call and each group column replaced by its slot; a column
    outside an aggregate that is not grouped is refused, as PostgreSQL refuses it."""
    check_expression(node, aggregates=True, clause=clause)
    if _slotted(node):
        return _slot(_slot_of(node, slots, clause))
    stack = [node]
    while stack:  # what an aggregate call holds is its argument: not walked into
        n = stack.pop()
        for attr in getattr(type(n), "__slots__", ()):
            value = getattr(n, attr, None)
            if isinstance(value, ast.Node):
                if _slotted(value):
                    setattr(n, attr, _slot_node(_slot_of(value, slots, clause)))
                else:
                    stack.append(value)
            elif isinstance(value, tuple):
                setattr(n, attr, tuple(_slot_node(_slot_of(v, slots, clause))
                                       if _slotted(v) else v for v in value))
                stack.extend(v for v in value if isinstance(v, ast.Node) and not _slotted(v))
    return RawStream()(node)


def _slotted(node: Any) -> bool:
    return isinstance(node, ast.ColumnRef) or is_aggregate(node)


def _slot_node(name: str) -> ast.ColumnRef:
    return ast.ColumnRef(fields=(ast.String(sval=SLOT), ast.String(sval=name)))


def _slot_of(node: Any, slots: _Slots, clause: str) -> str:
    if isinstance(node, ast.ColumnRef):
        if any(isinstance(f, ast.A_Star) for f in node.fields):
            raise Refuse("* inside an expression", node)
        text, cols = qualify(node, slots.resolver)
        if (text, cols) not in slots.keys:
            raise Refuse(f"the column {text} in {clause}, neither grouped nor inside an "
                         "aggregate", node)
        return f"g{slots.keys.index((text, cols))}"
    return f"a{slots.call(_call(node, slots.resolver))}"


def _call(node: ast.FuncCall, resolver: Resolver) -> AggCall:
    func = check_aggregate(node)
    if node.agg_star:
        return AggCall("count", None)
    arg = node.args[0]
    kind = infer(arg, resolver)
    text, cols = qualify(arg, resolver)
    if func in ("sum", "avg") and kind not in SUMMABLE:
        raise Refuse(f"{func}({text}) of {_what(kind)} (sum and avg take numbers; cast it: "
                     f"{func}(({text})::numeric))", node)
    if func in ("min", "max") and kind not in ORDERABLE:
        raise Refuse(f"{func}({text}) of {_what(kind)} (min and max take numbers, text and "
                     "times)", node)
    return AggCall(func, text, cols, bool(node.agg_distinct))


def _what(kind: Category | None) -> str:
    return "a value whose type SMILE cannot tell" if kind is None else f"a {kind} value"


def infer(node: Any, resolver: Resolver) -> Category | None:
    """The category of an expression's value where it is plain to see: a column, a literal,
    a cast, an allowed function, arithmetic of those; None otherwise."""
    if isinstance(node, ast.ColumnRef):
        kinds = {category(_type(r, resolver)) for r in resolver.refs(node)}
        return kinds.pop() if len(kinds) == 1 else None
    if isinstance(node, ast.A_Const):
        return {ast.Integer: "int", ast.Float: "numeric", ast.String: "text",
                ast.Boolean: "bool"}.get(type(node.val))  # type: ignore[return-value]
    if isinstance(node, ast.TypeCast):
        return category(" ".join(names(node.typeName.names)[-1:]))
    if isinstance(node, ast.A_Expr) and node.kind == enums.A_Expr_Kind.AEXPR_OP and \
            names(node.name)[-1] in ("+", "-", "*", "/", "%"):
        if node.lexpr is None:
            return infer(node.rexpr, resolver)
        return combine(infer(node.lexpr, resolver), infer(node.rexpr, resolver))
    if isinstance(node, ast.FuncCall) and not node.agg_star:
        return function_result(names(node.funcname)[-1],
                               [infer(a, resolver) for a in node.args or ()])
    return None


def _type(ref: ColRef, resolver: Resolver) -> str:
    return resolver.catalog.relation(resolver.relation(ref.alias)).column(ref.column).type
