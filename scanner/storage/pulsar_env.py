"""A bookie's settings made from its container's environment, the way Apache Pulsar's images make them.

Pulsar's Helm chart (and the operators built on it) gives the bookie container its settings as environment
variables from a ConfigMap, and the container's command runs Pulsar's ``bin/apply-config-from-env.py
conf/bookkeeper.conf`` before it starts the bookie. A sidecar given the same environment (``envFrom`` the same
ConfigMap) makes the same settings here with ``apply_environment``, which follows that script's rules
(docker/pulsar/scripts/apply-config-from-env.py in Pulsar's source):

- every line of the conf with an ``=`` names a key: the text before the first ``=``, one leading ``#`` dropped
  (so a commented-out example is a key too), trimmed; a key on several lines is its last line;
- a variable whose name is such a key replaces that line with ``key=value`` (the value trimmed), uncommenting it;
- then ``PULSAR_PREFIX_<key>`` sets ``<key>``: on its line when the conf has the key, else on a line of its own
  at the end (so a key the conf does not mention can only come this way);
- variables apply in the order of their names.

The conf is the image's ``conf/bookkeeper.conf`` when the sidecar has a copy (mounted from a ConfigMap, say);
without one, ``PULSAR_DEFAULTS``: the lines of Pulsar's ``conf/bookkeeper.conf`` for the keys the scanner reads,
active or commented out as Pulsar ships them. Other variables the chart sets (``PULSAR_MEM``, ``PULSAR_GC``,
``BOOKIE_MEM``, ...) are the JVM's options and name no key: they change nothing here, as they change nothing in
the bookie's conf.
"""

from __future__ import annotations

from collections.abc import Mapping

PREFIX = "PULSAR_PREFIX_"

# Pulsar's conf/bookkeeper.conf (Pulsar 3.x and 4.x), the keys the scanner reads, in the file's order.
PULSAR_DEFAULTS = """\
bookiePort=3181
# journalDirectories=/tmp/bk-journal
journalDirectory=data/bookkeeper/journal
# listeningInterface=eth0
advertisedAddress=
useHostNameAsBookieID=false
# bookieId=
ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage
ledgerDirectories=data/bookkeeper/ledgers
# indexDirectories=data/bookkeeper/ledgers
# sortedLedgerStorageEnabled=true
zkLedgersRootPath=/ledgers
# useShortHostName=false
metadataServiceUri=
zkServers=localhost:2181
"""


def apply_environment(conf_text: str, environ: Mapping[str, str]) -> str:
    """``conf_text`` as Pulsar's apply-config-from-env.py leaves it after running with ``environ``."""
    lines = conf_text.splitlines(keepends=True)
    keys: dict[str, int] = {}
    for number, line in enumerate(lines):
        key, equals, _ = line.strip().partition("=")
        if equals:
            keys[key.removeprefix("#").strip()] = number
    for name in sorted(environ):
        if name in keys:
            lines[keys[name]] = f"{name}={environ[name].strip()}\n"
    lines.append("\n")
    for name in sorted(environ):
        if name.startswith(PREFIX):
            key = name[len(PREFIX):]
            setting = f"{key}={environ[name].strip()}\n"
            if key in keys:
                lines[keys[key]] = setting
            else:
                lines.append(setting)
    return "".join(lines)
