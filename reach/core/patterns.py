"""Contract regexes on a linear-time engine (RE2): a schema's `pattern`, `patternProperties` and `format: regex`
never backtrack, wherever a contract is checked (decision 0060).

jsonschema matches `pattern` / `patternProperties` (and, through them, `additionalProperties` and
`unevaluatedProperties`) with Python's backtracking `re`: `^(a+)+$` against forty `a`s and a `b` holds a thread
for minutes, and on the gateway that thread is its event loop. Here:

- `check_schema(schema)` is jsonschema's own meta-schema check with a format checker whose `regex` is "RE2
  compiles it": a pattern RE2 cannot run (backreferences, lookaround, a repetition too large for its memory
  budget) makes the schema invalid, with a message saying so, where a contract is declared (the agent SDK,
  `reach mcp bridge`'s import, NeedsInput).
- `validator(schema)` is the draft's validator with every keyword that matches a regex run on RE2 instead of `re`
  (the same keyword code, its module's `re` replaced by RE2; the keyword tests hold each of them to it). A pattern
  RE2 cannot compile raises `re2.error` while validating: the callers treat that as a broken schema. jsonschema
  moves into each subschema through `evolve()`, which picks the class of a subschema's own `$schema`: here that
  class is made linear too, so a nested `$schema` (or a `$ref` to one) never reaches `re` (0060 addendum).
- Nothing is ever fetched: `validator()` resolves `$ref` in an empty registry (the schema itself and the drafts'
  meta-schemas), so a `$ref` to an http(s):// or file:// URL is an unresolvable reference, not a request; and
  `check_schema` refuses such a `$ref` where the contract is declared (0060 addendum).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import attrs
import re2
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import _format, _keywords, _legacy_keywords, _utils, validators
from jsonschema import exceptions as jsonschema_errors
from jsonschema.protocols import Validator

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported to the caller, not printed on stderr


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """`pattern` compiled by RE2 (cached); re2.error when RE2 cannot run it."""
    return re2.compile(pattern, _OPTIONS)


def problem(pattern: str) -> str | None:
    """Why RE2 cannot run `pattern`, or None when it can."""
    try:
        compiled(pattern)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        return why
    return None


PatternError = re2.error  # raised while validating against a pattern RE2 cannot compile


class _Linear:
    """The part of `re` jsonschema's keywords use (`search`), on RE2."""

    error = re2.error

    @staticmethod
    def search(pattern: str, string: str, flags: int = 0) -> Any:
        return compiled(pattern).search(string)


def _rebound(module: types.ModuleType, replaced: dict[str, Any]) -> dict[str, Any]:
    """A copy of `module`'s globals with `replaced` in it and each of its functions re-made over that copy."""
    scope = {**vars(module), **replaced}
    for name, value in vars(module).items():
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            copy = types.FunctionType(value.__code__, scope, value.__name__, value.__defaults__, value.__closure__)
            copy.__kwdefaults__, copy.__qualname__ = value.__kwdefaults__, value.__qualname__
            scope[name] = copy
    return scope


_UTILS = _rebound(_utils, {"re": _Linear})
_UTILS_NS = types.SimpleNamespace(**_UTILS)
_KEYWORDS = {module.__name__: _rebound(module, {"re": _Linear, "_utils": _UTILS_NS,
                                                 **{k: v for k, v in _UTILS.items() if k in vars(module)
                                                    and vars(module)[k] is getattr(_utils, k, None)}})
             for module in (_keywords, _legacy_keywords)}


_STOCK: dict[type[Any], type[Any]] = {}  # a linear class -> the stock class it was made of


def _evolve(self: Any, **changes: Any) -> Any:
    """jsonschema's `evolve` (the validator of a subschema), with the subschema's own dialect made linear too."""
    cls = type(self)
    schema = changes.setdefault("schema", self.schema)
    chosen = validators.validator_for(schema, default=_STOCK[cls])
    for field in attrs.fields(cls):
        if field.init and field.alias not in changes:
            changes[field.alias] = getattr(self, field.name)
    return _linear_class(chosen)(**changes)


@functools.cache
def _linear_class(cls: type[Validator]) -> type[Validator]:
    if cls in _STOCK:
        return cls
    linear: dict[str, Callable[..., Any]] = {}
    for keyword, check in cls.VALIDATORS.items():
        scope = _KEYWORDS.get(getattr(check, "__module__", ""))
        if scope is not None and scope.get(check.__name__) is not None:
            linear[keyword] = scope[check.__name__]
    made: Any = validators.extend(cls, linear)
    made.evolve = _evolve
    _STOCK[made] = cls
    return made  # type: ignore[no-any-return]


def _is_regex(instance: object) -> bool:
    if isinstance(instance, str) and problem(instance) is not None:
        raise ValueError(problem(instance))
    return True


FORMATS = _format.FormatChecker()
FORMATS.checkers = {**FORMATS.checkers, "regex": (_is_regex, (ValueError,))}


def check_schema(schema: Any) -> None:
    """jsonschema.SchemaError when `schema` is not a valid JSON Schema of its draft, or names a pattern RE2 cannot
    run (its message then says so and why)."""
    cls = validators.validator_for(schema)
    try:
        cls.check_schema(schema, format_checker=FORMATS)
    except jsonschema_errors.SchemaError as exc:
        if exc.validator == "format" and exc.validator_value == "regex":
            exc.message = (f"the pattern {exc.instance!r:.200} cannot be run by the linear-time regex engine (RE2: "
                           f"{problem(str(exc.instance))}); contracts take patterns without backreferences or "
                           "lookaround, and repetitions RE2 can hold")
        raise
    outside = external_ref(schema)
    if outside is not None:
        raise jsonschema_errors.SchemaError(
            f"the $ref {outside!r:.200} points outside the schema; contracts are self-contained (put the referenced "
            "schema under $defs): nothing is fetched while validating", validator="$ref", validator_value=outside)


_REFS = ("$ref", "$dynamicRef", "$recursiveRef")
_DATA = ("enum", "const", "default", "examples")  # values, not schemas: a "$ref" in them is data


def external_ref(schema: Any) -> str | None:
    """The first `$ref` of `schema` that does not resolve inside it (or to a draft's meta-schema), or None."""
    root = validator(schema)._resolver  # type: ignore[attr-defined]
    specification = referencing.jsonschema.specification_with(
        schema.get("$schema", "") if isinstance(schema, dict) else "", default=referencing.jsonschema.DRAFT202012)

    def walk(node: Any, resolver: Any) -> str | None:
        if isinstance(node, list):
            return next((found for item in node if (found := walk(item, resolver)) is not None), None)
        if not isinstance(node, dict):
            return None
        if node is not schema and specification.id_of(node):
            resolver = resolver.in_subresource(specification.create_resource(node))
        for key, value in node.items():
            if key in _REFS and isinstance(value, str):
                try:
                    resolver.lookup(value)
                except referencing.exceptions.Unresolvable:
                    return value
            elif key not in _DATA and (found := walk(value, resolver)) is not None:
                return found
        return None

    return walk(schema, root)


def validator(schema: Any) -> Validator:
    """The validator of `schema`'s draft, its regexes run by RE2 and its `$ref`s resolved without retrieving
    anything (not checked: see check_schema)."""
    return _linear_class(validators.validator_for(schema))(schema, registry=referencing.Registry())
