"""A bookie configured the Kubernetes way: its settings made from the bookie container's environment (Apache
Pulsar's Helm chart puts them in a ConfigMap the container gets with ``envFrom``), by the rules of Pulsar's
apply-config-from-env.py; a scan made so reports what a scan on the bookie's own conf reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus import CORPUS, scan, timeless
from scanner.agent.config import ConfigError, load_config
from scanner.storage.layout import LayoutError, discover_layout, parse_properties
from scanner.storage.pulsar_env import PULSAR_DEFAULTS, apply_environment

DB = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"
METADATA = "zk+hierarchical://pulsar-zookeeper:2181/ledgers"


def settings(conf_text: str, environ: dict[str, str]) -> dict[str, str]:
    return parse_properties(apply_environment(conf_text, environ))


def chart_environment(ledgers: Path) -> dict[str, str]:
    """What Pulsar's Helm chart gives a bookie container (its bookkeeper ConfigMap), with the ledgers dir here,
    and what any container's environment holds besides."""
    return {
        "zkServers": "", "zkLedgersRootPath": "", "metadataServiceUri": METADATA,
        "httpServerEnabled": "true", "httpServerPort": "8000", "useHostNameAsBookieID": "true",
        "autoRecoveryDaemonEnabled": "false", "journalMaxBackups": "0",
        "journalDirectories": "/pulsar/data/bookkeeper/journal",
        "PULSAR_PREFIX_journalDirectories": "/pulsar/data/bookkeeper/journal",
        "ledgerDirectories": str(ledgers),
        "PULSAR_MEM": "-Xms128m -Xmx256m", "PULSAR_GC": "-XX:+UseZGC", "BOOKIE_MEM": "-Xmx128M",
        "PULSAR_PREFIX_dbStorage_rocksDB_format_version": "5",
        "PATH": "/usr/bin:/bin", "HOSTNAME": "pulsar-bookie-0",
    }


def test_a_key_the_conf_has_is_set_by_its_own_name_and_a_commented_one_is_uncommented():
    conf = settings("bookiePort=3181\n# indexDirectories=data/bookkeeper/ledgers\nzkServers=localhost:2181\n",
                    {"bookiePort": " 3190 ", "indexDirectories": "/index", "zkServers": ""})
    assert conf == {"bookiePort": "3190", "indexDirectories": "/index", "zkServers": ""}


def test_a_key_the_conf_lacks_comes_only_with_the_prefix():
    environ = {"dbStorage_directIOEntryLogger": "true", "PULSAR_PREFIX_bookieId": "bookie-a"}
    assert settings("bookiePort=3181\n", environ) == {"bookiePort": "3181", "bookieId": "bookie-a"}


def test_the_prefix_wins_over_the_plain_name_on_the_same_line():
    environ = {"ledgerDirectories": "/plain", "PULSAR_PREFIX_ledgerDirectories": "/prefixed"}
    assert apply_environment("ledgerDirectories=data\n", environ) == "ledgerDirectories=/prefixed\n\n"


def test_a_key_on_several_lines_is_set_on_its_last_and_the_bookie_then_reads_both():
    # the script keeps the last line of a key; the properties reader makes a list of a key given twice
    text = "ledgerDirectories=/a\n#ledgerDirectories=/example\n"
    assert settings(text, {"ledgerDirectories": "/b"}) == {"ledgerDirectories": "/a,/b"}


def test_variables_that_name_no_key_change_nothing():
    environ = {"PULSAR_MEM": "-Xmx1g", "BOOKIE_MEM": "-Xmx1g", "PATH": "/bin", "HOME": "/pulsar"}
    assert settings(PULSAR_DEFAULTS, environ) == settings(PULSAR_DEFAULTS, {})


def test_pulsar_defaults_are_db_storage_under_the_pulsar_home(tmp_path):
    conf = settings(PULSAR_DEFAULTS, {})
    assert conf["ledgerStorageClass"] == DB and conf["ledgerDirectories"] == "data/bookkeeper/ledgers"
    assert "indexDirectories" not in conf and "bookieId" not in conf
    home = tmp_path / "pulsar"
    (home / "data" / "bookkeeper").mkdir(parents=True)
    (home / "data" / "bookkeeper" / "ledgers").symlink_to(CORPUS / "bookie3" / "ledgers")
    layout = discover_layout(None, home=home, environment={})
    assert (layout.storage, layout.ledger_dirs) == ("db", (home / "data" / "bookkeeper" / "ledgers",))
    assert layout.bookie_id == "127.0.0.1:3183"  # the cookie's


def test_the_charts_environment_over_pulsar_defaults_names_the_bookie_and_its_metadata():
    layout = discover_layout(None, environment=chart_environment(CORPUS / "bookie3" / "ledgers"))
    assert (layout.storage, layout.ledger_dirs, layout.index_dirs) == (
        "db", (CORPUS / "bookie3" / "ledgers",), (CORPUS / "bookie3" / "ledgers",))
    assert layout.conf["metadataServiceUri"] == METADATA and layout.conf["zkServers"] == ""
    assert layout.conf["journalDirectories"] == "/pulsar/data/bookkeeper/journal"
    assert layout.conf["dbStorage_rocksDB_format_version"] == "5"


def test_the_environment_goes_over_a_given_conf_and_its_mistakes_say_where_they_came_from(tmp_path):
    conf = tmp_path / "bookkeeper.conf"
    conf.write_text(f"ledgerStorageClass={DB}\nledgerDirectories=/nowhere\n")
    environ = {"ledgerDirectories": str(CORPUS / "bookie1" / "ledgers")}  # an .idx bookie under a DB conf
    with pytest.raises(LayoutError, match="storage is 'db' but the dir holds no DbLedgerStorage indexes"):
        discover_layout(conf, environment=environ)
    environ["PULSAR_PREFIX_ledgerStorageClass"] = "Interleaved"
    with pytest.raises(LayoutError, match=r"bookkeeper\.conf with the environment .*: ledgerStorageClass 'Inter"):
        discover_layout(conf, environment=environ)
    environ["PULSAR_PREFIX_ledgerStorageClass"] = "org.apache.bookkeeper.bookie.InterleavedLedgerStorage"
    assert discover_layout(conf, environment=environ).storage == "interleaved"
    with pytest.raises(LayoutError, match="cannot read the bookie config"):
        discover_layout(tmp_path / "absent.conf", environment=environ)


def test_a_scan_on_the_containers_environment_reports_what_one_on_the_bookies_conf_does(capsys, monkeypatch):
    ledgers = CORPUS / "bookie3" / "ledgers"
    dump = ["--metadata", f"file:{CORPUS / 'zk-dump.json'}"]
    status, report = scan(capsys, "--bookie-conf", str(CORPUS / "bookie-configs" / "bookie3.conf"),
                          "--ledger-dirs", str(ledgers), *dump)
    for name, value in chart_environment(ledgers).items():
        monkeypatch.setenv(name, value)
    again, from_env = scan(capsys, "--bookie-conf-from-env", *dump)
    assert report["findings"] and (again, timeless(from_env)) == (status, timeless(report))


def test_the_agent_takes_the_bookie_from_the_environment_without_a_conf(tmp_path):
    config = tmp_path / "scanner.toml"
    config.write_text("[bookie]\nconf_from_env = true\nhome = '/pulsar'\n[agent]\nstate_dir = 'state'\n")
    environ = {"BOOKIE_SCANNER_AGENT_LISTEN": "0.0.0.0:9721", **chart_environment(CORPUS / "bookie3" / "ledgers")}
    loaded = load_config(config, environ)
    assert (loaded.bookie_conf, loaded.bookie_home) == (None, Path("/pulsar"))
    assert loaded.bookie_layout().conf["metadataServiceUri"] == METADATA
    config.write_text("[agent]\nstate_dir = 'state'\n")
    with pytest.raises(ConfigError, match=r"\[bookie\] conf is required.*conf_from_env = true"):
        load_config(config, environ)
