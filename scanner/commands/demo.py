"""``bookie-scanner demo``: the main job on an embedded default — a generated bookie with injected faults."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from scanner.commands.output import add_format_option

DESCRIPTION = """\
Generate a small sample cluster (an InterleavedLedgerStorage bookie and a ZooKeeper dump of its
ledgers' metadata), inject a few faults — a flipped payload byte, a lost index file, entries never
stored, an entry log cut short by a disk error, a deleted ledger's leftovers — scan the bookie the
way 'bookie-scanner scan' does, print the report, and check that it found exactly what was injected.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="scan a generated sample bookie with injected faults",
                                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="write the sample cluster into DIR (must not exist) and keep it, to scan it yourself")
    add_format_option(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.keep is not None:
        return _demo(args.keep, args.format)
    with tempfile.TemporaryDirectory(prefix="bookie-scanner-demo-") as tmp:
        return _demo(Path(tmp) / "sample", args.format)


def _demo(root: Path, fmt: str) -> int:
    from scanner.scan.on_demand import scan_bookie
    from scanner.envelope import write_document
    from scanner.metadata.snapshot import SnapshotStore
    from scanner.sample.sample_cluster import build_sample
    from scanner.storage.bookie import open_bookie
    from scanner.storage.layout import discover_layout

    sample = build_sample(root)
    layout = discover_layout(sample.bookie_conf)
    store = SnapshotStore(sample.dump)
    with tempfile.TemporaryDirectory(prefix="bookie-scanner-") as work_dir, \
            open_bookie(layout, work_dir=work_dir) as storage:
        report = scan_bookie(storage, store, layout.bookie_id, layout.storage)
    # with --format json, stdout is the report alone; what the demo says about it goes to stderr
    talk = sys.stderr if fmt == "json" else sys.stdout
    print(f"sample cluster in {root}: bookie {sample.bookie_conf}, metadata {sample.dump}\n", file=talk)
    if fmt == "json":
        write_document(report.to_json())
    else:
        print(report.to_text())
    found = {(f.category.value, f.entry_log if f.category.value == "damaged_entry_log" else f.ledger_id)
             for f in report.findings}
    injected = {(category, key) for category, by_key in sample.faults.items() for key in by_key}
    if found == injected:
        print("demo: the scan found every injected fault and nothing else", file=talk)
        return 0
    print(f"demo: MISMATCH: missed {sorted(injected - found)}, unexpected {sorted(found - injected)}", file=sys.stderr)
    return 1
