"""JSON in and out through one cattrs converter; strict JSON only.

Reports never contain NaN or Infinity: a number that is not finite becomes ``null``
and the type that holds it carries a reason. ``dumps`` refuses anything else.

Loading is strict about types too: an ``int`` field takes an integer (not ``2.5``, not
``true``), a ``float`` field a number, a ``bool`` field ``true``/``false``; a value a
config class refuses comes back as that class's own error (``ConfigurationError``),
with where in the file it was. Loading never imports or calls anything the file names.

:func:`strict_jsonable` is the one normaliser for free-form values handed in from
outside (plugin metadata, probe details): whatever it returns can be dumped strictly.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
import numbers
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, IterableValidationNote
from cattrs.preconf.json import make_converter

from dlopt.errors import ConfigurationError, DloptError
from dlopt.precision import Precision

T = TypeVar("T")

converter: cattrs.Converter = make_converter(forbid_extra_keys=False)
converter.register_unstructure_hook(Path, str)
converter.register_structure_hook(Path, lambda value, _: Path(value))
converter.register_unstructure_hook(Precision, lambda p: p.value)
converter.register_structure_hook(Precision, lambda value, _: Precision.parse(value))


class JsonTypeError(ConfigurationError):
    """A JSON value of the wrong type for the field that reads it."""


def _structure_float(value: Any, _: object) -> float:
    # A float field written from an int (``max_setup_time_s=30``, a call count) is read
    # back as that int, so dumping what was loaded gives the same text (exact round trip).
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise JsonTypeError(f"expected a number, got {value!r}")
    return value if type(value) is int else float(value)


def _structure_int(value: Any, _: object) -> int:
    if type(value) is int:
        return value
    # 3.0 is an integer written by a float computation; 2.5 and true are not.
    if type(value) is float and value.is_integer():
        return int(value)
    raise JsonTypeError(f"expected an integer, got {value!r}")


def _structure_bool(value: Any, _: object) -> bool:
    if isinstance(value, bool):
        return value
    raise JsonTypeError(f"expected true or false, got {value!r}")


converter.register_structure_hook(float, _structure_float)
converter.register_structure_hook(int, _structure_int)
converter.register_structure_hook(bool, _structure_bool)


def finite_or_none(value: float | None) -> float | None:
    """``value`` if it is a finite number, else ``None`` (for strict JSON fields)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class NotJsonableError(ValueError):
    """A value that cannot be turned into JSON at all (its ``__str__`` raises, a cycle...)."""


_MAX_DEPTH = 100


def strict_jsonable(value: Any) -> Any:
    """``value`` as plain strict-JSON types, for free-form values dlopt did not make.

    Non-finite numbers become ``None``; dicts and lists/tuples are walked (keys become
    strings); sets become lists sorted by their JSON text; attrs values are unstructured
    first; numbers stay numbers (numpy's too); a torch dtype becomes its name
    (``"float16"``); anything else becomes its ``str()``. Raises :class:`NotJsonableError` (naming where)
    when a value cannot be converted: its ``__str__`` raises, it contains itself, or it
    nests deeper than 100 levels.
    """
    return _plain(value, "value", set())


def _plain(value: Any, where: str, open_ids: set[int]) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)  # a str enum gives its value, not "Class.MEMBER"
    try:
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real):
            return finite_or_none(float(value))
        if isinstance(value, Path):
            return str(value)
        if _is_torch_dtype(value):
            return str(value).removeprefix("torch.")
        if attrs.has(type(value)):
            value = converter.unstructure(value)
        if isinstance(value, (Mapping, list, tuple, set, frozenset)):
            return _plain_container(value, where, open_ids)
        return str(value)
    except NotJsonableError:
        raise
    except Exception as exc:
        raise NotJsonableError(
            f"{where} ({type(value).__name__}) cannot be turned into JSON: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _is_torch_dtype(value: object) -> bool:
    # Checked by type name: serialization must not import torch.
    kind = type(value)
    return kind.__name__ == "dtype" and kind.__module__ == "torch"


def _plain_container(value: Any, where: str, open_ids: set[int]) -> Any:
    if id(value) in open_ids:
        raise NotJsonableError(f"{where} refers to itself (a cycle); JSON cannot hold it")
    if len(open_ids) >= _MAX_DEPTH:
        raise NotJsonableError(f"{where} nests deeper than {_MAX_DEPTH} levels")
    open_ids.add(id(value))
    try:
        if isinstance(value, Mapping):
            result: dict[str, Any] = {}
            for key, item in value.items():
                name = (
                    str.__str__(key) if isinstance(key, str) else str(_plain(key, where, open_ids))
                )
                result[name] = _plain(item, f"{where}[{name!r}]", open_ids)
            return result
        if isinstance(value, (set, frozenset)):
            # Sorted by JSON text: the written order never depends on hashing.
            items = [_plain(item, f"{where}[{i}]", open_ids) for i, item in enumerate(value)]
            return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
        return [_plain(item, f"{where}[{i}]", open_ids) for i, item in enumerate(value)]
    finally:
        open_ids.discard(id(value))


def to_jsonable(obj: Any) -> Any:
    """Unstructure an attrs value into plain JSON types."""
    return converter.unstructure(obj)


#: Documents a user writes (the policies), by class name: an unknown key in one is a typo
#: and is refused, naming it. Reports are not among them: they keep fields a newer dlopt
#: added. The value supplies, lazily, the names of annotations imported only for type
#: checking (``"MeasurementPolicy"``), so that cattrs can resolve the class's fields.
_DOCUMENT_TYPES: dict[str, tuple[type, Callable[[], dict[str, Any]] | None]] = {}


def user_document(cls: type[T], lazy_names: Callable[[], dict[str, Any]] | None = None) -> type[T]:
    """Register ``cls`` as a document users write: :func:`from_jsonable` refuses unknown
    keys in it (and in the documents it nests). ``lazy_names`` returns the classes its
    annotations name but its module imports only for type checking."""
    _DOCUMENT_TYPES[cls.__name__] = (cls, lazy_names)
    return cls


def _document_type(annotation: Any) -> type | None:
    """The registered document class an attrs field annotation names, if any
    (``"QualityPolicy"``, ``"LimitOverride | None"``, or the resolved types)."""
    annotation = _without_none(annotation)
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    name = str(name).replace(" ", "").removesuffix("|None").strip("'\"")
    entry = _DOCUMENT_TYPES.get(name)
    return entry[0] if entry is not None else None


def _without_none(annotation: Any) -> Any:
    """``X`` for ``X | None`` (``Optional[X]``); anything else as it is."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _is_optional(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.replace(" ", "").endswith("|None")
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(
        None
    ) in typing.get_args(annotation)


#: Annotation origins that take a list in a document.
_SEQUENCES = (tuple, list, set, frozenset, Sequence, AbstractSet)


def _list_of(annotation: Any) -> tuple[bool, Any]:
    """Whether ``annotation`` (``None`` aside) takes a list, and its item type (``Any`` when
    the items differ or are not said)."""
    annotation = _without_none(annotation)
    if isinstance(annotation, str):
        text = annotation.replace(" ", "").removesuffix("|None")
        if text.startswith(("tuple[", "list[", "set[", "frozenset[")):
            item = text.partition("[")[2].removesuffix("]").removesuffix(",...")
            return True, str if item == "str" else Any
        return False, None
    origin = typing.get_origin(annotation)
    if origin not in _SEQUENCES:
        return False, None
    args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
    return True, args[0] if len(set(args)) == 1 else Any


def _field_types(cls: type) -> dict[str, Any]:
    """Each attrs field's annotation, resolved where the class's module can resolve it
    (strings otherwise: postponed annotations of names imported for type checking)."""
    entry = _DOCUMENT_TYPES.get(cls.__name__)
    local = entry[1]() if entry is not None and entry[0] is cls and entry[1] else None
    # A name only a type checker sees leaves the strings, which are read as such.
    with contextlib.suppress(Exception):
        attrs.resolve_types(cls, localns=local)
    return {a.name: a.type for a in attrs.fields(cls)}


def check_document(data: Any, cls: type) -> tuple[list[str], Any]:
    """Every problem of shape in ``data`` as the registered document ``cls`` (see
    :func:`from_jsonable`), by path, and ``data`` with each problem taken out (unknown
    keys dropped, a bare string or a non-list where a list goes emptied, a nested document
    that is not a mapping emptied), so that structuring what is left finds the other
    problems (wrong types, values out of range) in the same pass."""
    return _document_problems(data, cls, "")


def _document_problems(data: Any, cls: type, path: str) -> tuple[list[str], Any]:
    label = path or f"{cls.__name__} document"
    if not isinstance(data, Mapping):
        return [
            f"{label}: expected a mapping of {cls.__name__}'s fields (a JSON object or TOML "
            f"table), got {_shown(data)}"
        ], {}
    if _document_type(cls.__name__) is not cls:
        return [], data
    fields = _field_types(cls)
    problems: list[str] = []
    cleaned: dict[Any, Any] = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if not (isinstance(key, str) and key in fields):
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{where}: unknown key{hint}; {cls.__name__} takes {', '.join(fields)}")
            continue
        found, cleaned[key] = _value_problems(value, fields[key], where)
        problems.extend(found)
    return problems, cleaned


def _value_problems(value: Any, annotation: Any, where: str) -> tuple[list[str], Any]:
    """The problems of one field's value (a nested document, a list, a table of
    documents) and the value with them taken out."""
    if value is None and _is_optional(annotation):
        return [], value
    nested = _document_type(annotation)
    if nested is not None:
        return _document_problems(value, nested, where)
    is_list, item = _list_of(annotation)
    if is_list:
        return _list_problems(value, item, where)
    table_of = _table_of(annotation)
    if table_of is not None and isinstance(value, Mapping):
        problems: list[str] = []
        cleaned = {}
        for key, entry in value.items():
            found, cleaned[key] = _document_problems(entry, table_of, f"{where}.{key}")
            problems.extend(found)
        return problems, cleaned
    if _takes_mapping(annotation) and not isinstance(value, Mapping):
        return [
            f"{where}: expected a mapping (a JSON object or TOML table), got {_shown(value)}"
        ], {}
    if isinstance(value, bool) and not _takes_bool(annotation):
        return [f"{where}: got {_shown(value)}, a boolean, where {_wanted(annotation)} goes"], None
    return [], value


def _members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _takes_mapping(annotation: Any) -> bool:
    """Whether ``annotation`` (``None`` aside) is a mapping type (``dict[str, ...]``)."""
    if isinstance(annotation, str):
        return annotation.replace(" ", "").removesuffix("|None").startswith("dict[")
    return any(
        typing.get_origin(member) in (dict, Mapping) or member in (dict, Mapping)
        for member in _members(annotation)
    )


def _takes_bool(annotation: Any) -> bool:
    """Whether a boolean is one of ``annotation``'s values (unknown annotations: yes)."""
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        return "bool" in text or "Any" in text or not text
    return any(member in (bool, Any, object) for member in _members(annotation))


def _wanted(annotation: Any) -> str:
    """What ``annotation`` takes, in words for a document's writer."""
    names = []
    for member in _members(annotation) if not isinstance(annotation, str) else (annotation,):
        if member is type(None):
            names.append("null")
        elif member in (int, float):
            names.append("a number")
        elif member is str:
            names.append("text")
        else:
            names.append(str(getattr(member, "__name__", member)))
    return " or ".join(dict.fromkeys(names))


def _table_of(annotation: Any) -> type | None:
    """The registered document class of a ``dict[str, Document]`` annotation's values."""
    annotation = _without_none(annotation)
    if isinstance(annotation, str):
        text = annotation.replace(" ", "")
        if text.startswith("dict[str,") and text.endswith("]"):
            return _document_type(text.removeprefix("dict[str,").removesuffix("]"))
        return None
    if typing.get_origin(annotation) not in (dict, Mapping):
        return None
    args = typing.get_args(annotation)
    return _document_type(args[1]) if len(args) == 2 else None


def _list_problems(value: Any, item: Any, where: str) -> tuple[list[str], Any]:
    """A list is a JSON array (TOML array): never a bare string, whose letters would
    become the items; for a list of names, every item is text; a list of documents is
    checked item by item."""
    if isinstance(value, (str, bytes)):
        return [
            f"{where}: expected a list, got the string {value!r}; write it as a list, e.g. "
            f"[{value!r}]".replace("'", '"')
        ], []
    if isinstance(value, Mapping) or not isinstance(value, (list, tuple)):
        return [f"{where}: expected a list, got {_shown(value)}"], []
    if item is str:
        return [
            f"{where}[{index}]: expected a name (text), got {_shown(entry)}"
            for index, entry in enumerate(value)
            if not isinstance(entry, str)
        ], value
    document = _document_type(item)
    if document is None:
        return [], value
    problems: list[str] = []
    cleaned = []
    for index, entry in enumerate(value):
        found, kept = _document_problems(entry, document, f"{where}[{index}]")
        problems.extend(found)
        cleaned.append(kept)
    return problems, cleaned


def _shown(value: Any) -> str:
    kind = {dict: "a mapping", list: "a list", str: "the string", type(None): "null"}.get(
        type(value), type(value).__name__
    )
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return kind if value is None else f"{kind} {text}"


def from_jsonable(data: Any, cls: type[T]) -> T:
    """Structure plain JSON data into ``cls``.

    A value the target class refuses raises that class's own error (a
    :class:`~dlopt.errors.ConfigurationError` for policies) naming where it was, e.g.
    ``constraints.expected_calls: expected an integer, got 2.5``. In a document users
    write (:func:`user_document`: the policies), every problem of its shape is refused at
    once, by path, before anything is structured: a document (or a nested one) that is
    not a mapping, a key the class does not know (instead of dropped), and a bare string
    where a list is expected (``{"include": "eager_fp32"}``: a string is iterable, and
    would otherwise become the list of its letters).
    """
    if attrs.has(cls) and not isinstance(data, Mapping):
        raise JsonTypeError(_document_problems(data, cls, "")[0][0])
    problems = check_document(data, cls)[0] if cls in _registered_documents() else []
    if problems:
        raise ConfigurationError(
            f"{cls.__name__} document: {'; '.join(problems)}. Correct or remove each"
        )
    _resolve_lazy_annotations(cls)
    try:
        return converter.structure(data, cls)
    except cattrs.BaseValidationError as exc:
        leaves = list(_leaf_errors(exc, ""))
        ours = [leaf for _, leaf in leaves if isinstance(leaf, DloptError)]
        if not ours and cls in _registered_documents():
            # A value of the wrong type the shape checks above did not see: named by its
            # path all the same, never a raw structuring error.
            parts = [f"{path or cls.__name__}: {_type_error(leaf)}" for path, leaf in leaves]
            raise ConfigurationError(
                f"{cls.__name__} document: {'; '.join(parts)}. Correct or remove each"
            ) from exc
        if not ours:
            raise
        parts = [
            f"{path or cls.__name__}: {leaf}"
            if isinstance(leaf, DloptError)
            else f"{path or cls.__name__}: {type(leaf).__name__}: {leaf}"
            for path, leaf in leaves
        ]
        error_type = type(ours[0])
        try:
            error = error_type("; ".join(parts))
        except Exception:  # an error class with another signature
            error = ours[0]
        raise error from exc


def _type_error(leaf: BaseException) -> str:
    """A structuring error in words: what was expected where the value did not fit."""
    text = str(leaf) or type(leaf).__name__
    if isinstance(leaf, (TypeError, ValueError, AttributeError)):
        return f"a value of the wrong type ({text})"
    return f"{type(leaf).__name__}: {text}"


def _registered_documents() -> set[type]:
    return {cls for cls, _ in _DOCUMENT_TYPES.values()}


def _resolve_lazy_annotations(cls: type) -> None:
    entry = _DOCUMENT_TYPES.get(cls.__name__)
    if entry is None or entry[0] is not cls or entry[1] is None:
        return
    attrs.resolve_types(cls, localns=entry[1]())
    for field in attrs.fields(cls):
        nested = _document_type(field.type)
        if nested is not None and nested is not cls:
            _resolve_lazy_annotations(nested)


def _leaf_errors(exc: BaseException, path: str) -> Any:
    """``(path, error)`` for each error cattrs collected, with the JSON path it came from."""
    for note in getattr(exc, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            path = f"{path}.{note.name}" if path else note.name
        elif isinstance(note, IterableValidationNote):
            path = f"{path}[{note.index!r}]"
    subs = getattr(exc, "exceptions", None)
    if isinstance(exc, cattrs.BaseValidationError) and subs:
        for sub in subs:
            yield from _leaf_errors(sub, path)
    else:
        yield path, exc


def dumps(obj: Any, *, indent: int | None = 2) -> str:
    """Strict JSON text for an attrs value (raises ValueError on NaN/Infinity)."""
    return json.dumps(to_jsonable(obj), indent=indent, allow_nan=False, sort_keys=False)


def parse_strict_json(text: str) -> Any:
    """``json.loads`` that refuses NaN and Infinity (Python's parser accepts them)."""

    def reject_constant(name: str) -> Any:
        raise ValueError(f"not strict JSON: found {name}")

    return json.loads(text, parse_constant=reject_constant)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) so readers see the old file or the whole new one, never a part.

    Temp file in the same directory, fsync, rename, fsync the directory; the file gets the
    user's umask permissions. See :func:`dlopt.platform.fileio.atomic_write_bytes`.
    """
    from dlopt.platform.fileio import atomic_write_bytes

    return atomic_write_bytes(path, text.encode("utf-8"))
