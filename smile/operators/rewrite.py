"""Rewrite column references in a SQL expression (pglast): `alias.column` → a physical
reference, so predicates and projections written over a sharing's aliases run against
SMILE's tables (`u.screen_name` → `x.u__screen_name`).

Must not: change anything but column references.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from pglast import ast, parse_sql
from pglast.stream import RawStream

from smile.errors import AgentError

Mapper = Callable[[str, str], tuple[str, ...]]
"""(alias, column) → the new reference's name parts, e.g. ("x", "u__uid")."""


def rewrite_columns(expr: str, mapper: Mapper) -> str:
    """`expr` with every `alias.column` replaced by `mapper(alias, column)`.

    >>> rewrite_columns("lower(u.name) = 'a'", lambda a, c: ("x", f"{a}__{c}"))
    "lower(x.u__name) = 'a'"
    >>> rewrite_columns("u.a + u.b10 > v.a", lambda a, c: (f"{a}_{c}",))
    'u_a + u_b10 > v_a'
    >>> rewrite_columns("u.a = '__smile_ref_0__'", lambda a, c: ("x", c))
    "x.a = '__smile_ref_0__'"
    """
    if _MARKER in expr:  # a marker could be mistaken for this text: rewritten as parsed
        return _rewrite(expr, lambda _, alias, column: tuple(mapper(alias, column)))[0]
    text, refs = _template(expr)
    mapped = [_reference(tuple(mapper(alias, column))) for alias, column in refs]
    for i in reversed(range(len(mapped))):  # __smile_ref_10__ before __smile_ref_1__
        text = text.replace(_marker(i), mapped[i])
    return text


_MARKER = "__smile_ref_"


def _marker(i: int) -> str:
    return f"{_MARKER}{i}__"


@lru_cache(maxsize=4096)
def _template(expr: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """`expr` parsed once (an operator rewrites the same predicates at every push, and a
    parse costs a third of a millisecond): its text with the i-th column reference replaced
    by `_marker(i)`, and the (alias, column) of each."""
    return _rewrite(expr, lambda i, _, __: (_marker(i),))


def _rewrite(expr: str, replace: Callable[[int, str, str], tuple[str, ...]]
             ) -> tuple[str, tuple[tuple[str, str], ...]]:
    """`expr` with its i-th column reference `alias.column` replaced by `replace(i, alias,
    column)`, and the (alias, column) of each."""
    stmt: Any = parse_sql(f"SELECT {expr}")[0].stmt
    node = stmt.targetList[0].val
    refs: list[tuple[str, str]] = []
    for n in _walk(node):
        if isinstance(n, ast.ColumnRef):
            parts = [str(f.sval) for f in (n.fields or ()) if isinstance(f, ast.String)]
            if len(parts) != 2:
                raise AgentError(f"expected alias.column in {expr!r}, got {'.'.join(parts)}")
            n.fields = tuple(ast.String(sval=p) for p in replace(len(refs), *parts))
            refs.append((parts[0], parts[1]))
    out: str = RawStream()(node)
    return out, tuple(refs)


@lru_cache(maxsize=4096)
def _reference(parts: tuple[str, ...]) -> str:
    """A column reference's text, quoted where PostgreSQL needs it."""
    out: str = RawStream()(ast.ColumnRef(fields=tuple(ast.String(sval=p) for p in parts)))
    return out


def _walk(node: Any) -> Any:
    yield node
    for name in getattr(type(node), "__slots__", ()):
        value = getattr(node, name, None)
        if isinstance(value, ast.Node):
            yield from _walk(value)
        elif isinstance(value, (list, tuple)):
            for v in value:
                if isinstance(v, ast.Node):
                    yield from _walk(v)
