"""The pure core: decisions and views, no I/O.

The rule (tests/unit/core/test_core_imports.py enforces it): modules in reach.core are pure decisions and
views; they import only the standard library, small pure third-party libraries (pydantic and
pydantic-settings, semver, jsonschema), `reach.core.*`, `reach.records`, `reach.errors` and `reach.names` --
never confluent_kafka, aiokafka, faust, redis, httpx, starlette, fastapi, rocksdict, nor any other `reach.*`
module. The shells that feed them (consumers, producers, stores, HTTP) live outside reach.core.
"""
