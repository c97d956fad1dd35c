"""``scan --mark``: turn a scan's findings into under-replication marks, and say what was done."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from scanner.bookie_protocol.transport import TransportRefused
from scanner.checks.findings import Finding
from scanner.errors import UsageError
from scanner.repair.filer import DEFAULT_MARKS_PER_SECOND, MarkFiler
from scanner.repair.marks import UnderreplicationMarks
from scanner.repair.planner import damage_by_ledger, plan_repairs
from scanner.repair.zk_acls import zk_acls


def marks_for(store, conf: Mapping[str, str] | None = None) -> UnderreplicationMarks:
    """The marks of the cluster ``store`` reads; only a live ZooKeeper store can be marked.

    Marks are created with the ACLs a bookie's ``conf`` asks for (``zkEnableSecurity``); without one (the cluster
    audit) with BookKeeper's default, open.
    """
    from scanner.metadata.zookeeper import ZooKeeperStore

    if not isinstance(store, ZooKeeperStore):
        raise UsageError("--mark needs ZooKeeper metadata (zk://...): a metadata dump cannot be marked")
    try:
        return UnderreplicationMarks(store.client, store.root, acl=zk_acls(conf or {}, store.client))
    except TransportRefused as exc:
        raise UsageError(f"--mark: {exc.reason}") from None


def mark_damage(store, bookie_id: str, findings: list[Finding], *, conf: Mapping[str, str],
                state_dir: Path | None = None, marks_per_second: float | None = DEFAULT_MARKS_PER_SECOND) -> dict:
    """Plan against fresh metadata, file the marks, remember them for follow-up when ``state_dir`` is given.

    Returns the scan report's ``repair`` section.
    """
    from scanner.repair.followup import FollowUp

    filer = MarkFiler(marks_for(store, conf), bookie_id, marks_per_second)
    metadata = {ledger_id: store.ledger(ledger_id) for ledger_id in damage_by_ledger(findings)}
    plans = plan_repairs(findings, metadata, bookie_id)
    if state_dir is None:
        report, following = filer.file_marks(plans), []
    else:
        report, following = FollowUp(state_dir, filer).file(plans)
    section = report.to_json()
    section["following_up"] = following
    section["followed"] = state_dir is not None
    return section


def repair_text(section: dict) -> str:
    """The ``repair`` section for people."""
    lines = ["repair (under-replication marks):"]
    if section["disabled"]:
        lines.append(f"  auto-recovery is DISABLED (underreplication/disable): {len(section['disabled'])} "
                     f"damaged ledgers not marked: {_ids(section['disabled'])}")
    for key, label in (("marked", "marked"), ("merged", "added to an existing mark"),
                       ("already_marked", "already marked"), ("following_up", "under follow-up")):
        if section[key]:
            lines.append(f"  {label:<26} {_ids(section[key])}")
    for key, label in (("deferred", "deferred"), ("skipped", "skipped")):
        for plan in section[key]:
            lines.append(f"  {label:<26} ledger {plan['ledger_id']}: {plan['reason']}")
    for ledger_id, why in section["failed"].items():
        lines.append(f"  {'FAILED':<26} ledger {ledger_id}: {why}")
    if len(lines) == 1:
        lines.append("  nothing to mark")
    if not section["followed"]:
        lines.append("  (no --state-dir: these marks are not followed up)")
    return "\n".join(lines) + "\n"


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids)
