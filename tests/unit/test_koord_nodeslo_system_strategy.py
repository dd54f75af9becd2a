"""A disagreement found beside koord-manager v1.8.0 (tests/integration/test_koordinator_compat.py): from an
slo-controller-config without `system-config`, koord-manager writes `systemStrategy: {totalNetworkBandwidth: "0"}`
(sloconfig.DefaultSystemStrategy) while Loadline's manager wrote minFreeKbytesFactor 100, watermarkScaleFactor 150
and memcgReapBackGround 0 -- kernel tuning a koordlet would then apply that Koordinator's own manager never asks for."""

from __future__ import annotations

import json

from manager.nodeslo.config import SLOControllerConfig, parse_slo_controller_config, parse_system_config
from manager.nodeslo.render import render_node_slo_spec


def test_without_system_config_the_nodeslo_asks_for_no_kernel_tuning_as_koord_manager() -> None:
    config = parse_slo_controller_config({"colocation-config": json.dumps({"enable": True})})
    assert isinstance(config, SLOControllerConfig), config
    spec = render_node_slo_spec(config, {"pool": "gpu"})
    assert spec["systemStrategy"] == {"totalNetworkBandwidth": "0"}


def test_a_system_config_overlays_koordinators_default_system_strategy() -> None:
    parsed = parse_system_config(json.dumps({"clusterStrategy": {"watermarkScaleFactor": 200}}))
    assert not isinstance(parsed, list), parsed
    assert parsed.cluster == {"totalNetworkBandwidth": "0", "watermarkScaleFactor": 200}
