"""The envelope every JSON document of the scanner travels in: what it is, which format, which tool, when.

``{"schema_version": 1, "kind": "scan_report", "tool": "bookie-scanner", "tool_version": "0.1.0",
"generated_at": "2026-01-02T03:04:05Z", ...the document's own keys}``. ``kind`` names the JSON Schema
that describes the document (``schemas/<kind>.schema.json`` in the repository); ``schema_version``
goes up when a key is removed or changes meaning, never when one is added.
"""

from __future__ import annotations

import datetime
import json
import sys
from typing import TextIO

from scanner import __version__

SCHEMA_VERSION = 1
TOOL = "bookie-scanner"


def tool_version() -> str:
    """The tool's version (also when run from a zip shipped to Spark without installing)."""
    return __version__


def envelope(kind: str, document: dict) -> dict:
    """``document`` with the envelope keys in front."""
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {"schema_version": SCHEMA_VERSION, "kind": kind, "tool": TOOL, "tool_version": tool_version(),
            "generated_at": now, **document}


def write_document(document: dict, out: TextIO | None = None) -> None:
    """Print a document (already in its envelope) as indented JSON, newline-terminated."""
    out = sys.stdout if out is None else out
    json.dump(document, out, indent=2)
    out.write("\n")
