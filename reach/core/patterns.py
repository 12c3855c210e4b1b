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
  RE2 cannot compile raises `re2.error` while validating: the callers treat that as a broken schema.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import re2
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


@functools.cache
def _linear_class(cls: type[Validator]) -> type[Validator]:
    linear: dict[str, Callable[..., Any]] = {}
    for keyword, check in cls.VALIDATORS.items():
        scope = _KEYWORDS.get(getattr(check, "__module__", ""))
        if scope is not None and scope.get(check.__name__) is not None:
            linear[keyword] = scope[check.__name__]
    return validators.extend(cls, linear)  # type: ignore[no-any-return]


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


def validator(schema: Any) -> Validator:
    """The validator of `schema`'s draft, its regexes run by RE2 (not checked: see check_schema)."""
    return _linear_class(validators.validator_for(schema))(schema)
