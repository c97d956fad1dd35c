"""The operator's command, run once when a damaged ledger is escalated: an argv template with ``{ledger}`` and
``{bookie}`` (no shell), its exit status and the tail of its output kept in the ledger's follow-up."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Sequence

DEFAULT_COMMAND_TIMEOUT = 600.0
OUTPUT_TAIL = 2000


@dataclass(frozen=True, slots=True)
class Escalation:
    argv: tuple[str, ...]
    exit_status: int | None  # None: it did not finish (timeout, or it could not be started)
    output_tail: str
    error: str | None

    def to_json(self) -> dict:
        return {"argv": list(self.argv), "exit_status": self.exit_status, "output_tail": self.output_tail,
                "error": self.error}

    @classmethod
    def from_json(cls, obj: dict) -> "Escalation":
        return cls(tuple(obj["argv"]), obj.get("exit_status"), obj.get("output_tail", ""), obj.get("error"))


def expand_command(template: Sequence[str], ledger_id: int, bookie_id: str) -> list[str]:
    """The argv with ``{ledger}`` and ``{bookie}`` replaced in every word (no shell involved)."""
    return [word.replace("{ledger}", str(ledger_id)).replace("{bookie}", bookie_id) for word in template]


def run_command(argv: Sequence[str], timeout: float) -> Escalation:
    """Run ``argv`` once with a timeout; its status and the tail of its output, never an exception."""
    try:
        done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        output = exc.output or b""
        return Escalation(tuple(argv), None, output.decode(errors="replace")[-OUTPUT_TAIL:],
                          f"still running after {timeout:g}s: killed")
    except OSError as exc:
        return Escalation(tuple(argv), None, "", f"could not start: {exc}")
    return Escalation(tuple(argv), done.returncode, done.stdout.decode(errors="replace")[-OUTPUT_TAIL:], None)
