"""``bookie-scanner status``: the running agent's health, for a person (or as JSON)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from scanner.envelope import envelope, write_document

EXIT_NOT_RUNNING = 3


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "status", help="show the running agent's health",
        description="Ask the agent of this config for its health. The headline is the agent's verdict (the "
                    "state /health and the bookie_scanner_state metric carry). Exit status: 0 healthy, paused or "
                    "starting; 1 any other state (failing, escalated, repairing, damaged, marked, degraded: the "
                    "headline says which and why); 2 configuration error (of this command, or the agent's "
                    "config_error); 3 agent not running (saved progress is shown).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", metavar="FILE", type=Path, required=True, help="the agent's TOML config")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from scanner.agent.control import AgentNotRunning, call_agent
    from scanner.commands.run import load

    config = load(args.config)
    try:
        health = call_agent(config.state_dir, "GET", "/health")
        health.pop("http_status", None)  # 503 says degraded; the body is the same health
    except AgentNotRunning as exc:
        return _not_running(config, exc, args.format)
    if args.format == "json":
        write_document(envelope("agent_status", health))
    else:
        sys.stdout.write(health_text(health))
    return _verdict(health).exit_status


def _verdict(health: dict):
    from scanner.agent.verdict import Verdict

    return Verdict(health["state"], health["state_reason"])


def health_text(health: dict) -> str:
    """The health JSON as a few lines for a person; the headline is the verdict, as the exit status is."""
    verdict = _verdict(health)
    headline = verdict.state.upper().replace("_", " ")
    if verdict.exit_status:
        headline = "NEEDS ATTENTION: " + headline
    if verdict.reason:
        headline += f" ({verdict.reason})"
    if health["paused"] and verdict.state != "paused":
        headline += " (paused)"
    lines = [f"bookie {health['bookie_id']} ({health['storage']} storage): {headline}",
             f"  record walker  {health['record_walker']}"]
    if "zookeeper_connected" in health:
        if health.get("config_error") or health.get("waiting_for_metadata"):
            zookeeper = "NOT connected yet: nothing is scanned until it answers"
        elif health["zookeeper_connected"]:
            zookeeper = "connected"
        else:
            zookeeper = "NOT connected (scanning on cached metadata)"
        lines.append("  zookeeper      " + zookeeper)
    if health.get("state_dir_problem"):
        lines.append(f"  state dir      NOT SAVED: {health['state_dir_problem']}")
    lines.append(f"  suspects       {health['suspects_queued']} queued")
    findings = health["findings"]
    lines.append("  findings       " + (", ".join(f"{k} {v}" for k, v in findings.items()) or "none"))
    marks = health["marks"]
    if marks["enabled"]:
        tracked = ", ".join(f"{k} {v}" for k, v in marks["tracked"].items()) or "none"
        lines.append(f"  marks          {marks['awaiting']} awaiting, {marks['filed']} filed since start; followed: {tracked}")
    lines.extend(repair_lines(health["repair"]))
    for scanner in health["scanners"]:
        lines.extend(_scanner_lines(scanner))
    return "\n".join(lines) + "\n"


def repair_lines(repair: dict) -> list[str]:
    """Where each damaged ledger is in the repair loop, and since when; the ones that ended lately."""
    from scanner.units import duration_text

    def ago(ms: int) -> str:
        return duration_text(max(0.0, time.time() - ms / 1000)) + " ago"

    lines = []
    if repair["following_total"]:
        lines.append(f"  repairing      {repair['following_total']} damaged ledgers")
    for row in repair["following"]:
        last = row["events"][-1] if row["events"] else None
        step = f"; {last['what']}: {last['detail']}" if last else ""
        lines.append(f"    ledger {row['ledger_id']} ({row['category']}): {row['stage'].upper()} for "
                     f"{ago(row['stage_since_ms']).removesuffix(' ago')}, found {ago(row['since_ms'])}{step}")
        if row.get("marks_cleared"):
            lines.append(f"      BookKeeper's ReplicationWorker cleared the mark {row['marks_cleared']} time(s) with "
                         f"the damage still here; the agent filed it again ('marks' may show 0 in between)")
    if repair["ended_total"]:
        lines.append(f"  repaired       {repair['ended_total']} lately")
    for row in repair["ended"][:10]:
        lines.append(f"    ledger {row['ledger_id']}: ended {ago(row['ended_ms'])}, {duration_text((row['ended_ms'] - row['since_ms']) / 1000)} "
                     f"after it was found: {row['why']}")
    return lines


def _scanner_lines(scanner: dict) -> list[str]:
    from scanner.units import duration_text, moment_text, rate_text

    rate = rate_text(scanner["bytes_per_second"])
    if scanner.get("next_pass_at") is not None:
        lines = [f"  {scanner['ledger_dir']}: pass {scanner['passes_completed']} done; "
                 f"the next starts {moment_text(scanner['next_pass_at'])}"]
    else:
        eta = scanner["eta_seconds"]
        eta_text = "" if eta is None else f", ETA {duration_text(eta)}"
        lines = [f"  {scanner['ledger_dir']}: {scanner['phase']} {scanner['pass_progress']:.1%} of pass "
                 f"{scanner['passes_completed'] + 1}{eta_text}, at {rate}"]
        if scanner.get("start_at") is not None:
            lines = [f"  {scanner['ledger_dir']}: pass {scanner['passes_completed'] + 1} starts "
                     f"{moment_text(scanner['start_at'])} (in {duration_text(scanner['start_at'] - time.time())}, "
                     f"the start delay); suspects are scanned meanwhile"]
    if scanner.get("behind_schedule"):
        needed = scanner.get("needed_bytes_per_second")
        lines.append("      BEHIND SCHEDULE: " + ("past its period" if needed is None
                                                  else f"needs {rate_text(needed)} to end within its period"))
    if scanner["last_pass_finished"]:
        lines.append(f"      last full pass finished {duration_text(time.time() - scanner['last_pass_finished'])} ago")
    if scanner["error"]:
        lines.append(f"      FAILING: {scanner['error']}")
    return lines


def _not_running(config, reason, fmt: str) -> int:
    from scanner.agent.cursor import load_cursor
    from scanner.statefile import read_json

    cursors = []
    for path in sorted(config.state_dir.glob("cursor-*.json")):
        raw = read_json(path) if path.is_file() else None
        cursor = load_cursor(path, raw.get("ledger_dir", "")) if isinstance(raw, dict) else None
        if cursor is not None:
            cursors.append(cursor)
    if fmt == "json":
        write_document(envelope("agent_status", {
            "status": "not_running", "reason": str(reason),
            "scanners": [{"ledger_dir": c.ledger_dir, "phase": c.phase, "pass_progress": c.pass_progress,
                          "passes_completed": c.passes_completed} for c in cursors]}))
    else:
        print(f"agent not running ({reason})")
        for c in cursors:
            print(f"  {c.ledger_dir}: saved at {c.phase} {c.pass_progress:.1%} of pass {c.passes_completed + 1}")
    return EXIT_NOT_RUNNING
