"""A capability's JSON Schema contract: checked at declaration, applied to payloads and results."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import exceptions as jsonschema_errors
from jsonschema.protocols import Validator

from reach.agent.exceptions import InvalidDeclaration
from reach.core import patterns

Schema = dict[str, Any] | bool | str | None


def compile_schema(schema: Schema, where: str) -> tuple[str, Validator]:
    """Return (canonical JSON text, validator) or raise InvalidDeclaration naming the problem."""
    if schema is None:
        schema = {}
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError as exc:
            raise InvalidDeclaration(f"{where}: the JSON Schema is not valid JSON ({exc}).") from None
    if not isinstance(schema, (dict, bool)):
        raise InvalidDeclaration(f"{where}: a JSON Schema must be an object or a boolean, got "
                                 f"{type(schema).__name__}.")
    try:
        patterns.check_schema(schema)  # also refuses a pattern the linear-time engine cannot run
    except jsonschema_errors.SchemaError as exc:
        path = "/".join(str(p) for p in exc.path) or "(root)"
        raise InvalidDeclaration(f"{where}: invalid JSON Schema at {path}: {exc.message}. "
                                 "Check it against the JSON Schema specification it declares.") from None
    return json.dumps(schema, separators=(",", ":"), sort_keys=True), patterns.validator(schema)


def violation(validator: Validator, value: Any) -> str | None:
    """The first reason `value` breaks the schema, or None when it conforms."""
    error = next(iter(validator.iter_errors(value)), None)
    if error is None:
        return None
    path = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"at {path}: {error.message}"[:1000]
