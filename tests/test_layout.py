"""Bookie layout discovery: Java properties as BookKeeper reads them, cookies of layouts 3/4/5, and
the storage type, dirs and bookie id they give, with one-line errors when they cannot."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from scanner.storage.layout import (
    Cookie,
    LayoutError,
    conf_bool,
    conf_list,
    conf_string,
    discover_layout,
    parse_cookie,
    parse_properties,
    storage_type,
)

DB = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"
INTERLEAVED = "org.apache.bookkeeper.bookie.InterleavedLedgerStorage"
SORTED = "org.apache.bookkeeper.bookie.SortedLedgerStorage"


def test_properties_separators_comments_and_continuations():
    text = (
        "# a comment\n"
        "   ! another comment\n"
        "\n"
        "bookiePort=3181\n"
        "advertisedAddress : 10.0.0.1\n"
        "bookieId   my-bookie\n"
        "ledgerDirectories=/data/a,\\\n"
        "        /data/b\n"
        "odd=ends with two backslashes\\\\\n"
        "next=line\n"
        "empty=\n"
        "bare\n"
        "value=has # no comment inside\n"
    )
    assert parse_properties(text) == {
        "bookiePort": "3181",
        "advertisedAddress": "10.0.0.1",
        "bookieId": "my-bookie",
        "ledgerDirectories": "/data/a,/data/b",
        "odd": "ends with two backslashes\\",
        "next": "line",
        "empty": "",
        "bare": "",
        "value": "has # no comment inside",
    }


def test_properties_escapes_in_keys_and_values():
    conf = parse_properties("a\\=b\\:c=\\u0041\\tB\\n\nd=x\\,y, z\n")
    assert conf["a=b:c"] == "A\tB\n"
    assert conf_list(conf, "d") == ["x,y", "z"]


def test_repeated_keys_and_commas_make_lists_and_a_string_is_the_first_item():
    conf = parse_properties("ledgerDirectories=/a , /b,,\nledgerDirectories=/c\n")
    assert conf_list(conf, "ledgerDirectories") == ["/a", "/b", "/c"]
    assert conf_string(conf, "ledgerDirectories") == "/a"
    assert conf_list(conf, "absent") == [] and conf_string(conf, "absent") is None


@pytest.mark.parametrize("value, expected", [("true", True), ("TRUE", True), ("yes", True), ("on", True),
                                             ("false", False), ("off", False), ("no", False), ("N", False)])
def test_booleans_as_commons_configuration_spells_them(value, expected):
    assert conf_bool({"k": value}, "k", not expected, Path("bk_server.conf")) is expected


def test_an_unreadable_boolean_is_a_layout_error():
    with pytest.raises(LayoutError, match="bk_server.conf: flag='maybe'"):
        conf_bool({"flag": "maybe"}, "flag", False, Path("bk_server.conf"))


@pytest.mark.parametrize(
    "conf, expected",
    [
        ({}, "sorted"),
        ({"ledgerStorageClass": SORTED}, "sorted"),
        ({"sortedLedgerStorageEnabled": "false"}, "interleaved"),
        ({"ledgerStorageClass": SORTED, "sortedLedgerStorageEnabled": "false"}, "interleaved"),
        ({"ledgerStorageClass": INTERLEAVED}, "interleaved"),
        ({"ledgerStorageClass": INTERLEAVED, "sortedLedgerStorageEnabled": "true"}, "interleaved"),
        ({"ledgerStorageClass": DB, "sortedLedgerStorageEnabled": "false"}, "db"),
    ],
)
def test_storage_type_from_class_and_legacy_flag(conf, expected):
    assert storage_type(conf, Path("c")) == expected


def test_unknown_storage_class_is_a_layout_error():
    with pytest.raises(LayoutError, match="com.example.MyStorage"):
        storage_type({"ledgerStorageClass": "com.example.MyStorage"}, Path("c"))


def test_cookie_layout_3_is_four_plain_lines():
    cookie = parse_cookie("3\n10.0.0.1:3181\n/data/journal\n2\t/data/l1\t/data/l2\n", Path("VERSION"))
    assert cookie == Cookie(3, "10.0.0.1:3181", "/data/journal", ("/data/l1", "/data/l2"), None, None)


def test_cookie_layout_4_without_instance_id():
    text = '4\nbookieHost: "10.0.0.1:3181"\njournalDir: "/j"\nledgerDirs: "1\\t/data/l1"\n'
    assert parse_cookie(text, Path("VERSION")) == Cookie(4, "10.0.0.1:3181", "/j", ("/data/l1",), None, None)


def test_cookie_layout_5_with_escapes_index_dirs_and_instance_id():
    text = (
        "5\n"
        'bookieHost: "bookie-\\"a\\""\n'
        'journalDir: "/j1,/j2"\n'
        'ledgerDirs: "2\\t/data/l1\\t/data/caf\\303\\251"\n'
        'instanceId: "5b0d0a2c-0000-4000-8000-000000000000"\n'
        'indexDirs: "2\\t/idx/1\\t/idx/2"\n'
    )
    cookie = parse_cookie(text, Path("VERSION"))
    assert cookie == Cookie(5, 'bookie-"a"', "/j1,/j2", ("/data/l1", "/data/café"), ("/idx/1", "/idx/2"),
                            "5b0d0a2c-0000-4000-8000-000000000000")


@pytest.mark.parametrize(
    "text, complaint",
    [
        ("", "layout version"),
        ("five\n", "layout version"),
        ("2\nhost\n/j\n1\t/l\n", "layout version 3 or later"),
        ("3\nhost\n/j\n", "4 lines"),
        ('5\nbookieHost: "h:1"\n', "journalDir, ledgerDirs"),
        ('5\nbookieHost: "h:1"\njournalDir: "/j"\nledgerDirs: "1\\t/l"\nsurprise: "x"\n', "line 5"),
        ('5\nbookieHost: h:1\n', "line 2"),
        ('5\nbookieHost: "h:1"\njournalDir: "/j"\nledgerDirs: "2\\t/l"\n', "<count>"),
        ('5\nbookieHost: "h:1"\njournalDir: "/j"\nledgerDirs: "/l"\n', "<count>"),
    ],
)
def test_unparsable_cookies_are_one_line_layout_errors(text, complaint):
    with pytest.raises(LayoutError) as error:
        parse_cookie(text, Path("/b/current/VERSION"))
    assert complaint in str(error.value)
    assert str(error.value).startswith("/b/current/VERSION") and "\n" not in str(error.value)


# --- discovery from a bookie's dirs ---------------------------------------------------------------------


def make_bookie_dir(path: Path, cookie: str | None = None, rocksdb: bool = False) -> Path:
    (path / "current").mkdir(parents=True)
    if cookie is not None:
        (path / "current" / "VERSION").write_text(cookie)
    if rocksdb:
        for db in ("ledgers", "locations"):
            (path / "current" / db).mkdir()
            (path / "current" / db / "CURRENT").write_text("MANIFEST-000001\n")
    return path


def cookie_text(bookie_id: str, *dirs: str) -> str:
    encoded = "\\t".join([str(len(dirs)), *dirs])
    return f'5\nbookieHost: "{bookie_id}"\njournalDir: "/j"\nledgerDirs: "{encoded}"\n'


def write_conf(tmp_path: Path, *lines: str) -> Path:
    conf = tmp_path / "bk_server.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def test_db_bookie_with_two_ledger_dirs_and_separate_index_dirs(tmp_path):
    l1, l2 = (make_bookie_dir(tmp_path / n, cookie_text("10.0.0.1:3181", "/orig/l1", "/orig/l2")) for n in ("l1", "l2"))
    i1, i2 = (make_bookie_dir(tmp_path / n, rocksdb=True) for n in ("i1", "i2"))
    conf = write_conf(
        tmp_path,
        f"ledgerStorageClass={DB}",
        f"ledgerDirectories={l1},{l2}",
        f"indexDirectories={i1}, {i2}",
        "advertisedAddress=10.0.0.1",
        "dbStorage_directIOEntryLogger=true",
    )
    layout = discover_layout(conf)
    assert (layout.storage, layout.bookie_id, layout.direct_io) == ("db", "10.0.0.1:3181", True)
    assert layout.ledger_dirs == (l1, l2) and layout.index_dirs == (i1, i2)
    assert layout.ledger_current_dirs == (l1 / "current", l2 / "current")
    assert layout.conf["advertisedAddress"] == "10.0.0.1"


def test_overrides_replace_the_dirs_the_config_names(tmp_path):
    copy = make_bookie_dir(tmp_path / "copy", cookie_text("127.0.0.1:3181", "/var/lib/bookkeeper/ledgers"))
    conf = write_conf(tmp_path, "ledgerDirectories=/var/lib/bookkeeper/ledgers", f"ledgerStorageClass={INTERLEAVED}")
    layout = discover_layout(conf, ledger_dirs=[copy])
    assert (layout.ledger_dirs, layout.index_dirs, layout.storage) == ((copy,), (copy,), "interleaved")
    assert layout.bookie_id == "127.0.0.1:3181"
    assert discover_layout(conf, ledger_dirs=[copy], storage="sorted", bookie_id="other:1").bookie_id == "other:1"


def test_the_cookie_gives_the_bookie_id_when_the_config_does_not(tmp_path):
    bookie = make_bookie_dir(tmp_path / "b", cookie_text("custom-id", "/l"))
    assert discover_layout(write_conf(tmp_path, f"ledgerDirectories={bookie}")).bookie_id == "custom-id"


@pytest.mark.parametrize(
    "lines, expected",
    [
        (["bookieId=rack1-bookie7", "advertisedAddress=10.0.0.1"], "rack1-bookie7"),
        (["advertisedAddress= 10.0.0.9 ", "bookiePort=4000"], "10.0.0.9:4000"),
        (["advertisedAddress=10.0.0.9"], "10.0.0.9:3181"),
        (["useHostNameAsBookieID=true", "bookiePort=3190"], f"{socket.getfqdn()}:3190"),
        (["useHostNameAsBookieID=true", "useShortHostName=true"], f"{socket.getfqdn().split('.')[0]}:3181"),
    ],
)
def test_bookie_id_from_the_config_without_a_cookie(tmp_path, lines, expected):
    bookie = make_bookie_dir(tmp_path / "b")
    assert discover_layout(write_conf(tmp_path, f"ledgerDirectories={bookie}", *lines)).bookie_id == expected


def test_direct_io_only_matters_for_db_storage(tmp_path):
    bookie = make_bookie_dir(tmp_path / "b", cookie_text("h:1", "/l"))
    conf = write_conf(tmp_path, f"ledgerDirectories={bookie}", "dbStorage_directIOEntryLogger=true")
    assert discover_layout(conf).direct_io is False


def layout_error(conf: Path, **overrides) -> str:
    with pytest.raises(LayoutError) as error:
        discover_layout(conf, **overrides)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_missing_config(tmp_path):
    assert "cannot read the bookie config" in layout_error(tmp_path / "nope.conf")


def test_missing_ledger_dir(tmp_path):
    conf = write_conf(tmp_path, f"ledgerDirectories={tmp_path / 'gone'}")
    assert layout_error(conf).startswith(f"{tmp_path / 'gone'}: expected a bookie dir")


def test_cookie_and_config_disagree_on_the_bookie_id(tmp_path):
    bookie = make_bookie_dir(tmp_path / "b", cookie_text("10.0.0.1:3181", "/l"))
    conf = write_conf(tmp_path, f"ledgerDirectories={bookie}", "advertisedAddress=10.0.0.2")
    assert "'10.0.0.2:3181'" in layout_error(conf) and "'10.0.0.1:3181'" in layout_error(conf)


def test_cookies_of_two_ledger_dirs_disagree(tmp_path):
    a = make_bookie_dir(tmp_path / "a", cookie_text("h:1", "/a", "/b"))
    b = make_bookie_dir(tmp_path / "b", cookie_text("h:2", "/a", "/b"))
    assert "differs" in layout_error(write_conf(tmp_path, f"ledgerDirectories={a},{b}"))


def test_cookie_lists_another_number_of_ledger_dirs(tmp_path):
    a = make_bookie_dir(tmp_path / "a", cookie_text("h:1", "/a", "/b"))
    assert "2 ledger dirs" in layout_error(write_conf(tmp_path, f"ledgerDirectories={a}"))


def test_unparsable_cookie_stops_discovery(tmp_path):
    a = make_bookie_dir(tmp_path / "a", "garbage\n")
    assert str(a / "current" / "VERSION") in layout_error(write_conf(tmp_path, f"ledgerDirectories={a}"))


def test_db_storage_needs_as_many_index_dirs_as_ledger_dirs(tmp_path):
    a, b = make_bookie_dir(tmp_path / "a"), make_bookie_dir(tmp_path / "b")
    i = make_bookie_dir(tmp_path / "i", rocksdb=True)
    conf = write_conf(tmp_path, f"ledgerStorageClass={DB}", f"ledgerDirectories={a},{b}", f"indexDirectories={i}")
    assert "1 index dirs for 2 ledger dirs" in layout_error(conf)


def test_overriding_ledger_dirs_alone_is_refused_when_the_config_has_index_dirs(tmp_path):
    a = make_bookie_dir(tmp_path / "a")
    conf = write_conf(tmp_path, "ledgerDirectories=/orig/l", "indexDirectories=/orig/i")
    assert "override the index dirs too" in layout_error(conf, ledger_dirs=[a])
    assert discover_layout(conf, ledger_dirs=[a], index_dirs=[a]).index_dirs == (a,)


def test_storage_type_must_match_the_index_files_on_disk(tmp_path):
    plain = make_bookie_dir(tmp_path / "plain")
    rocks = make_bookie_dir(tmp_path / "rocks", rocksdb=True)
    conf = write_conf(tmp_path, f"ledgerStorageClass={DB}", f"ledgerDirectories={plain}")
    assert "no DbLedgerStorage indexes" in layout_error(conf)
    conf = write_conf(tmp_path, f"ledgerDirectories={rocks}")
    assert "storage is 'sorted' but the dir holds DbLedgerStorage indexes" in layout_error(conf)


def test_bad_overrides_and_values(tmp_path):
    a = make_bookie_dir(tmp_path / "a")
    conf = write_conf(tmp_path, f"ledgerDirectories={a}", "advertisedAddress=h", "bookiePort=31x")
    assert "expected one of interleaved, sorted, db" in layout_error(conf, storage="rocks")
    assert "at least one directory" in layout_error(conf, ledger_dirs=[])
    assert "bookiePort='31x'" in layout_error(conf)


def test_bookie_id_from_a_named_interface_needs_a_cookie_or_an_override(tmp_path):
    a = make_bookie_dir(tmp_path / "a")
    conf = write_conf(tmp_path, f"ledgerDirectories={a}", "listeningInterface=eth7")
    assert "give the bookie id" in layout_error(conf)
    assert discover_layout(conf, bookie_id="b:1").bookie_id == "b:1"
