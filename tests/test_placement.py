"""Where a moved fragment goes: BookKeeper 4.16.7's RackawareEnsemblePlacementPolicyImpl.replaceBookie, Pulsar's
isolation groups, and the rack sources (a file, a topology script, Pulsar's /bookies on a real ZooKeeper)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from corpus import CORPUS
from scanner.metadata.ledger import LedgerMetadata, LedgerState
from scanner.metadata.zookeeper import ZooKeeperStore
from scanner.repair.placement.choice import NoTarget, PlacementRules, rank_replacements
from scanner.repair.placement.isolation import PlacementConfigError, ledger_isolation
from scanner.repair.placement.policy import PlacementPolicy, replacement_candidates
from scanner.repair.placement.racks import (DEFAULT_RACK, RackSourceError, Topology, parse_rack_lines,
                                            short_write_sets)
from scanner.repair.placement.settings import PlacementSettings, PlacementSettingsError, build_policy
from scanner.repair.placement.sources import parse_pulsar_bookies, run_rack_script

REPO = Path(__file__).resolve().parents[1]
ISOLATED = "org.apache.pulsar.bookie.rackawareness.IsolatedBookieEnsemblePlacementPolicy"
RACKAWARE = PlacementRules(rack_aware=True)
ENFORCED = PlacementRules(rack_aware=True, enforce_min_racks=True)


def bk(n: int) -> str:
    return f"127.0.0.{n}:3181"


def ledger(ensemble, *, quorum=None, custom=(), ledger_id=9) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=ledger_id, format_version=3, ensemble_size=len(ensemble), write_quorum=quorum or len(ensemble),
        ack_quorum=2, state=LedgerState.CLOSED, last_entry_id=99, length=0,
        segments=((0, tuple(ensemble)),), digest_type=None, password=None, ctime=None,
        custom_metadata=tuple(custom), ctoken=None)


def choose(meta, replaced, writable, rules, topology):
    return rank_replacements(meta, meta.fragments()[0], replaced, writable, rules, topology)


# six bookies in three racks, as the live check lays them out
SIX = Topology({bk(1): "/r1", bk(2): "/r1", bk(3): "/r2", bk(4): "/r2", bk(5): "/r3", bk(6): "/r3"})
ALL = [bk(n) for n in range(1, 7)]


def test_the_replaced_bookies_own_rack_comes_first():
    meta = ledger([bk(1), bk(3), bk(5)])
    ranked = choose(meta, bk(1), ALL, RACKAWARE, SIX)
    assert ranked[0] == bk(2)  # /r1, like bk(1)
    assert set(ranked) == {bk(2), bk(4), bk(6)}  # never a bookie of the ensemble


def test_else_a_rack_the_rest_of_the_ensemble_does_not_use():
    topology = Topology({**SIX.racks, bk(7): "/r4", bk(8): "/r2"})
    meta = ledger([bk(1), bk(3), bk(5)], quorum=2)
    ranked = choose(meta, bk(1), [bk(n) for n in range(3, 9)], RACKAWARE, topology)
    # bk(2), its rack's other bookie, is not writable: /r4 is used by no one else; /r2 and /r3 come last
    assert ranked[0] == bk(7)
    assert set(ranked[1:]) == {bk(4), bk(6), bk(8)}


def test_without_enforcement_the_last_resort_prefers_write_sets_on_enough_racks():
    topology = Topology({bk(1): "/r1", bk(2): "/r2", bk(3): "/r3", bk(4): "/r1", bk(5): "/r2", bk(6): "/r3",
                         bk(7): "/r3"})
    # E=4, Wq=2: write sets {1,2} {2,3} {3,4} {4,1}; replacing bk(4) (/r1): no other /r1 writable, every rack used
    meta = ledger([bk(1), bk(2), bk(3), bk(4)], quorum=2)
    ranked = choose(meta, bk(4), [bk(n) for n in (1, 2, 3, 5, 6, 7)], RACKAWARE, topology)
    # /r2 keeps {3,x} and {x,1} on two racks; /r3 would put {3,x} on one rack
    assert ranked[0] == bk(5) and set(ranked[1:]) == {bk(6), bk(7)}
    assert short_write_sets([bk(1), bk(2), bk(3), bk(5)], 2, topology.rack_of) == []
    assert short_write_sets([bk(1), bk(2), bk(3), bk(6)], 2, topology.rack_of) == [2]


def test_enforced_with_no_valid_bookie_names_why():
    meta = ledger([bk(1), bk(3), bk(5)])
    writable = [bk(1), bk(3), bk(4), bk(5), bk(6)]  # bk(2), the other /r1 bookie, is down
    assert choose(meta, bk(1), writable, RACKAWARE, SIX)  # unenforced: BookKeeper picks any bookie
    with pytest.raises(NoTarget) as refused:
        choose(meta, bk(1), writable, ENFORCED, SIX)
    assert refused.value.reason == (
        "enforceMinNumRacksPerWriteQuorum (min 2 racks per write quorum): no writable bookie outside the ensemble "
        "of entries 0-99 is in /r1 (the replaced bookie's rack) or in a rack the rest of the ensemble does not use "
        "(/r2, /r3); outside it: 127.0.0.4:3181 in /r2, 127.0.0.6:3181 in /r3")


def test_enforcement_excludes_default_rack_bookies():
    topology = Topology({bk(1): "/r1", bk(3): "/r2", bk(5): "/r3"})  # bk(2) and bk(4) unknown: default rack
    meta = ledger([bk(1), bk(3), bk(5)])
    assert set(choose(meta, bk(1), [bk(n) for n in range(1, 6)], RACKAWARE, topology)) == {bk(2), bk(4)}
    with pytest.raises(NoTarget, match=r"outside it: 127.0.0.2:3181 in /default-rack, 127.0.0.4:3181 in "
                                       r"/default-rack \(those in the default rack excluded\)"):
        choose(meta, bk(1), [bk(n) for n in range(1, 6)], ENFORCED, topology)
    # a replaced bookie in the default rack: another default-rack bookie is its "own rack"
    assert choose(ledger([bk(2), bk(3), bk(5)]), bk(2), [bk(1), bk(4)], RACKAWARE, topology)[0] == bk(4)


def test_default_placement_is_any_bookie_outside_the_ensemble_in_a_stable_spread():
    meta = ledger([bk(1), bk(3), bk(5)])
    ranked = choose(meta, bk(1), ALL, PlacementRules(), SIX)
    assert sorted(ranked) == [bk(2), bk(4), bk(6)]
    assert choose(meta, bk(1), reversed(ALL), PlacementRules(), SIX) == ranked
    firsts = {choose(ledger([bk(1), bk(3), bk(5)], ledger_id=i), bk(1), ALL, PlacementRules(), SIX)[0]
              for i in range(40)}
    assert firsts == {bk(2), bk(4), bk(6)}  # spread across ledgers
    with pytest.raises(NoTarget, match=r"no writable bookie outside the ensemble of entries 0-99 \(3 writable, "
                                       r"all in it\)"):
        choose(meta, bk(1), [bk(1), bk(3), bk(5)], PlacementRules(), SIX)


def isolation_config(primary, secondary=None, policy=ISOLATED) -> tuple[str, bytes]:
    properties = {"isolationBookieGroups": primary}
    if secondary is not None:
        properties["secondaryIsolationBookieGroups"] = secondary
    # as Pulsar's EnsemblePlacementPolicyConfig.encode writes it: Jackson, pretty-printed
    return ("EnsemblePlacementPolicyConfig",
            json.dumps({"policyClass": policy, "properties": properties}, indent=2).encode())


GROUPS = {"default": frozenset({bk(1), bk(2), bk(3)}), "tenant-a": frozenset({bk(4), bk(5)}),
          "spare": frozenset({bk(6)})}


def test_isolation_groups_keep_the_replacement_inside_them():
    topology = Topology(SIX.racks, GROUPS)
    meta = ledger([bk(4), bk(5)], custom=[isolation_config("tenant-a", "spare")])
    # tenant-a has 2 writable bookies = the ensemble size: the secondary group is not needed
    with pytest.raises(NoTarget, match=r"inside bookie groups \[tenant-a\] \(secondary \[spare\]\): none of the 4 "
                                       r"writable bookies outside the ensemble is allowed"):
        choose(meta, bk(4), ALL, RACKAWARE, topology)
    # with bk(5) down, tenant-a is short: the secondary group opens
    assert choose(meta, bk(4), [b for b in ALL if b != bk(5)], RACKAWARE, topology) == [bk(6)]
    unlisted = Topology(SIX.racks | {bk(7): "/r2"}, GROUPS)  # a bookie no group lists is not excluded
    assert choose(meta, bk(4), ALL + [bk(7)], RACKAWARE, unlisted) == [bk(7)]
    # a list of groups, as Pulsar's castToString joins it
    listed = ledger([bk(1), bk(2)], custom=[isolation_config(["default", "spare"])])
    assert set(choose(listed, bk(1), ALL, RACKAWARE, topology)) == {bk(3), bk(6)}


def test_isolation_needs_the_groups_and_a_config_that_decodes():
    meta = ledger([bk(4), bk(5)], custom=[isolation_config("tenant-a")])
    with pytest.raises(NoTarget, match=r"bookie groups \[tenant-a\] are unknown here: Pulsar's /bookies was not read"):
        choose(meta, bk(4), ALL, RACKAWARE, SIX)
    broken = ledger([bk(4), bk(5)], custom=[("EnsemblePlacementPolicyConfig", b"{not json")])
    with pytest.raises(NoTarget, match="EnsemblePlacementPolicyConfig is not JSON"):
        choose(broken, bk(4), ALL, RACKAWARE, Topology(SIX.racks, GROUPS))
    other = ledger([bk(4), bk(5)], custom=[isolation_config("tenant-a", policy="com.example.OtherPolicy")])
    assert ledger_isolation(other.custom_metadata) is None
    with pytest.raises(PlacementConfigError, match="isolationBookieGroups is 7"):
        ledger_isolation([("EnsemblePlacementPolicyConfig", json.dumps(
            {"policyClass": ISOLATED, "properties": {"isolationBookieGroups": 7}}).encode())])


def test_the_rule_is_the_audits():
    rack_of = Topology({bk(1): "/r1", bk(2): "/r1", bk(3): "/r2"}).rack_of
    assert short_write_sets([bk(1), bk(2), bk(3)], 2, rack_of) == [0]
    assert short_write_sets([bk(1), bk(2), bk(3)], 2, rack_of, min_racks=1) == []
    assert short_write_sets([bk(1), bk(3), bk(4)], 3, rack_of) == []  # bk(4): the default rack counts as one
    assert short_write_sets([bk(1), bk(3), bk(4)], 3, rack_of, enforce=True) == [0, 1, 2]


def test_rack_lines():
    assert parse_rack_lines("# racks\n127.0.0.1:3181 /r1\n127.0.0.2:3181 r2/  # no slash\n\n", "f") == {
        bk(1): "/r1", bk(2): "/r2"}
    with pytest.raises(RackSourceError, match=r"f:2: expected 'BOOKIE_ID RACK', got '127.0.0.2:3181'"):
        parse_rack_lines("127.0.0.1:3181 /r1\n127.0.0.2:3181\n", "f")


def script(tmp_path, body: str):
    path = tmp_path / "topology.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_topology_script_gets_ip_addresses_in_batches(tmp_path):
    calls = tmp_path / "calls"
    mapping = script(tmp_path, f'echo "$@" >> {calls}\nfor a in "$@"; do echo "/rack-${{a##*.}}"; done\n')
    assert run_rack_script(mapping, ["127.0.0.1", "127.0.0.2", "127.0.0.3"], max_args=2) == [
        "/rack-1", "/rack-2", "/rack-3"]
    assert calls.read_text().splitlines() == ["127.0.0.1 127.0.0.2", "127.0.0.3"]
    policy = PlacementPolicy(RACKAWARE, racks="script", rack_script=mapping)
    custom_id = "bookie-without-address"
    topology = policy.topology([bk(1), "localhost:3181", custom_id])
    assert topology.racks == {bk(1): "/rack-1", "localhost:3181": "/rack-1"}  # a name is turned into its address
    assert topology.rack_of(custom_id) == DEFAULT_RACK


@pytest.mark.parametrize("body, message", [
    ("echo /r1\n", r"printed 1 racks for 2 addresses \(127.0.0.1 127.0.0.2\): expected one per address"),
    ("echo r1 r2\n", r"placed 127.0.0.1 in 'r1': a network location starts with '/'"),
    ("echo oops >&2; exit 3\n", "exited with status 3: oops"),
    ("sleep 5\n", r"did not finish within 0.5s"),
])
def test_bad_topology_script_output_is_a_clear_error(tmp_path, body, message):
    with pytest.raises(RackSourceError, match=message):
        run_rack_script(script(tmp_path, body), ["127.0.0.1", "127.0.0.2"], timeout=0.5)


def test_a_failing_rack_source_moves_nothing(tmp_path):
    policy = PlacementPolicy(RACKAWARE, racks="script", rack_script=script(tmp_path, "exit 1\n"))
    meta = ledger([bk(1), bk(3), bk(5)])
    with pytest.raises(NoTarget, match="racks unknown: topology script .* exited with status 1"):
        replacement_candidates(meta, meta.fragments()[0], bk(1), ALL, policy)


def test_settings_over_the_bookie_conf(tmp_path):
    mapping = script(tmp_path, "echo /r1\n")
    conf = {"networkTopologyScriptFileName": str(mapping), "minNumRacksPerWriteQuorum": "3",
            "enforceMinNumRacksPerWriteQuorum": "true"}
    policy = build_policy(PlacementSettings(), conf, None)
    assert (policy.rules, policy.racks, policy.rack_script) == (
        PlacementRules(rack_aware=True, min_racks=3, enforce_min_racks=True), "script", mapping)
    over = build_policy(PlacementSettings(placement="default", enforce_min_racks=False, min_racks=2), conf, None)
    assert over.rules == PlacementRules(rack_aware=False, min_racks=2, enforce_min_racks=False)
    assert build_policy(PlacementSettings(), {}, None).rules == PlacementRules()  # nothing said: as today
    pulsar = {"reppDnsResolverClass": "org.apache.pulsar.bookie.rackawareness.BookieRackAffinityMapping",
              "ensemblePlacementPolicy": "org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy"}
    assert build_policy(PlacementSettings(), pulsar, None).racks == "pulsar"


@pytest.mark.parametrize("settings, conf, message", [
    (PlacementSettings(racks_file="f", pulsar_racks=True), {}, "racks from file and pulsar: choose one"),
    (PlacementSettings(rack_script="/no/such/script"), {}, "topology script /no/such/script: no such file"),
    (PlacementSettings(), {"ensemblePlacementPolicy": "org.apache.bookkeeper.client.RegionAwareEnsemblePlacementPolicy"},
     "is not modelled: set placement"),
    (PlacementSettings(), {"enforceMinNumRacksPerWriteQuorum": "maybe"}, "expected true or false"),
    (PlacementSettings(), {"minNumRacksPerWriteQuorum": "two"}, "expected a whole number"),
])
def test_settings_that_cannot_be_used(settings, conf, message):
    with pytest.raises(PlacementSettingsError, match=message):
        build_policy(settings, conf, None)


def test_pulsar_bookies_json_is_checked():
    assert parse_pulsar_bookies(b"", "/bookies") == {}
    assert parse_pulsar_bookies(b'{"g": {"h:1": {"rack": "r1"}, "h:2": {"rack": "/"}, "h:3": {}}}', "/bookies") == {
        "g": {"h:1": "/r1", "h:2": None, "h:3": None}}
    for data, message in [(b"[1]", "expected an object of bookie groups"), (b'{"g": 1}', "group 'g'"),
                          (b'{"g": {"h:1": {"rack": 5}}}', "group 'g', bookie 'h:1'"), (b"{", "not JSON")]:
        with pytest.raises(RackSourceError, match=message):
            parse_pulsar_bookies(data, "/bookies")


@pytest.mark.zookeeper
def test_pulsar_bookies_on_zookeeper_place_and_isolate(zookeeper, zk_load_dump, zk_client):
    chroot = zk_load_dump(CORPUS / "zk-dump.json")
    # Pulsar's BookiesRackConfiguration: groups -> bookie id -> {rack, hostname}; racks are found by host
    bookies = {"default": {bk(1): {"rack": "/r1", "hostname": "one"}, bk(3): {"rack": "r2", "hostname": "three"},
                           bk(5): {"rack": "/r3", "hostname": "five"}},
               "tenant-a": {"127.0.0.2:4181": {"rack": "/r1", "hostname": "two"},
                            bk(4): {"rack": "/r2", "hostname": "four"}, bk(6): {"rack": "/r3"}}}
    zk_client.create(f"{chroot}/bookies", json.dumps(bookies).encode())
    with ZooKeeperStore(zookeeper.connect_string, f"{chroot}/ledgers") as store:
        policy = build_policy(PlacementSettings(pulsar_racks=True), {}, store)
        assert policy.bookies_path == f"{chroot}/bookies"
        topology = policy.topology(ALL + ["127.0.0.7:3181"])
        # bk(2) is listed at another port: the host decides, as in Pulsar's mapping
        assert topology.racks == SIX.racks
        assert topology.groups == {"default": frozenset({bk(1), bk(3), bk(5)}),
                                   "tenant-a": frozenset({"127.0.0.2:4181", bk(4), bk(6)})}
        meta = ledger([bk(1), bk(3), bk(5)])
        assert replacement_candidates(meta, meta.fragments()[0], bk(1), ALL, policy)[0] == bk(2)
        isolated = ledger([bk(4), bk(6)], custom=[isolation_config("tenant-a")])
        assert replacement_candidates(isolated, isolated.fragments()[0], bk(4), ALL, policy) == [bk(2)]
        # default placement still keeps a ledger inside its isolation groups: the groups are always read
        plain = build_policy(PlacementSettings(), {}, store)
        assert replacement_candidates(isolated, isolated.fragments()[0], bk(4), ALL, plain) == [bk(2)]
        zk_client.set(f"{chroot}/bookies", b"{broken")
        with pytest.raises(NoTarget, match=f"racks unknown: {chroot}/bookies: not JSON"):
            replacement_candidates(meta, meta.fragments()[0], bk(1), ALL, policy)


def test_repair_keys_of_the_agent_config(tmp_path):
    from scanner.agent.config import ConfigError, load_config

    assert load_config(REPO / "conf" / "scanner.toml").placement == PlacementSettings()  # all from the bookie conf
    path = tmp_path / "scanner.toml"
    base = "[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\n[repair]\n"
    path.write_text(base + "placement = 'rackaware'\nrack_script = 'topology.sh'\nrack_script_args = 2\n"
                           "min_racks_per_write_quorum = 3\nenforce_min_racks = true\npulsar_racks = false\n")
    assert load_config(path, {}).placement == PlacementSettings(
        placement="rackaware", rack_script=tmp_path / "topology.sh", rack_script_args=2, pulsar_racks=False,
        min_racks=3, enforce_min_racks=True)
    assert load_config(path, {"BOOKIE_SCANNER_REPAIR_PULSAR_RACKS": "true"}).placement.pulsar_racks is True
    for text, named in [("placement = 'nearby'\n", "[repair] placement = 'nearby': expected 'default' or 'rackaware'"),
                        ("min_racks_per_write_quorum = 0\n", "min_racks_per_write_quorum = 0: expected a number >= 1"),
                        ("racks_file = ['a', 'b']\n", "racks_file = ['a', 'b']: expected one path")]:
        path.write_text(base + text)
        with pytest.raises(ConfigError) as caught:
            load_config(path, {})
        assert named in str(caught.value)


def test_repair_flags_and_the_audits_racks(tmp_path, zookeeper, zk_load_dump, zk_client):
    import argparse

    from scanner.commands.placement_args import add_placement_options, audit_racks, placement_policy
    from scanner.errors import UsageError

    parser = argparse.ArgumentParser()
    add_placement_options(parser)
    racks = tmp_path / "racks"
    racks.write_text("".join(f"{bk(n)} /r{(n + 1) // 2}\n" for n in range(1, 7)))
    args = parser.parse_args(["--placement", "rackaware", "--racks", str(racks), "--enforce-min-racks"])
    conf = {"minNumRacksPerWriteQuorum": "3"}
    policy = placement_policy(args, conf, None)
    assert policy.rules == PlacementRules(rack_aware=True, min_racks=3, enforce_min_racks=True)
    assert policy.topology([]).racks == SIX.racks
    assert audit_racks(args, None) == SIX.racks
    with pytest.raises(UsageError, match="racks from file and pulsar: choose one"):
        placement_policy(parser.parse_args(["--racks", str(racks), "--pulsar-racks"]), {}, None)
    with pytest.raises(UsageError, match="--min-racks must be at least 1, got 0"):
        placement_policy(parser.parse_args(["--min-racks", "0"]), {}, None)
    with pytest.raises(UsageError, match="--rack-script and --pulsar-racks need the live metadata"):
        audit_racks(parser.parse_args(["--pulsar-racks"]), None)
    assert audit_racks(parser.parse_args([]), None) is None
    chroot = zk_load_dump(CORPUS / "zk-dump-live.json")
    zk_client.create(f"{chroot}/bookies", json.dumps({"default": {"127.0.0.1:3181": {"rack": "/r1"}}}).encode())
    with ZooKeeperStore(zookeeper.connect_string, f"{chroot}/ledgers") as store:
        registered = store.bookies().writable
        placed = audit_racks(parser.parse_args(["--pulsar-racks"]), store)
    assert registered and placed == {b: "/r1" for b in registered if b.startswith("127.0.0.1:")}
