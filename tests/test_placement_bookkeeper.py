"""The choice, against BookKeeper 4.16.7's own RackawareEnsemblePlacementPolicy (the kit's jars, no cluster).

Six bookies in three racks, a seventh alone in a fourth, an eighth the topology script leaves in the default
rack; random ensembles, write quorums, writable bookies and policy settings. For each, BookKeeper's own
``replaceBookie`` is asked 200 times (it picks at random within a step: the set it picks from shows) with
racks from the same topology script (``networkTopologyScriptFileName``), and the scanner's first candidates
must be exactly that set, or both must refuse. Racks from Pulsar's /bookies describing the same racks give
the same choices.
"""

from __future__ import annotations

import json
import random
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from corpus import CORPUS
from livebk import LIVEBK
from scanner.metadata.ledger import LedgerMetadata, LedgerState
from scanner.metadata.zookeeper import ZooKeeperStore
from scanner.repair.placement.choice import NoTarget
from scanner.repair.placement.policy import replacement_candidates
from scanner.repair.placement.settings import PlacementSettings, build_policy

pytestmark = pytest.mark.slow

SOURCE = Path(__file__).resolve().parent / "bookkeeper" / "ReplaceBookie.java"
RACKS = {1: "/r1", 2: "/r1", 3: "/r2", 4: "/r2", 5: "/r3", 6: "/r3", 7: "/r4"}  # 8: none, the default rack
BOOKIES = [f"127.0.0.{n}:3181" for n in range(1, 9)]
TRIALS = 200


def topology_script(tmp_path):
    cases = "".join(f"    127.0.0.{n}) echo {rack};;\n" for n, rack in RACKS.items())
    path = tmp_path / "topology.sh"
    path.write_text(f'#!/bin/sh\nfor a in "$@"; do\n  case "$a" in\n{cases}    *) echo /default-rack;;\n'
                    "  esac\ndone\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def bookkeepers_choices(tmp_path, script, scenarios) -> list[set[str] | None]:
    javac, java = shutil.which("javac"), shutil.which("java")
    assert javac and java, "the JDK is part of the test install"
    classes = tmp_path / "classes"
    subprocess.run([javac, "-proc:none", "-nowarn", "-cp", f"{LIVEBK / 'lib'}/*", "-d", str(classes), str(SOURCE)],
                   check=True, capture_output=True, timeout=300)
    lines = "".join(f"{s['min_racks']} {str(s['enforce']).lower()} {s['quorum']} {','.join(s['writable'])} "
                    f"{','.join(s['ensemble'])} {s['replaced']} {TRIALS}\n" for s in scenarios)
    done = subprocess.run([java, f"-Dlog4j2.configurationFile={LIVEBK / 'log4j2.xml'}", "-cp",
                           f"{LIVEBK / 'lib'}/*:{classes}", "ReplaceBookie", str(script)],
                          input=lines, capture_output=True, text=True, timeout=600, check=True)
    answers = [line.split()[1:] for line in done.stdout.splitlines() if line.startswith("CHOICE")]
    assert len(answers) == len(scenarios), done.stdout[-2000:]
    return [None if words == ["NotEnoughBookies"] else set(words) for words in answers]


def scenarios(count: int, seed: int = 32) -> list[dict]:
    rng = random.Random(seed)
    made = []
    for _ in range(count):
        size = rng.choice((2, 3, 3, 4))
        ensemble = rng.sample(BOOKIES, size)
        made.append({"ensemble": ensemble, "quorum": rng.randint(max(1, size - 1), size),
                     "replaced": rng.choice(ensemble), "min_racks": rng.choice((1, 2, 2, 3)),
                     "enforce": rng.random() < 0.5,
                     # the replaced bookie and others may be down: writable is what the cluster lists
                     "writable": sorted(rng.sample(BOOKIES, rng.randint(3, 8)))})
    return made


def closed_ledger(ensemble, quorum) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=77, format_version=3, ensemble_size=len(ensemble), write_quorum=quorum, ack_quorum=quorum,
        state=LedgerState.CLOSED, last_entry_id=9, length=0, segments=((0, tuple(ensemble)),), digest_type=None,
        password=None, ctime=None, custom_metadata=(), ctoken=None)


def scanners_choice(scenario, policy) -> list[str] | None:
    meta = closed_ledger(scenario["ensemble"], scenario["quorum"])
    try:
        return replacement_candidates(meta, meta.fragments()[0], scenario["replaced"], scenario["writable"], policy)
    except NoTarget:
        return None


def test_choices_agree_with_bookkeepers_own_policy(tmp_path, zookeeper, zk_load_dump, zk_client):
    script = topology_script(tmp_path)
    cases = scenarios(120)
    theirs = bookkeepers_choices(tmp_path, script, cases)
    chroot = zk_load_dump(CORPUS / "zk-dump.json")
    zk_client.create(f"{chroot}/bookies", json.dumps({"default": {
        bookie: ({"rack": RACKS[n]} if n in RACKS else {}) for n, bookie in enumerate(BOOKIES, 1)}}).encode())
    refused = 0
    with ZooKeeperStore(zookeeper.connect_string, f"{chroot}/ledgers") as store:
        for case, their_choice in zip(cases, theirs):
            settings = dict(placement="rackaware", min_racks=case["min_racks"], enforce_min_racks=case["enforce"])
            by_script = build_policy(PlacementSettings(rack_script=script, **settings), {}, store)
            by_pulsar = build_policy(PlacementSettings(pulsar_racks=True, **settings), {}, store)
            ours = scanners_choice(case, by_script)
            assert scanners_choice(case, by_pulsar) == ours, case
            if their_choice is None:
                assert ours is None, (case, ours)
                refused += 1
            else:
                assert ours is not None and set(ours[:len(their_choice)]) == their_choice, (case, ours, their_choice)
    assert 3 <= refused <= len(cases) - 100, refused  # both outcomes were compared
