"""The placement settings of ``[repair]`` and ``bookie-scanner repair``, over BookKeeper's own keys in the bookie's
``bk_server.conf``, turned into a ``PlacementPolicy`` in one call.

Read from the bookie's conf when not set here (BookKeeper's client keys, as its autorecovery reads them):
``ensemblePlacementPolicy`` (rack-aware unless it names ``DefaultEnsemblePlacementPolicy``; region- and
zone-aware policies are not modelled and must be overridden), ``reppDnsResolverClass`` (Pulsar's
``BookieRackAffinityMapping`` means racks from ``/bookies``), ``networkTopologyScriptFileName``,
``networkTopologyScriptNumberArgs``, ``minNumRacksPerWriteQuorum``, ``enforceMinNumRacksPerWriteQuorum``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scanner.metadata.store import MetadataStore
from scanner.repair.placement.choice import PlacementRules
from scanner.repair.placement.policy import PULSAR_RACKS, RACK_SCRIPT, RACKS_FILE, PlacementPolicy
from scanner.repair.placement.racks import DEFAULT_MIN_RACKS
from scanner.repair.placement.sources import DEFAULT_SCRIPT_ARGS, DEFAULT_SCRIPT_TIMEOUT, HostOf, legacy_host
from scanner.storage.layout import LayoutError, conf_bool, conf_string

DEFAULT_PLACEMENT, RACKAWARE_PLACEMENT = "default", "rackaware"
PLACEMENTS = (DEFAULT_PLACEMENT, RACKAWARE_PLACEMENT)
PULSAR_BOOKIES_NODE = "bookies"  # Pulsar's BookieRackAffinityMapping.BOOKIE_INFO_ROOT_PATH, beside the ledgers root
_UNMODELLED_POLICIES = ("RegionAwareEnsemblePlacementPolicy", "ZoneawareEnsemblePlacementPolicy")
_CONF = Path("bookie conf")  # how errors name bk_server.conf


class PlacementSettingsError(ValueError):
    """Placement settings that cannot be used; one line naming the key."""


@dataclass(frozen=True, slots=True)
class PlacementSettings:
    """What ``[repair]`` (or the command line) says; None: as the bookie's conf says, else BookKeeper's default."""

    placement: str | None = None
    racks_file: Path | None = None
    rack_script: Path | None = None
    rack_script_args: int | None = None
    rack_script_timeout: float = DEFAULT_SCRIPT_TIMEOUT
    pulsar_racks: bool | None = None
    min_racks: int | None = None
    enforce_min_racks: bool | None = None


def build_policy(settings: PlacementSettings, conf: Mapping[str, str], store: MetadataStore | None,
                 host_of: HostOf = legacy_host) -> PlacementPolicy:
    """The policy ``settings`` ask for, BookKeeper's keys in ``conf`` filling what they leave unset.

    ``store`` is the cluster's metadata (Pulsar's ``/bookies`` is read beside its ledgers root: the isolation
    groups always, the racks with ``pulsar_racks``); ``host_of`` the host of a bookie's address (pass the
    registration's resolver; by default the id's own host). PlacementSettingsError on a contradiction.
    """
    racks = _rack_source(settings, conf)
    script = settings.rack_script if settings.rack_script is not None else _conf_text(conf, "networkTopologyScriptFileName")
    if racks == RACK_SCRIPT and not Path(script).is_file():
        raise PlacementSettingsError(f"topology script {script}: no such file")
    rules = PlacementRules(
        rack_aware=_placement(settings, conf, racks) == RACKAWARE_PLACEMENT,
        min_racks=_number(settings.min_racks, conf, "minNumRacksPerWriteQuorum", DEFAULT_MIN_RACKS),
        enforce_min_racks=_flag(settings.enforce_min_racks, conf, "enforceMinNumRacksPerWriteQuorum", False))
    bookies_path = None
    if store is not None:
        bookies_path = store.root.rsplit("/", 1)[0] + "/" + PULSAR_BOOKIES_NODE
    return PlacementPolicy(
        rules=rules, racks=racks,
        racks_file=settings.racks_file, rack_script=Path(script) if racks == RACK_SCRIPT else None,
        script_args=_number(settings.rack_script_args, conf, "networkTopologyScriptNumberArgs", DEFAULT_SCRIPT_ARGS),
        script_timeout=settings.rack_script_timeout, store=store, bookies_path=bookies_path, host_of=host_of)


def _rack_source(settings: PlacementSettings, conf: Mapping[str, str]) -> str | None:
    chosen = [name for name, on in ((RACKS_FILE, settings.racks_file is not None),
                                    (RACK_SCRIPT, settings.rack_script is not None),
                                    (PULSAR_RACKS, bool(settings.pulsar_racks))) if on]
    if len(chosen) > 1:
        raise PlacementSettingsError(f"racks from {' and '.join(chosen)}: choose one of racks_file, rack_script, "
                                     "pulsar_racks")
    if chosen or settings.pulsar_racks is False:
        return chosen[0] if chosen else None
    if "RackAffinityMapping" in (_conf_text(conf, "reppDnsResolverClass") or ""):
        return PULSAR_RACKS  # Pulsar's BookieRackAffinityMapping (ZkBookieRackAffinityMapping before 2.8)
    return RACK_SCRIPT if _conf_text(conf, "networkTopologyScriptFileName") else None


def _placement(settings: PlacementSettings, conf: Mapping[str, str], racks: str | None) -> str:
    if settings.placement is not None:
        if settings.placement not in PLACEMENTS:
            raise PlacementSettingsError(f"placement {settings.placement!r}: expected one of {', '.join(PLACEMENTS)}")
        return settings.placement
    policy = _conf_text(conf, "ensemblePlacementPolicy") or ""
    if any(name in policy for name in _UNMODELLED_POLICIES):
        raise PlacementSettingsError(f"ensemblePlacementPolicy={policy} is not modelled: set placement "
                                     f"({' or '.join(PLACEMENTS)}) in [repair]")
    if "DefaultEnsemblePlacementPolicy" in policy or (not policy and racks is None):
        return DEFAULT_PLACEMENT
    return RACKAWARE_PLACEMENT


def _conf_text(conf: Mapping[str, str], key: str) -> str | None:
    return conf_string(conf, key) or None


def _number(value: int | None, conf: Mapping[str, str], key: str, default: int) -> int:
    if value is None:
        text = _conf_text(conf, key)
        if text is None:
            return default
        if not text.isdigit():
            raise PlacementSettingsError(f"bookie conf {key}={text!r}: expected a whole number")
        value = int(text)
    if value < 1:
        raise PlacementSettingsError(f"{key} {value}: must be at least 1")
    return value


def _flag(value: bool | None, conf: Mapping[str, str], key: str, default: bool) -> bool:
    if value is not None:
        return value
    try:
        return conf_bool(conf, key, default, _CONF)
    except LayoutError as exc:
        raise PlacementSettingsError(str(exc)) from None
