"""What SMILE can do with a column of a given SQL type (as `format_type` names it): compare and
group it (every vertex consolidates its rows by value), sum or average it, order it (min,
max). A sharing that reads a column of a type without equality (`json`, `xml`, geometric
types) or of a type of the app's own (a vertex on another machine could not be created with
it) is refused at submission, naming the column and its type.

Must not: touch a database; the types come from the catalog snapshot.
"""

from __future__ import annotations

import re
from typing import Literal

Category = Literal["int", "bigint", "numeric", "float", "text", "time", "bool", "other"]

_BASE = re.compile(r"^([a-z ]+?)(\s*\(.*\))?(\[\])?$")
_CATEGORY: dict[str, Category] = {
    "smallint": "int", "int2": "int", "integer": "int", "int": "int", "int4": "int",
    "bigint": "bigint", "int8": "bigint",
    "numeric": "numeric", "decimal": "numeric",
    "real": "float", "float4": "float", "double precision": "float", "float8": "float",
    "text": "text", "character varying": "text", "varchar": "text", "character": "text",
    "char": "text", "bpchar": "text", "name": "text",
    "date": "time", "timestamp with time zone": "time", "timestamptz": "time",
    "timestamp without time zone": "time", "timestamp": "time",
    "time without time zone": "time", "time": "time", "time with time zone": "time",
    "timetz": "time", "interval": "time",
    "boolean": "bool", "bool": "bool",
    "uuid": "other", "bytea": "other", "jsonb": "other", "inet": "other", "cidr": "other",
    "macaddr": "other", "money": "other", "bit": "other", "bit varying": "other",
    "tsvector": "other",
}
NO_EQUALITY = frozenset({"json", "xml", "point", "line", "lseg", "box", "path", "polygon",
                         "circle"})
"""Built-in types PostgreSQL cannot compare for equality: no GROUP BY, no DISTINCT."""
SUMMABLE: frozenset[Category] = frozenset({"int", "bigint", "numeric", "float"})
ORDERABLE: frozenset[Category] = frozenset({"int", "bigint", "numeric", "float", "text",
                                            "time"})
"""What min and max are maintained for."""


def base_name(sql_type: str) -> str:
    """The type's name without modifiers.

    >>> base_name("character varying(20)"), base_name("numeric(10,2)"), base_name("int4[]")
    ('character varying', 'numeric', 'int4[]')
    """
    t = sql_type.strip().lower()
    m = _BASE.match(t)
    if m is None:
        return t
    return m.group(1) + (m.group(3) or "")


def category(sql_type: str) -> Category | None:
    """What kind of value the type holds, or None for a type SMILE does not handle (arrays,
    types without equality, the app's own types).

    >>> category("integer"), category("double precision"), category("json"), category("mood")
    ('int', 'float', None, None)
    """
    return _CATEGORY.get(base_name(sql_type))


def unsupported_reason(sql_type: str) -> str | None:
    """Why a column of `sql_type` cannot be read by a sharing, or None when it can."""
    name = base_name(sql_type)
    if name.endswith("[]"):
        return "an array type"
    if name in NO_EQUALITY:
        return "a type PostgreSQL cannot compare for equality"
    if category(sql_type) is None:
        return "a type SMILE does not know (one of the app's own, or an extension's)"
    return None


def combine(a: Category | None, b: Category | None) -> Category | None:
    """The category of `a op b` for an arithmetic operator.

    >>> combine("int", "bigint"), combine("int", "numeric"), combine("numeric", "float")
    ('bigint', 'numeric', 'float')
    """
    if a is None or b is None or a not in SUMMABLE or b not in SUMMABLE:
        return None
    order: tuple[Category, ...] = ("int", "bigint", "numeric", "float")
    return max(a, b, key=order.index)


_TEXT_RESULT = frozenset({
    "lower", "upper", "initcap", "substr", "trim", "btrim", "ltrim", "rtrim", "replace",
    "concat", "concat_ws", "md5", "left", "right", "split_part", "reverse", "text"})
_RESULT: dict[str, Category] = {
    "length": "int", "char_length": "int", "octet_length": "int", "strpos": "int",
    "position": "int", "starts_with": "bool", "int4": "int", "int8": "bigint",
    "float8": "float", "numeric": "numeric"}
_RESULT.update(dict.fromkeys(_TEXT_RESULT, "text"))
_LIKE_ARGS = frozenset({"abs", "mod", "greatest", "least", "coalesce", "nullif"})
_INEXACT = frozenset({"round", "floor", "ceil", "ceiling", "trunc", "sign", "power", "sqrt"})


def function_result(name: str, args: list[Category | None]) -> Category | None:
    """The category of an allowed function's value from its arguments' (PostgreSQL's own
    resolution: `round(5)` is a double precision, `round(5.5)` a numeric); None when it
    cannot be told.

    >>> function_result("length", ["text"]), function_result("round", ["int"])
    ('int', 'float')
    >>> function_result("abs", ["bigint"]), function_result("coalesce", ["int", "numeric"])
    ('bigint', 'numeric')
    """
    if name in _RESULT:
        return _RESULT[name]
    if not args or any(a is None for a in args):
        return None
    if name in _INEXACT:
        return "numeric" if args[0] == "numeric" else "float" if args[0] in SUMMABLE else None
    if name in _LIKE_ARGS:
        if len(set(args)) == 1:
            return args[0]
        kind = args[0]
        for a in args[1:]:
            kind = combine(kind, a)
        return kind
    return None
