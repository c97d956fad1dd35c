"""The audit's scale-out parts: znodes read many to a request, the ledger tree split by parent for the
executors, a dump parsed by Spark in either layout, and ledgers cleared in bulk, judged one by one only
when the comparison of listings cannot clear them."""

from __future__ import annotations

import json
from unittest.mock import ANY

import pytest

from audit_exports import DUMP, clean_exports  # noqa: F401 (fixture)
from corpus import manifest
from scanner.audit.multi_read import read_nodes_async
from scanner.audit.dump_frame import DumpFrameStore
from scanner.audit.spark_session import tasks
from scanner.cli import main
from scanner.metadata.ledger_paths import LedgerManager, layout_bytes, leaf_parents, ledger_id_from_path, ledger_path
from scanner.metadata.snapshot import write_dump_nodes
from scanner.metadata.store import ZNode
from spark_session import spark  # noqa: F401 (fixture)


@pytest.mark.zookeeper
def test_multi_read_answers_every_path_in_order_with_none_for_the_missing(zk_client, zk_chroot):
    from kazoo.client import KazooClient

    paths = [f"/n{number}" for number in range(1200)]
    transaction = zk_client.transaction()
    for number, path in enumerate(paths):
        transaction.create(zk_chroot + path, f"data {number}".encode())
    assert not [result for result in transaction.commit() if isinstance(result, Exception)]
    chrooted = KazooClient(hosts=zk_client.hosts[0][0] + f":{zk_client.hosts[0][1]}" + zk_chroot)
    chrooted.start(timeout=30)
    try:
        asked = [*paths[:600], "/missing", *paths[600:]]
        answers = read_nodes_async(chrooted, asked).get(timeout=30)
        expected = [zk_client.get(zk_chroot + path) for path in paths]
    finally:
        chrooted.stop()
        chrooted.close()
    assert answers[600] is None
    del answers[600]
    assert [(data, stat.mzxid, stat.ctime) for data, stat in answers] == [
        (data, stat.mzxid, stat.ctime) for data, stat in expected]


def test_leaf_parents_list_the_tree_above_the_ledgers_only():
    ledger_ids = [0, 1, 9_999, 10_000, 123_456_789, 2**31 - 1, 2**40 + 5]
    tree: dict[str, set[str]] = {}
    for ledger_id in ledger_ids:
        path = ledger_path(LedgerManager.HIERARCHICAL, "/ledgers", ledger_id)
        names = path.split("/")[1:]
        for depth in range(1, len(names)):
            tree.setdefault("/" + "/".join(names[:depth]), set()).add(names[depth])
    tree["/ledgers"] |= {"available", "LAYOUT", "underreplication", "idgen"}
    listed = []

    def children(path):
        listed.append(path)
        return sorted(tree.get(path, ()))

    parents = list(leaf_parents(LedgerManager.HIERARCHICAL, "/ledgers", children))
    assert set(listed).isdisjoint(parents)  # the leaves are left to whoever reads each parent
    assert parents == ["/ledgers/00/0000", "/ledgers/00/0001", "/ledgers/01/2345", "/ledgers/000/0000/0021/4748",
                       "/ledgers/000/0001/0995/1162"]
    leaves = [ledger_id_from_path(LedgerManager.HIERARCHICAL, "/ledgers", f"{parent}/{leaf}")
              for parent in parents for leaf in tree[parent]]
    assert sorted(leaves) == ledger_ids
    assert list(leaf_parents(LedgerManager.FLAT, "/ledgers", children)) == ["/ledgers"]


def _report(capsys, *args) -> tuple[int, dict]:
    status = main(["audit", *args, "--format", "json"])
    return status, json.loads(capsys.readouterr().out)


@pytest.mark.spark
def test_a_dump_with_a_znode_per_line_gives_the_report_of_the_same_dump_on_one_line(spark, clean_exports, tmp_path,
                                                                                   capsys):  # noqa: F811
    assert DUMP.read_text().count("\n") <= 1  # the corpus dump is one JSON line
    per_line = tmp_path / "per-line.json"
    per_line.write_text("[\n" + ",\n".join(json.dumps(znode) for znode in json.loads(DUMP.read_text())) + "\n]\n")
    assert per_line.read_text().startswith("[\n")
    status, one_line = _report(capsys, "--exports", str(clean_exports), "--metadata", f"file:{DUMP}")
    assert status == 1 and one_line["summary"]["ledgers_checked"] == 51
    assert _report(capsys, "--exports", str(clean_exports), "--metadata", f"file:{per_line}") == (
        status, {**one_line, "generated_at": ANY})


@pytest.mark.spark
def test_only_ledgers_the_comparison_of_listings_cannot_clear_are_judged_one_by_one(spark, clean_exports,
                                                                                    capsys):  # noqa: F811
    status, report = _report(capsys, "--exports", str(clean_exports), "--metadata", f"file:{DUMP}")
    not_closed = {ledger["ledger_id"] for ledger in manifest()["ledgers"] if ledger["status"] == "OPEN"}
    violating = {violation["ledger_id"] for violation in report["violations"]}
    assert not_closed == {47, 48} and violating == {6, 17, 46}  # two orphans and the under-replicated ledger
    # of the 51 ledgers checked, only the open and the violating ones are judged one by one, not the clean ones
    assert report["summary"]["ledgers_judged_one_by_one"] == len(not_closed | violating)
    assert report["summary"]["ledgers_checked"] == 51


@pytest.mark.spark
def test_a_dump_that_is_not_json_is_one_line_and_exit_2(spark, clean_exports, tmp_path, capsys):  # noqa: F811
    broken = tmp_path / "broken.json"
    broken.write_text('[{"path": "/ledgers", "data_b64": null},\n{"path": ')
    assert main(["audit", "--exports", str(clean_exports), "--metadata", f"file:{broken}"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("bookie-scanner audit: ") and str(broken) in line
    assert main(["audit", "--exports", str(clean_exports), "--metadata", f"file:{tmp_path / 'none.json'}"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "none.json: no such dump file" in line


@pytest.mark.spark
def test_a_dump_of_many_splits_is_read_by_as_many_tasks_as_the_cores_can_take(spark, tmp_path):  # noqa: F811
    """Spark's default splits a file into about one task per core (2 here): one executor would read the whole
    dump while a second, registered a moment later, waits. The audit's session asks for 4 tasks per core."""
    from pyspark.sql.functions import spark_partition_id

    ledgers = 10_000
    znodes = [ZNode("/ledgers", b"", False, 1, 0, 0),
              ZNode("/ledgers/LAYOUT", layout_bytes(LedgerManager.HIERARCHICAL), False, 2, 0, 0)]
    parents = sorted({ledger_path(LedgerManager.HIERARCHICAL, "/ledgers", n).rsplit("/", 1)[0] for n in range(ledgers)})
    znodes += [ZNode(path, b"", False, 3, 0, 0) for path in sorted({p.rsplit("/", 1)[0] for p in parents} | {*parents})]
    znodes += [ZNode(ledger_path(LedgerManager.HIERARCHICAL, "/ledgers", n), bytes([n % 251]) * 3000, False, 4 + n, 0, n)
               for n in range(ledgers)]  # 4 KiB of base64 a ledger: 40 MB, above ten of Spark's 4 MiB floors
    dump = tmp_path / "dump.json"
    with dump.open("w") as out:
        write_dump_nodes(znodes, out)
    store = DumpFrameStore(spark, dump)
    rows = store.ledger_rows(tasks(spark))
    assert spark.sparkContext.defaultParallelism == 2 and tasks(spark) == 8
    assert rows.rdd.getNumPartitions() >= tasks(spark)
    counted = rows.groupBy(spark_partition_id()).count().collect()
    assert sum(count for _, count in counted) == ledgers
    assert len(counted) >= tasks(spark) and max(count for _, count in counted) <= 2 * ledgers / tasks(spark)
