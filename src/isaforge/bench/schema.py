"""The JSON schema of bench documents (benchmarks/schema/bench.schema.json) and validation."""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_ID = "isaforge-bench/1"
_CANDIDATES = [Path(__file__).resolve().parents[3] / "benchmarks" / "schema" / "bench.schema.json"]


def schema_path() -> Path:
    for p in _CANDIDATES:
        if p.is_file():
            return p
    raise FileNotFoundError("bench.schema.json not found (expected benchmarks/schema/ in the "
                            "source tree)")


def load_schema() -> dict:
    return json.loads(schema_path().read_text())


def validate(doc: dict, definition: str | None = None) -> None:
    """Raise jsonschema.ValidationError unless `doc` fits the schema (or one of its $defs)."""
    import jsonschema

    schema = load_schema()
    if definition:
        schema = {"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]}
    jsonschema.validate(doc, schema)
