"""Pulsar's bookie isolation as a ledger carries it: the custom metadata key ``EnsemblePlacementPolicyConfig``.

Pulsar's broker writes, into each ledger of a namespace with a bookie affinity group, the JSON of its
``EnsemblePlacementPolicyConfig`` (``encode``: Jackson, ``{"policyClass": "<class name>", "properties": {...}}``)
naming ``IsolatedBookieEnsemblePlacementPolicy`` and the groups (``isolationBookieGroups``,
``secondaryIsolationBookieGroups``: comma-separated group names, or a list). That policy's ``replaceBookie``
excludes every bookie that Pulsar's ``/bookies`` JSON lists in a group outside the primary groups, except
those also in a primary group; when the primary groups hold fewer writable bookies than the ensemble size,
the secondary groups' bookies are allowed too. A bookie no group lists is not excluded.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

POLICY_CONFIG_KEY = "EnsemblePlacementPolicyConfig"
# The class, and its name before Pulsar 2.8 (org.apache.pulsar.zookeeper); both read the same properties.
ISOLATED_POLICY_CLASSES = frozenset({
    "org.apache.pulsar.bookie.rackawareness.IsolatedBookieEnsemblePlacementPolicy",
    "org.apache.pulsar.zookeeper.ZkIsolatedBookieEnsemblePlacementPolicy",
})
PRIMARY_GROUPS = "isolationBookieGroups"
SECONDARY_GROUPS = "secondaryIsolationBookieGroups"


class PlacementConfigError(ValueError):
    """A ledger's EnsemblePlacementPolicyConfig that does not decode; one line."""


@dataclass(frozen=True, slots=True)
class IsolationGroups:
    primary: frozenset[str]
    secondary: frozenset[str]

    def describe(self) -> str:
        text = f"bookie groups {_names(self.primary)}"
        return text + (f" (secondary {_names(self.secondary)})" if self.secondary else "")


def ledger_isolation(custom_metadata: Iterable[tuple[str, bytes]]) -> IsolationGroups | None:
    """The isolation groups a ledger's custom metadata names; None when it names none (or another policy)."""
    value = dict(custom_metadata).get(POLICY_CONFIG_KEY)
    if value is None:
        return None
    try:
        config = json.loads(bytes(value).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise PlacementConfigError(f"custom metadata {POLICY_CONFIG_KEY} is not JSON: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("policyClass"), str):
        raise PlacementConfigError(f"custom metadata {POLICY_CONFIG_KEY}: expected an object with a policyClass, "
                                   f"got {bytes(value)[:120]!r}")
    if config["policyClass"] not in ISOLATED_POLICY_CLASSES:
        return None
    properties = config.get("properties") or {}
    if not isinstance(properties, dict):
        raise PlacementConfigError(f"custom metadata {POLICY_CONFIG_KEY}: properties is not an object")
    return IsolationGroups(_groups(properties, PRIMARY_GROUPS), _groups(properties, SECONDARY_GROUPS))


def isolation_excluded(isolation: IsolationGroups, bookie_groups: Mapping[str, frozenset[str]],
                       writable: Collection[str], ensemble_size: int) -> frozenset[str]:
    """The bookies the isolated policy keeps the replacement off (``bookie_groups``: Pulsar's /bookies groups)."""
    def members(groups: Iterable[str]) -> set[str]:
        return set().union(*(bookie_groups.get(group, frozenset()) for group in groups))

    primary = members(isolation.primary)
    excluded = members(g for g in bookie_groups if g not in isolation.primary) - primary
    if len(primary & set(writable)) < ensemble_size:  # too few in the primary groups: the secondary ones too
        excluded -= members(isolation.secondary)
    return frozenset(excluded)


def _groups(properties: dict, key: str) -> frozenset[str]:
    value = properties.get(key, "")
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)  # Pulsar's castToString joins a list with commas
    if not isinstance(value, str):
        raise PlacementConfigError(f"custom metadata {POLICY_CONFIG_KEY}: {key} is {value!r}, "
                                   "expected group names separated by commas")
    return frozenset(name for name in value.split(",") if name)


def _names(groups: frozenset[str]) -> str:
    return "[" + ", ".join(sorted(groups)) + "]" if groups else "[] (none)"
