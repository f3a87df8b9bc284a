"""Lab: the one schema-checked reader: a JSON file read into a dataclass, every field checked against its declaration.

A recording (recordings.py) is `dataclasses.asdict` of its record plus "schema", the version of its layout.
load_checked reads one: the schema must be one the reader knows; every field of the record and of the records
inside it must be present (but those with a default, which a file written before the field existed lacks), none
unknown, each of its declared type (str, int, float, bool, dict, list[...], tuple[...], X | None, a dataclass; an int
is read as a float where a float is declared, a bool never as a number) and, for the fields named in choices, one of
their names; then the caller's cross-field rules. A TypeError or ValueError names the file and the field.
"""
from __future__ import annotations

import json
import pathlib
import types
import typing
from dataclasses import MISSING, fields, is_dataclass

__all__ = ["load_checked", "find_row"]


def _value(hint, x, where: str, choices: dict):
    """x checked against the type hint."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # X | None
        if x is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _value(inner, x, where, choices)
    if is_dataclass(hint):
        return _build(hint, x, where, choices)
    if origin in (list, tuple):  # JSON writes a tuple as a list
        if not isinstance(x, list):
            raise TypeError(f"{where} must be a list, got {type(x).__name__}")
        each = args if origin is tuple and args[-1] is not Ellipsis else (args[0],) * len(x)
        if len(each) != len(x):
            raise ValueError(f"{where} must hold {len(each)} values, got {len(x)}")
        items = [_value(h, v, f"{where}[{i}]", choices) for i, (h, v) in enumerate(zip(each, x))]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(x, dict):
            raise TypeError(f"{where} must be a dict, got {type(x).__name__}")
        key, val = args or (str, typing.Any)
        return {_value(key, k, f"{where} key", choices): _value(val, v, f"{where}[{k!r}]", choices)
                for k, v in x.items()}
    if hint is typing.Any:
        return x
    ok = {float: (int, float), int: (int,), bool: (bool,), str: (str,)}[hint]
    if isinstance(x, bool) and hint is not bool or not isinstance(x, ok):
        raise TypeError(f"{where} must be {hint.__name__}, got {type(x).__name__} {x!r}")
    return float(x) if hint is float else x


def _build(cls, data, where: str, choices: dict):
    """cls(**data): every field without a default present, none unknown, each of its declared type and choices."""
    if not isinstance(data, dict):
        raise TypeError(f"{where} must be a JSON object (a {cls.__name__}), got {type(data).__name__}")
    required = {f.name: f.default is MISSING and f.default_factory is MISSING for f in fields(cls)}
    missing = [n for n, needed in required.items() if needed and n not in data]
    unknown = sorted(set(data) - set(required))
    if missing or unknown:
        raise ValueError(f"{where} ({cls.__name__}): missing fields {missing}, unknown fields {unknown}")
    hints = typing.get_type_hints(cls)
    values = {n: _value(hints[n], v, f"{where}.{n}", choices) for n, v in data.items()}
    for n, allowed in choices.items():
        if n in values and values[n] not in allowed:
            raise ValueError(f"{where}.{n} must be one of {', '.join(map(repr, allowed))}; got {values[n]!r}")
    return cls(**values)


def load_checked(cls, path, *, schemas: tuple[int, ...], choices: dict | None = None, check=None):
    """cls from the JSON object in path, whose "schema" is one of schemas, every field checked (choices: field name
    -> the names it may hold), then check(record), the cross-field rules; errors name the file and the field."""
    if not isinstance(path, (str, pathlib.Path)):
        raise TypeError(f"path must be a str or pathlib.Path, got {type(path).__name__}")
    data = json.loads(pathlib.Path(path).read_text())
    try:
        if not isinstance(data, dict):
            raise TypeError(f"the file must hold a JSON object (a {cls.__name__}), got {type(data).__name__}")
        schema = data.get("schema")
        if isinstance(schema, bool) or schema not in schemas:
            raise ValueError(f"schema must be {' or '.join(map(str, schemas))}, got {schema!r}")
        record = _build(cls, {n: v for n, v in data.items() if n != "schema"}, "recording", choices or {})
        if check is not None:
            check(record)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{path}: {e}") from None
    return record


def find_row(rows, fields: tuple[str, ...], wanted: tuple):
    """The first of a recording's rows whose fields equal wanted; else a ValueError listing the recorded values."""
    for row in rows:
        if tuple(getattr(row, f) for f in fields) == tuple(wanted):
            return row
    have = sorted({tuple(getattr(row, f) for f in fields) for row in rows})
    raise ValueError(f"({', '.join(fields)}) must be one of {have}; got {tuple(wanted)}")
