"""The agent's verdict: one word for what an operator must know, decided here and only here.

``/health`` carries it (``state``, with ``state_reason``) and its HTTP code follows from it, ``bookie-scanner
status`` prints it and exits by it, ``/metrics`` exports it as ``bookie_scanner_state`` and the alert rules
read that gauge: every signal tells the same story because they all read this.

The states, the most urgent first (the first that applies is the verdict):

- ``config_error``: the agent cannot begin (ZooKeeper answers without the ledgers root, or the metadata
  service never answered since the start); nothing is scanned.
- ``failing``: a scanner thread fails or is stalled.
- ``escalated``: damage the agent could not repair; the operator's turn (README, Repair).
- ``repairing``: a move failed and is tried again, or BookKeeper's ReplicationWorker cleared a mark with the
  damage still there and the agent filed it again.
- ``damaged``: damage found and not yet handed to repair (not marked yet, or marking is off).
- ``marked``: every piece of damage is marked under-replicated and followed; a move is due.
- ``degraded``: ZooKeeper lost after the start (scanning goes on with cached metadata), or the state dir
  cannot be written.
- ``starting``: the scanners have not begun (waiting for the metadata service, or for the start delay).
- ``paused``: an operator paused scanning.
- ``healthy``: none of the above.

HTTP rule: ``/health`` answers 200 exactly when the state needs no one (``healthy``, ``paused``,
``starting``) and 503 otherwise; ``status`` exits 0 for those, 2 for ``config_error`` and 1 for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from scanner.units import iso_time

STATES = ("config_error", "failing", "escalated", "repairing", "damaged", "marked", "degraded", "starting",
          "paused", "healthy")
FINE = ("healthy", "paused", "starting")
NOT_DAMAGE = ("orphan_ledger", "unrepaired")  # informational; unrepaired is the escalation's own word


@dataclass(frozen=True, slots=True)
class Verdict:
    state: str
    reason: str

    @property
    def http_status(self) -> int:
        return 200 if self.state in FINE else 503

    @property
    def exit_status(self) -> int:
        """``bookie-scanner status``'s exit status."""
        if self.state in FINE:
            return 0
        return 2 if self.state == "config_error" else 1


def judge(health: dict) -> Verdict:
    """The verdict on one ``Agent.health()`` snapshot (its keys as ``/health`` serves them)."""
    if health.get("config_error"):
        return Verdict("config_error", health["config_error"])
    failing = [s["ledger_dir"] for s in health["scanners"] if s.get("error") or s.get("stalled")]
    if failing:
        return Verdict("failing", f"scanner failing or stalled: {', '.join(failing)}")
    breaker = health["repair"].get("breaker") or {}
    if breaker.get("tripped"):
        return Verdict("escalated", f"this bookie's disk looks failed ({breaker['figures']}): moves are stopped, "
                                    "marks go on; decommission the bookie")
    following = health["repair"]["following"]
    escalated = [r["ledger_id"] for r in following if r["stage"] == "escalated"]
    unrepaired = health["findings"].get("unrepaired", 0)
    if escalated or unrepaired:
        return Verdict("escalated", _ledgers("damage the agent could not repair, the operator's turn", escalated)
                       if escalated else f"{unrepaired} ledgers left unrepaired after their marks were cleared")
    failed = [r["ledger_id"] for r in following if r["failures"]]
    cleared = [r["ledger_id"] for r in following if r["stage"] == "remarked" or r.get("marks_cleared", 0)]
    if failed or cleared:
        why = [_ledgers("moves failed, tried again", failed)] if failed else []
        if cleared:
            why.append(_ledgers("a ReplicationWorker cleared the mark with the damage in place, the agent filed "
                                "it again", cleared))
        return Verdict("repairing", "; ".join(why))
    damage = sum(count for category, count in health["findings"].items() if category not in NOT_DAMAGE)
    marks = health["marks"]
    deferred = [r["ledger_id"] for r in following if r["stage"] == "deferred"]
    if damage and (not marks["enabled"] or marks["awaiting"] or deferred):
        why = ("marking is off ([repair] mark = false)" if not marks["enabled"] else
               "not marked yet" if marks["awaiting"] else
               _ledgers("not marked yet (auto-recovery disabled, or the ledger is open)", deferred))
        return Verdict("damaged", f"{damage} damage findings open, {why}")
    if damage or following:
        return Verdict("marked", _ledgers("damage marked under-replicated and followed until moved",
                                          [r["ledger_id"] for r in following]))
    if health.get("state_dir_problem"):
        return Verdict("degraded", f"state not saved: {health['state_dir_problem']}")
    if health.get("waiting_for_metadata"):
        return Verdict("starting", health["waiting_for_metadata"])
    if health.get("zookeeper_connected") is False:
        return Verdict("degraded", "ZooKeeper lost: scanning on cached metadata, marks wait")
    starting = [s for s in health["scanners"] if s["phase"] == "starting"]
    if not health["scanners"] or (starting and len(starting) == len(health["scanners"])):
        first = min((s["start_at"] for s in starting if s.get("start_at")), default=None)
        return Verdict("starting", "scanners not started yet" if first is None
                       else f"the first pass starts at {iso_time(first)} (start jitter)")
    if health["paused"]:
        return Verdict("paused", "scanning paused by an operator")
    return Verdict("healthy", "")


def _ledgers(what: str, ledger_ids: list[int]) -> str:
    if not ledger_ids:
        return what
    shown = ", ".join(str(i) for i in sorted(ledger_ids)[:10])
    more = f" and {len(ledger_ids) - 10} more" if len(ledger_ids) > 10 else ""
    return f"{what}: ledger{'s' if len(ledger_ids) > 1 else ''} {shown}{more}"
