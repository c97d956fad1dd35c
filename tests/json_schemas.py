"""The JSON Schema files of the repository (``schemas/``), to check real output against."""

from __future__ import annotations

import datetime
import functools
import json
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


@functools.cache
def _registry() -> tuple[Registry, dict[str, dict]]:
    schemas = {path.name.removesuffix(".schema.json"): json.loads(path.read_text())
               for path in SCHEMAS.glob("*.schema.json")}
    registry = Registry().with_resources((schema["$id"], Resource.from_contents(schema)) for schema in schemas.values())
    return registry, schemas


def assert_valid(document: dict) -> None:
    """``document`` matches the schema its ``kind`` names, and its envelope time is an ISO 8601 UTC instant."""
    registry, schemas = _registry()
    schema = schemas[document["kind"]]
    Draft202012Validator.check_schema(schema)
    errors = sorted(Draft202012Validator(schema, registry=registry).iter_errors(document), key=str)
    assert not errors, "\n".join(f"{list(error.absolute_path)}: {error.message}" for error in errors[:10])
    assert datetime.datetime.fromisoformat(document["generated_at"]).utcoffset() == datetime.timedelta(0)
