"""The --config file: a LowNodeLoadArgs document or Koordinator's whole DeschedulerConfiguration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler_plugin.descheduler.args import ArgsError
from scheduler_plugin.descheduler.config import args_from_document, load_args_file

THRESHOLDS = {"lowThresholds": {"cpu": 20, "memory": 30}, "highThresholds": {"cpu": 50, "memory": 60}}

# koord-descheduler-config as the Koordinator chart ships it, with LowNodeLoad enabled.
KOORD_DESCHEDULER_CONFIG = """
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
leaderElection:
  resourceLock: leases
deschedulingInterval: 10s
dryRun: true
profiles:
  - name: koord-descheduler
    plugins:
      deschedule:
        disabled:
          - name: "*"
      balance:
        enabled:
          - name: LowNodeLoad
      evict:
        disabled:
          - name: "*"
        enabled:
          - name: MigrationController
    pluginConfig:
      - name: MigrationController
        args:
          apiVersion: descheduler/v1alpha2
          kind: MigrationControllerArgs
          evictionPolicy: Eviction
          defaultJobMode: ReservationFirst
          maxMigratingPerNode: 3
          evictQPS: "5"
          evictBurst: 2
          namespaces:
            exclude: [kube-system]
      - name: LowNodeLoad
        args:
          apiVersion: descheduler/v1alpha2
          kind: LowNodeLoadArgs
          evictableNamespaces:
            exclude: [kube-system, koordinator-system]
          lowThresholds: {cpu: 20, memory: 30}
          highThresholds: {cpu: 50, memory: 60}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "args.yaml"
    path.write_text(text)
    return path


def test_bare_low_node_load_args(tmp_path: Path) -> None:
    args = load_args_file(write(tmp_path, yaml.safe_dump({"kind": "LowNodeLoadArgs", **THRESHOLDS, "dryRun": True})))
    assert args.dry_run and args.high_thresholds == {"cpu": 50, "memory": 60}


def test_koordinator_descheduler_configuration(tmp_path: Path) -> None:
    args = load_args_file(write(tmp_path, KOORD_DESCHEDULER_CONFIG))
    assert args.descheduling_interval == 10.0 and args.dry_run
    assert args.max_migrating_per_node == 3 and args.evict_qps == 5.0 and args.evict_burst == 2
    assert args.evictable_namespaces.exclude == ["kube-system", "koordinator-system"]
    assert args.low_thresholds == {"cpu": 20, "memory": 30}


def test_errors_name_the_field_where_it_is_in_the_file() -> None:
    doc: dict[str, Any] = yaml.safe_load(KOORD_DESCHEDULER_CONFIG)
    doc["profiles"][0]["pluginConfig"][0]["args"]["maxMigratingPerNode"] = 0
    doc["profiles"][0]["pluginConfig"][1]["args"]["anomalyCondition"] = {"consecutiveAbnormalities": 0}
    doc["deschedulingInterval"] = "soon"
    with pytest.raises(ArgsError) as err:
        args_from_document(doc)
    problems = err.value.problems
    assert any(p.startswith("profiles[0].pluginConfig[0].args.maxMigratingPerNode:") for p in problems), problems
    assert any(
        p.startswith("profiles[0].pluginConfig[1].args.anomalyCondition.consecutiveAbnormalities:") for p in problems
    ), problems
    assert any(p.startswith("deschedulingInterval:") for p in problems), problems


def test_missing_thresholds_are_reported_on_the_low_node_load_args() -> None:
    doc = {"kind": "DeschedulerConfiguration", "profiles": [{"pluginConfig": [{"name": "LowNodeLoad", "args": {}}]}]}
    with pytest.raises(ArgsError) as err:
        args_from_document(doc)
    assert err.value.problems == [
        "profiles[0].pluginConfig[0].args.highThresholds: no thresholds configured (set highThresholds/lowThresholds "
        "at the top level or in nodePools)"
    ]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"kind": "DeschedulerConfiguration"}, "profiles: must be a list"),
        ({"kind": "DeschedulerConfiguration", "profiles": [{"pluginConfig": []}]}, "profiles: no pluginConfig named"),
        (
            {
                "kind": "DeschedulerConfiguration",
                "profiles": [
                    {"pluginConfig": [{"name": "LowNodeLoad", "args": THRESHOLDS}]},
                    {"pluginConfig": [{"name": "LowNodeLoad", "args": THRESHOLDS}]},
                ],
            },
            "profiles[1].pluginConfig[0].args: a second LowNodeLoad",
        ),
        (
            {"kind": "DeschedulerConfiguration", "profiles": [{"pluginConfig": [{"name": "LowNodeLoad", "args": 3}]}]},
            "profiles[0].pluginConfig[0].args: must be a mapping",
        ),
    ],
)
def test_structural_errors(doc: dict[str, Any], expected: str) -> None:
    with pytest.raises(ArgsError) as err:
        args_from_document(doc)
    assert any(expected in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize(
    ("text", "expected"),
    [("highThresholds: [1", "not valid YAML"), ("- a\n- b\n", "must hold a mapping")],
)
def test_file_errors(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ArgsError, match=expected):
        load_args_file(write(tmp_path, text))
    with pytest.raises(ArgsError, match="cannot read"):
        load_args_file(tmp_path / "missing.yaml")
