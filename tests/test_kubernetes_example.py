"""The Kubernetes examples, checked offline: every object of the bookie StatefulSet with its sidecar against
Kubernetes' own schemas (strict: no unknown field), and the Helm values placed where Apache Pulsar's chart
places them (``bookkeeper.initContainers`` into the bookie pod's initContainers, ``extraVolumes`` into its
volumes, ``annotations`` onto the pod, its volume claims named ``<release>-bookie-<name>``) and checked the same
way. Schemas do not check references, so the tests do: every mount names a volume of the pod, the bookie's are
read-only, probes and scrape annotations name the port the agent listens on, and the ConfigMap the sidecar
shares with the bookie gives the agent the dirs it mounts."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from scanner.agent.config import load_config
from scanner.storage.layout import conf_list, parse_properties
from scanner.storage.pulsar_env import PULSAR_DEFAULTS, apply_environment

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "container" / "kubernetes"
OLDEST_WITH_SIDECARS = "1.29"  # an init container with restartPolicy: Always (SidecarContainers, on by default)
IMAGE_CONFIG = REPO / "container" / "scanner.toml"
CHART_RELEASE_PREFIX = "pulsar-bookie-"  # the chart's volume claims for a release named "pulsar"


def objects() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((EXAMPLES / "bookie-statefulset.yaml").read_text())}


def chart_values() -> dict:
    return yaml.safe_load((EXAMPLES / "pulsar-values.yaml").read_text())["bookkeeper"]


def as_the_chart_renders_it(values: dict) -> dict:
    """The example StatefulSet with the values put where the chart's bookkeeper-statefulset.yaml puts them."""
    statefulset = copy.deepcopy(objects()["StatefulSet"])
    pod = statefulset["spec"]["template"]
    pod["metadata"]["annotations"] = values["annotations"]
    spec = pod["spec"]
    spec["containers"] = [c for c in spec["containers"] if c["name"] == "bookie"]
    spec["initContainers"] = [{"name": "pulsar-bookkeeper-verify-clusterid", "image": "apachepulsar/pulsar:4.0.12",
                               "command": ["sh", "-c"], "args": ["bin/bookkeeper shell whatisinstanceid"]},
                              *values["initContainers"]]
    spec["volumes"] = values["extraVolumes"]
    for claim in statefulset["spec"]["volumeClaimTemplates"]:
        claim["metadata"]["name"] = CHART_RELEASE_PREFIX + claim["metadata"]["name"]
    statefulset["spec"]["volumeClaimTemplates"] = [
        c for c in statefulset["spec"]["volumeClaimTemplates"] if not c["metadata"]["name"].endswith("scanner-state")]
    for mount in spec["containers"][0]["volumeMounts"]:
        mount["name"] = CHART_RELEASE_PREFIX + mount["name"]
    return statefulset


def pod_volumes(statefulset: dict) -> set[str]:
    return ({v["name"] for v in statefulset["spec"]["template"]["spec"].get("volumes", [])}
            | {c["metadata"]["name"] for c in statefulset["spec"]["volumeClaimTemplates"]})


def sidecar(statefulset: dict) -> dict:
    spec = statefulset["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == "bookie-scanner")


@pytest.mark.parametrize("kind", ["ConfigMap", "Service", "StatefulSet"])
def test_every_object_of_the_example_is_valid_kubernetes(kind):
    kubernetes_validate.validate(objects()[kind], OLDEST_WITH_SIDECARS, strict=True)


def test_the_helm_values_make_a_valid_bookie_statefulset_with_a_native_sidecar():
    rendered = as_the_chart_renders_it(chart_values())
    kubernetes_validate.validate(rendered, OLDEST_WITH_SIDECARS, strict=True)
    assert sidecar(rendered)["restartPolicy"] == "Always"


def test_a_typo_in_the_values_is_caught():
    values = chart_values()
    values["initContainers"][0]["livenesProbe"] = values["initContainers"][0].pop("livenessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="livenesProbe"):
        kubernetes_validate.validate(as_the_chart_renders_it(values), OLDEST_WITH_SIDECARS, strict=True)


@pytest.mark.parametrize("rendered", ["example", "helm values"])
def test_the_sidecar_mounts_the_bookies_volumes_read_only_and_answers_its_probe_and_scrape_on_its_port(rendered):
    statefulset = objects()["StatefulSet"] if rendered == "example" else as_the_chart_renders_it(chart_values())
    scanner = sidecar(statefulset)
    bookie = next(c for c in statefulset["spec"]["template"]["spec"]["containers"] if c["name"] == "bookie")
    mounts = {m["mountPath"]: m for m in scanner["volumeMounts"]}
    assert {m["name"] for m in scanner["volumeMounts"] + bookie["volumeMounts"]} <= pod_volumes(statefulset)
    for bookie_mount in bookie["volumeMounts"]:
        assert mounts[bookie_mount["mountPath"]]["name"] == bookie_mount["name"]
        assert mounts[bookie_mount["mountPath"]].get("readOnly") is True
    image_config = load_config(IMAGE_CONFIG, {"BOOKIE_SCANNER_BOOKIE_CONF_FROM_ENV": "true"})
    assert str(image_config.state_dir) in mounts and image_config.listen_host == "0.0.0.0"
    assert "/tmp" in mounts and scanner["securityContext"]["readOnlyRootFilesystem"] is True
    port = next(p for p in scanner["ports"] if p["name"] == scanner["livenessProbe"]["httpGet"]["port"])
    assert port["containerPort"] == image_config.listen_port
    assert scanner["livenessProbe"]["httpGet"]["path"] == "/alive"
    assert "readinessProbe" not in scanner and "startupProbe" not in scanner
    annotations = statefulset["spec"]["template"]["metadata"]["annotations"]
    assert (annotations["prometheus.io/port"], annotations["prometheus.io/path"]) == (str(port["containerPort"]),
                                                                                       "/metrics")


def test_the_shared_config_map_gives_the_agent_the_dirs_the_sidecar_mounts():
    environment = objects()["ConfigMap"]["data"] | {
        e["name"]: e["value"] for e in sidecar(objects()["StatefulSet"])["env"]}
    settings = parse_properties(apply_environment(PULSAR_DEFAULTS, environment))
    mounted = {m["mountPath"] for m in sidecar(objects()["StatefulSet"])["volumeMounts"]}
    assert conf_list(settings, "ledgerDirectories") == ["/pulsar/data/bookkeeper/ledgers"]
    assert set(conf_list(settings, "ledgerDirectories") + conf_list(settings, "journalDirectories")) <= mounted
    assert settings["metadataServiceUri"].startswith("zk+hierarchical://")
    config = load_config(IMAGE_CONFIG, environment)
    assert config.bookie_environment is not None and config.mark is True
    assert config.throttle.bytes_per_second == 50_000_000
