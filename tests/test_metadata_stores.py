"""Metadata stores: the dump file, metadata URIs, and a real ZooKeeper loaded from the corpus."""

from __future__ import annotations

import dataclasses
import json

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from corpus import CORPUS, manifest
from scanner.cli import main
from scanner.errors import UsageError
from scanner.metadata.ledger import LedgerMetadata, LedgerState, serialize_ledger_metadata
from scanner.metadata.ledger_paths import LayoutError, LedgerManager, layout_bytes, ledger_path
from scanner.metadata.snapshot import DumpFormatError, SnapshotStore, write_dump
from scanner.metadata.store import MetadataUnavailable, RegisteredBookies
from scanner.metadata.uri import (
    MetadataUriError,
    ZooKeeperTarget,
    metadata_uri_from_conf,
    open_metadata,
    parse_zookeeper_uri,
)
from scanner.metadata.zookeeper import ZooKeeperStore
from zookeeper_server import ZooKeeperServer, ZooKeeperSetupError, free_port, load_dump

DUMP = CORPUS / "zk-dump.json"
LIVE_DUMP = CORPUS / "zk-dump-live.json"
CORPUS_BOOKIES = frozenset(b["bookie_id"] for b in manifest()["bookies"])


def live_ledger_ids() -> set[int]:
    return {l["ledger_id"] for l in manifest()["ledgers"] if l["status"] != "DELETED"}


def without_ctime(meta: LedgerMetadata) -> LedgerMetadata:
    return dataclasses.replace(meta, ctime=None)


# --- the dump file ---


def test_snapshot_of_the_corpus():
    with SnapshotStore(DUMP) as store:
        assert (store.root, store.manager) == ("/ledgers", LedgerManager.HIERARCHICAL)
        ids = list(store.ledger_ids())
        assert len(ids) == len(set(ids)) == 49 and set(ids) == live_ledger_ids()
        assert store.ledger(6) is None and store.ledger(17) is None  # deleted
        assert store.ledger(2**62) is None
        assert store.ledger(46).segments[1][0] == 46
        assert store.bookies() == RegisteredBookies(frozenset(), frozenset())  # dumped after shutdown
    assert SnapshotStore(LIVE_DUMP).bookies() == RegisteredBookies(CORPUS_BOOKIES, frozenset())


def test_snapshot_with_an_explicit_root_and_manager(tmp_path):
    assert SnapshotStore(DUMP, root="/ledgers", manager=LedgerManager.HIERARCHICAL).manager is LedgerManager.HIERARCHICAL
    with pytest.raises(LayoutError, match="says hierarchical, but the metadata URI asks for flat"):
        SnapshotStore(DUMP, manager=LedgerManager.FLAT)
    with pytest.raises(MetadataUnavailable, match="no /elsewhere/LAYOUT"):
        SnapshotStore(DUMP, root="/elsewhere")


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not JSON"),
        ('{"path": "/"}', "expected a JSON list"),
        ('["x"]', "entry 0: expected an object"),
        ('[{"path": "ledgers"}]', "'path' must be an absolute znode path"),
        ('[{"path": "/a", "data_b64": "###"}]', "entry 0 \\(/a\\): 'data_b64' is not base64"),
        ('[{"path": "/a", "mzxid": "7"}]', "'mzxid' must be an integer"),
    ],
)
def test_bad_dump_files_are_refused_with_the_entry_named(tmp_path, content, message):
    dump = tmp_path / "dump.json"
    dump.write_text(content)
    with pytest.raises(DumpFormatError, match=message):
        SnapshotStore(dump)


def test_missing_dump_file(tmp_path):
    with pytest.raises(DumpFormatError, match="cannot read"):
        SnapshotStore(tmp_path / "absent.json")


# --- metadata URIs ---


def test_uri_forms():
    assert parse_zookeeper_uri("zk://zk1:2181/ledgers") == ZooKeeperTarget("zk1:2181", "/ledgers", None, None)
    assert parse_zookeeper_uri("zk+hierarchical://h1:1;h2:2/ledgers/") == ZooKeeperTarget(
        "h1:1,h2:2", "/ledgers", LedgerManager.HIERARCHICAL, None)  # fmt: skip
    assert parse_zookeeper_uri("zk+null://h/a/b").manager is None
    assert parse_zookeeper_uri("zk+flat://h/l").manager is LedgerManager.FLAT
    assert parse_zookeeper_uri("ZK+LongHierarchical://h/l").manager is LedgerManager.LONG_HIERARCHICAL
    assert parse_zookeeper_uri("zk://alice:s%40cret@h1:5,h2/chroot/ledgers") == ZooKeeperTarget(
        "h1:5,h2:2181", "/chroot/ledgers", None, ("alice", "s@cret"))  # fmt: skip


@pytest.mark.parametrize(
    "uri, message",
    [
        ("zk:/h/ledgers", "expected zk://HOST:PORT/ROOT"),
        ("http://h/ledgers", "unknown scheme 'http'"),
        ("zk+ms://h/ledgers", "ledger manager 'ms' is not one the scanner reads"),
        ("zk://h:2181", "no ledgers root path"),
        ("zk://h:2181/", "no ledgers root path"),
        ("zk://h:99999/ledgers", "'h:99999' is not host\\[:port\\]"),
        ("zk://h1;;h2/ledgers", "'' is not host\\[:port\\]"),
        ("zk://alice@h/ledgers", "credentials must be user:password@"),
        ("zk://h/a//b", "must be an absolute znode path"),
        ("file:", "expected file:PATH"),
    ],
)
def test_bad_uris_are_usage_errors(uri, message):
    with pytest.raises(MetadataUriError, match=message) as caught:
        open_metadata(uri)
    assert isinstance(caught.value, UsageError) and "\n" not in str(caught.value)


@pytest.mark.parametrize("uri", ["zk://alice:s3cret@h:99999/ledgers", "zk+ms://alice:s3cret@h/ledgers",
                                 "zk+hierarchical://alice:s3@cret@h1;;h2/ledgers"])
def test_a_bad_uri_never_shows_its_password(uri, capsys):
    with pytest.raises(MetadataUriError) as caught:
        open_metadata(uri)
    assert "cret" not in str(caught.value) and "alice:***@" in str(caught.value)
    assert main(["metadata", "show", "--metadata", uri, "--ledger", "1"]) == 2
    err = capsys.readouterr().err
    assert "cret" not in err and "alice:***@" in err


def test_uri_from_bookie_configuration():
    assert metadata_uri_from_conf({"metadataServiceUri": "zk+hierarchical://a:1;b:2/ledgers"}) == (
        "zk+hierarchical://a:1;b:2/ledgers")  # fmt: skip
    assert metadata_uri_from_conf({"zkServers": "a:1,b:2"}) == "zk://a:1;b:2/ledgers"
    assert metadata_uri_from_conf({"zkServers": "a:1,b:2/bk/", "zkLedgersRootPath": "/l"}) == "zk://a:1;b:2/bk/l"
    assert metadata_uri_from_conf({"metadataServiceUri": " ", "zkServers": "a:1"}) == "zk://a:1/ledgers"
    assert metadata_uri_from_conf({}) is None
    conf_uri = metadata_uri_from_conf({"zkServers": "a:1,b:2/bk", "zkLedgersRootPath": "/l"})
    assert parse_zookeeper_uri(conf_uri) == ZooKeeperTarget("a:1,b:2", "/bk/l", None, None)


def test_file_uri_opens_a_snapshot():
    with open_metadata(f"file:{DUMP}") as store:
        assert isinstance(store, SnapshotStore) and store.ledger(3).state is LedgerState.CLOSED


# --- a real ZooKeeper ---

@pytest.fixture
def corpus_in_zk(zookeeper, zk_load_dump):
    """The corpus dump loaded under a fresh chroot; yields (connect string, ledgers root)."""
    chroot = zk_load_dump(DUMP)
    return zookeeper.connect_string, f"{chroot}/ledgers"


@pytest.mark.zookeeper
def test_zookeeper_store_agrees_with_the_dump(corpus_in_zk):
    hosts, root = corpus_in_zk
    snapshot = SnapshotStore(DUMP)
    with ZooKeeperStore(hosts, root) as store:
        assert store.manager is LedgerManager.HIERARCHICAL
        ids = list(store.ledger_ids())
        assert len(ids) == 49 and set(ids) == live_ledger_ids()
        for ledger_id in ids:
            from_zk = store.ledger(ledger_id)
            assert from_zk.ctime is not None  # the znode's ctime: the corpus stores none itself
            assert without_ctime(from_zk) == snapshot.ledger(ledger_id)
        assert store.ledger(6) is None
        assert store.bookies() == RegisteredBookies(frozenset(), frozenset())


@pytest.mark.zookeeper
def test_enumeration_is_lazy(corpus_in_zk, zk_client):
    hosts, root = corpus_in_zk
    with ZooKeeperStore(hosts, root) as store:
        walk = store.ledger_ids()
        assert next(walk) == 0
        # Changes to other branches after the first id came out are seen: they were not listed ahead of time.
        zk_client.create(root + "/000/0001/0995/1162/L7781", serialize_ledger_metadata(store.ledger(0)), makepath=True)
        zk_client.delete(ledger_path(store.manager, root, 123456789))
        rest = set(walk)
    assert rest == live_ledger_ids() - {0, 123456789} | {2**40 + 5}


@pytest.mark.zookeeper
def test_registered_bookies_from_the_live_dump(zookeeper, zk_load_dump):
    chroot = zk_load_dump(LIVE_DUMP)
    with ZooKeeperStore(zookeeper.connect_string, f"{chroot}/ledgers") as store:
        assert store.bookies() == RegisteredBookies(CORPUS_BOOKIES, frozenset())
        store.client.create(f"{chroot}/ledgers/available/readonly/127.0.0.1:3185", ephemeral=True)
        assert store.bookies().readonly == frozenset({"127.0.0.1:3185"})


@pytest.mark.zookeeper
def test_chroot_gives_the_same_view(zookeeper, zk_load_dump):
    chroot = zk_load_dump(DUMP)
    with ZooKeeperStore(zookeeper.connect_string, "/ledgers", chroot=chroot) as store:
        assert set(store.ledger_ids()) == live_ledger_ids()
        assert store.ledger(123456789).custom_metadata == (("application", b"bk-oracle"), ("component", b"writer-11"))


@pytest.mark.zookeeper
def test_digest_auth(zookeeper, zk_chroot):
    owner = KazooClient(hosts=zookeeper.connect_string, auth_data=[("digest", "alice:s3cret")])
    owner.start(timeout=30)
    try:
        load_dump(owner, DUMP, prefix=zk_chroot, acl=[make_digest_acl("alice", "s3cret", all=True)])
        root = f"{zk_chroot}/ledgers"
        with pytest.raises(MetadataUnavailable, match="not authorized to read") as caught:
            ZooKeeperStore(zookeeper.connect_string, root)
        assert "\n" not in str(caught.value)
        with ZooKeeperStore(zookeeper.connect_string, root, auth=("alice", "s3cret")) as store:
            assert set(store.ledger_ids()) == live_ledger_ids()
        with open_metadata(f"zk://alice:s3cret@{zookeeper.connect_string}{root}") as store:
            assert store.ledger(46).write_quorum == 3
    finally:
        owner.delete(zk_chroot + "/ledgers", recursive=True)
        owner.stop()
        owner.close()


@pytest.mark.zookeeper
def test_unreachable_zookeeper_is_one_line():
    closed_port = free_port()  # nothing listens there
    with pytest.raises(MetadataUnavailable) as caught:
        open_metadata(f"zk://127.0.0.1:{closed_port}/ledgers", connect_timeout=1)
    assert str(caught.value) == f"ZooKeeper 127.0.0.1:{closed_port} did not answer within 1s"


@pytest.mark.zookeeper
def test_missing_root_and_conflicting_manager(corpus_in_zk):
    hosts, root = corpus_in_zk
    with pytest.raises(MetadataUnavailable, match="has no /nowhere/ledgers: wrong ledgers root"):
        ZooKeeperStore(hosts, "/nowhere/ledgers")
    with pytest.raises(LayoutError, match="says hierarchical, but the metadata URI asks for flat"):
        open_metadata(f"zk+flat://{hosts}{root}")


def built_tree(client, root: str, manager: LedgerManager, ledger_ids) -> dict[int, LedgerMetadata]:
    client.create(f"{root}/LAYOUT", layout_bytes(manager), makepath=True)
    client.create(f"{root}/available/readonly", makepath=True)
    client.create(f"{root}/INSTANCEID", b"00000000-0000-0000-0000-000000000000")
    client.create(f"{root}/idgen-long/HOB-0000000000", makepath=True)
    metas = {}
    for n, ledger_id in enumerate(ledger_ids):
        metas[ledger_id] = LedgerMetadata(
            ledger_id=ledger_id, format_version=3 - n % 3, ensemble_size=2, write_quorum=2, ack_quorum=2,
            state=LedgerState.CLOSED, last_entry_id=n, length=10 * n, segments=((0, ("a:1", "b:1")),),
            digest_type=None, password=None, ctime=1700000000000 + n, custom_metadata=(), ctoken=None,
        )  # fmt: skip
        data = serialize_ledger_metadata(metas[ledger_id], metas[ledger_id].format_version)
        client.create(ledger_path(manager, root, ledger_id), data, makepath=True)
    if manager is LedgerManager.FLAT:
        client.create(f"{root}/ID-0000000099", ephemeral=True)  # the flat id generator's leftovers
    return metas


@pytest.mark.zookeeper
@pytest.mark.parametrize(
    "manager, ids",
    [
        (LedgerManager.FLAT, [1, 42, 123456789, 2147483646]),
        (LedgerManager.LONG_HIERARCHICAL, [1, 123456789, 2147483647, 4294967311, 2**40 + 5, 2**63 - 1]),
    ],
)
def test_flat_and_long_hierarchical_trees_enumerate(zookeeper, zk_client, zk_chroot, manager, ids):
    root = f"{zk_chroot}/ledgers"
    metas = built_tree(zk_client, root, manager, ids)
    with open_metadata(f"zk://{zookeeper.connect_string}{root}") as store:
        assert store.manager is manager
        assert list(store.ledger_ids()) == sorted(ids)
        for ledger_id, meta in metas.items():
            got = store.ledger(ledger_id)
            assert got == (meta if meta.format_version > 1 else dataclasses.replace(meta, ctime=got.ctime))


@pytest.mark.zookeeper
def test_dump_command_round_trips_through_the_snapshot_store(zookeeper, zk_load_dump, tmp_path, capsys):
    chroot = zk_load_dump(LIVE_DUMP)
    uri = f"zk+hierarchical://{zookeeper.connect_string}{chroot}/ledgers"
    out = tmp_path / "dump.json"
    assert main(["metadata", "dump", "--metadata", uri, "-o", str(out)]) == 0
    assert capsys.readouterr().err.strip() == f"72 znodes under {chroot}/ledgers"
    assert out.stat().st_mode & 0o777 == 0o600  # it holds every ledger's password
    with open_metadata(uri) as live, SnapshotStore(out) as dumped:
        assert dumped.root == live.root and dumped.manager is live.manager
        assert list(dumped.ledger_ids()) == list(live.ledger_ids())
        assert all(dumped.ledger(i) == live.ledger(i) for i in live.ledger_ids())  # ctime included
        assert dumped.bookies() == live.bookies() == RegisteredBookies(CORPUS_BOOKIES, frozenset())
        entries = json.loads(out.read_text())
        assert all(dumped.node(e["path"]) == live.node(e["path"]) for e in entries)
        assert sum(e["ephemeral"] for e in entries) == 4


def test_write_dump_of_a_dump_keeps_every_node(tmp_path):
    with SnapshotStore(LIVE_DUMP) as store, (tmp_path / "again.json").open("w") as out:
        assert write_dump(store, out) == 72
    original = {e["path"]: e for e in json.loads(LIVE_DUMP.read_text())}
    again = {e["path"]: e for e in json.loads((tmp_path / "again.json").read_text())}
    assert again == {path: {**entry, "ctime": None} for path, entry in original.items()}


def test_show_and_dump_take_the_metadata_service_from_a_bookie_conf_as_their_help_says(tmp_path, capsys):
    conf = tmp_path / "bk_server.conf"
    conf.write_text(f"metadataServiceUri=file:{DUMP}\n")
    assert main(["metadata", "show", "--bookie-conf", str(conf), "--ledger", "46"]) == 0
    assert "state: CLOSED, last entry 85, length 186992" in capsys.readouterr().out
    assert main(["metadata", "dump", "--bookie-conf", str(conf), "-o", str(tmp_path / "d.json")]) == 0
    assert json.loads((tmp_path / "d.json").read_text())
    (tmp_path / "empty.conf").write_text("bookiePort=3181\n")
    assert main(["metadata", "show", "--bookie-conf", str(tmp_path / "empty.conf"), "--ledger", "46"]) == 2
    assert "names no metadata service" in capsys.readouterr().err


def test_show_command(capsys):
    assert main(["metadata", "show", "--metadata", f"file:{DUMP}", "--ledger", "46"]) == 0
    text = capsys.readouterr().out
    assert "state: CLOSED, last entry 85, length 186992" in text
    assert "from entry 46: 127.0.0.1:3184 127.0.0.1:3181 127.0.0.1:3182" in text
    assert "scenario = ensemble-change" in text and "digest: CRC32" in text
    assert "ensemble-change-pw" not in text and "\nmaster key: " not in text
    assert "password and master key: hidden (--show-secrets shows them)" in text
    assert main(["metadata", "show", "--metadata", f"file:{DUMP}", "--ledger", "48", "--format", "json"]) == 0
    hidden = json.loads(capsys.readouterr().out)
    assert (hidden["digest_type"], hidden["master_key_hex"], "password" in hidden) == ("HMAC", None, False)
    assert main(["metadata", "show", "--metadata", f"file:{DUMP}", "--ledger", "46", "--show-secrets"]) == 0
    shown_text = capsys.readouterr().out
    assert "password: ensemble-change-pw" in shown_text and "master key: " in shown_text

    assert main(["metadata", "show", "--metadata", f"file:{DUMP}", "--ledger", "48", "--format", "json", "--show-password"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["state"], shown["digest_type"], shown["write_quorum"]) == ("OPEN", "HMAC", 2)
    assert shown["password"] == "open-pw-6d9e8392bb48af49"
    assert shown["master_key_hex"] == "4f9d91d08a4235cc2265c37876be89e3dad5f05f"

    assert main(["metadata", "show", "--metadata", f"file:{DUMP}", "--ledger", "6"]) == 1
    assert "no such ledger" in capsys.readouterr().err
    assert main(["metadata", "show", "--metadata", "zk+ms://h/l", "--ledger", "6"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_fixture_fails_clearly_without_the_jar_and_stops_its_jvm(tmp_path):
    with pytest.raises(ZooKeeperSetupError, match="install Debian's zookeeper package"):
        ZooKeeperServer(tmp_path / "a", jar=tmp_path / "zookeeper.jar").start()


@pytest.mark.zookeeper
def test_server_stop_ends_the_jvm(tmp_path):
    server = ZooKeeperServer(tmp_path)
    server.start()
    process = server._process
    try:
        assert process.poll() is None
    finally:
        server.stop()
    assert process.poll() is not None
