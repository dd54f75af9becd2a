"""deploy/prometheus (rules) and deploy/dashboards (Grafana): promtool checks and unit tests, metric names that
really exist, dashboards that Grafana can load. The chart's monitoring templates are tested in
tests/integration/test_monitoring_chart.py."""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "loadline-rules.yaml"
RULE_TESTS = REPO / "tests" / "data" / "loadline-rules.test.yaml"
DASHBOARDS = sorted((REPO / "deploy" / "dashboards").glob("*.json"))
DATASOURCE_UID = "${datasource}"
# Series Prometheus itself makes for every target.
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
GRAFANA_BUILTINS = frozenset({"__rate_interval", "__interval", "__range"})
# The processes behind each /metrics endpoint (their imports pull in every metrics module they export).
SERVING_MODULES = (
    "agent.main",
    "manager.main",
    "scheduler_plugin.server.process",
    "scheduler_plugin.extender.main",
    "scheduler_plugin.extender.server",
    "scheduler_plugin.descheduler.main",
    "scheduler_plugin.descheduler.controller",
)


def run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, timeout=120)


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def all_rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def load_dashboard(path: Path) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows keep their panels inside


# ------------------------------------------------------------------------------------------------ promtool
def test_promtool_accepts_the_rule_file(promtool: str) -> None:
    result = run(promtool, "check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(all_rules())} rules found" in result.stdout


def test_promtool_rule_unit_tests_pass(promtool: str) -> None:
    """tests/data/loadline-rules.test.yaml: staleness fires and does not, collector failing, ratios, leaders."""
    result = run(promtool, "test", "rules", RULE_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("original", "broken", "caught_by"),
    [
        ("time() - loadline_agent_last_publish_success_timestamp_seconds > 180",
         "time() - loadline_agent_last_publish_success_timestamp_seconds > 1800", "LoadlineAgentNodeMetricStale"),
        ("expr: loadline_agent_collector_success == 0", "expr: loadline_agent_collector_success == 1",
         "LoadlineAgentCollectorFailing"),
        ("max by (node) (loadline_node_cpu_capacity_cores)\n", "sum(loadline_node_cpu_capacity_cores)\n",
         "node:loadline_node_cpu_usage:ratio_p95_5m"),
        ("(max by (node, resource, unit) (loadline_manager_node_batch_allocatable))",
         "(loadline_manager_node_batch_allocatable)", "cluster:loadline_manager_node_batch_allocatable:sum"),
    ],
)  # fmt: skip
def test_promtool_rule_unit_tests_catch_a_broken_rule(
    promtool: str, tmp_path: Path, original: str, broken: str, caught_by: str
) -> None:
    text = RULES.read_text()
    assert text.count(original) == 1
    (tmp_path / "loadline-rules.yaml").write_text(text.replace(original, broken))
    tests = yaml.safe_load(RULE_TESTS.read_text())
    tests["rule_files"] = ["loadline-rules.yaml"]
    (tmp_path / "rules.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = run(promtool, "test", "rules", tmp_path / "rules.test.yaml")
    assert result.returncode != 0, result.stdout
    assert caught_by in result.stdout + result.stderr


# ------------------------------------------------------------------------------------------------ conventions
def test_rules_follow_conventions() -> None:
    groups = rule_groups()
    assert len({g["name"] for g in groups}) == len(groups)
    alerts = [r for r in all_rules() if "alert" in r]
    records = [r for r in all_rules() if "record" in r]
    assert len(alerts) >= 10 and len(records) >= 10
    assert len({a["alert"] for a in alerts}) == len(alerts)
    for alert in alerts:
        name = alert["alert"]
        assert re.fullmatch(r"Loadline[A-Z][A-Za-z]+", name), name
        assert re.fullmatch(r"\d+[smh]", alert.get("for", "")), f"{name}: needs a `for:` duration"
        assert alert["labels"]["severity"] in {"info", "warning", "critical"}, name
        assert alert["annotations"]["summary"].strip() and alert["annotations"]["description"].strip(), name
    for record in records:
        # level:metric:operations, Prometheus' naming convention for recording rules
        assert re.fullmatch(r"[a-z_]+:loadline_[a-z0-9_]+:[a-z0-9_]+", record["record"]), record["record"]
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert {"LoadlineAgentNodeMetricStale", "LoadlineAgentCollectorFailing"} <= tested
    # Issue 29's signals: objects skipped, watches stalled or re-listing, loops restarted.
    assert {"LoadlineMalformedObjects", "LoadlineWatchStalled", "LoadlineWatchRelisting", "LoadlineWorkerRestarts"} <= tested
    assert tested <= {a["alert"] for a in alerts}, "a rule unit test names an alert that does not exist"


# ------------------------------------------------------------------------------------------------ metric names
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w.:$])[a-zA-Z_:][\w:]*")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
     "inf", "nan", "atan2"}
)  # fmt: skip


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects: identifiers outside label matchers, ranges and grouping clauses that
    are not function calls or keywords."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        word = match.group()
        if word.lower() in _KEYWORDS or text[match.end() :].lstrip().startswith("("):
            continue
        names.add(word)
    return names


def label_values(expr: str, label: str) -> set[str]:
    return set(re.findall(rf'\b{label}\s*=\s*"([^"]*)"', expr))


def test_promql_metric_names() -> None:
    expr = (
        'sum by (node, le) (rate(foo_seconds_bucket{quantile="0.95", job=~"a|b"}[5m] offset 1h)) / on (node) '
        'group_left (x) max without (y) (bar:baz:rate5m{node=~"$node"}) > 0.65 and on () vector(1) unless '
        "histogram_quantile(0.99, qux_total[$__rate_interval]) * 1e3"
    )
    assert promql_metric_names(expr) == {"foo_seconds_bucket", "bar:baz:rate5m", "qux_total"}
    assert promql_metric_names("time() - loadline_agent_last_publish_success_timestamp_seconds > 180") == {
        "loadline_agent_last_publish_success_timestamp_seconds"
    }


class _Counting:
    """Every node, pod and container series the collectors emit (by agent.series' names), growing per cycle."""

    name = "fake"

    def __init__(self, uid: str) -> None:
        from agent.collectors.base import SeriesErrors

        self.uid = uid
        self.n = 0
        self._errors = SeriesErrors()
        self._errors.record(SeriesErrors.VANISHED)

    @property
    def errors(self) -> Any:
        return self._errors

    devices: Sequence[Any] = ()

    def close(self) -> None:
        pass

    def collect(self, now: float) -> Any:
        from agent import series as s

        self.n += 1
        n, uid = self.n, self.uid
        out = [
            s.Sample(s.SeriesKey(s.NODE_CPU_USAGE_SECONDS), 2.0 * n, s.Kind.COUNTER),
            s.Sample(s.SeriesKey(s.NODE_CPU_CAPACITY_CORES), 8.0),
            s.Sample(s.SeriesKey(s.NODE_MEMORY_TOTAL_BYTES), 16e9),
            s.Sample(s.SeriesKey(s.NODE_MEMORY_USAGE_BYTES), 4e9 + n),
            s.Sample(s.SeriesKey(s.NODE_MEMORY_USAGE_WITH_PAGE_CACHE_BYTES), 6e9 + n),
        ]
        for resource in s.PSI_RESOURCES:
            for line in ("some", "full"):
                out.append(
                    s.Sample(s.SeriesKey(s.psi_total_metric(resource, line, node=True)), 0.1 * n, s.Kind.COUNTER)
                )
                out.append(s.Sample(s.SeriesKey(s.psi_avg10_metric(resource, line, node=True)), 0.01))
        for container in ("", "app"):  # the pod cgroup and one container, as the cgroup collector reads them
            source = uid if not container else "containerd://a"
            out += [
                s.Sample(s.SeriesKey(s.CPU_USAGE_SECONDS, uid, container), 0.5 * n, s.Kind.COUNTER, source),
                s.Sample(s.SeriesKey(s.CPU_CFS_PERIODS, uid, container), 10.0 * n, s.Kind.COUNTER, source),
                s.Sample(s.SeriesKey(s.CPU_CFS_THROTTLED_PERIODS, uid, container), 1.0 * n, s.Kind.COUNTER, source),
                s.Sample(s.SeriesKey(s.CPU_CFS_THROTTLED_SECONDS, uid, container), 0.01 * n, s.Kind.COUNTER, source),
                s.Sample(s.SeriesKey(s.MEMORY_ANON_USAGE_BYTES, uid, container), 1e8),
                s.Sample(s.SeriesKey(s.MEMORY_WORKING_SET_BYTES, uid, container), 9e7),
            ]
            for resource in s.PSI_RESOURCES:
                out.append(
                    s.Sample(s.SeriesKey(s.psi_total_metric(resource, "some", node=False), uid, container), 0.1 * n,
                             s.Kind.COUNTER, source)
                )  # fmt: skip
        return s.block_of(out)


def agent_metrics_text() -> str:
    """The agent's /metrics as its exporter renders it with its defaults (no pod window series: the rules and
    dashboards must work without --pod-window-metrics): raw series, window aggregates, self-metrics, default
    registry."""
    from agent.exporter import AgentTimings, Exporter, ExportInput, NodeSelfState, render_self, render_series
    from agent.report import PodIdentity, ReportPolicy, aggregate
    from agent.sampler import Sampler

    uid = "0f0e0d0c-1111-2222-3333-444455556666"
    clock = [100.0]
    sampler = Sampler([_Counting(uid)], interval=1.0, windows=(10.0,), clock=lambda: clock[0])

    async def cycles() -> None:
        for _ in range(12):
            clock[0] += 1.0
            await sampler.cycle()

    asyncio.run(cycles())
    agg = aggregate(sampler.ring, clock[0], ReportPolicy(aggregate_duration_seconds=5, windows=(4.0, 10.0)))
    pods = {uid: PodIdentity(uid, "shop", "web-1", "koord-prod", "LS")}
    body = render_series([ExportInput(list(sampler.last_samples), agg, pods)]).decode()

    class Publisher:  # the fields render_self reads
        stats = type(
            "S", (), {"successes": 3, "errors": {"unreachable": 2}, "last_success_unix": 1.7e9, "healthy": True}
        )()

    text = body + render_self(
        [NodeSelfState("node-a", sampler, Publisher())], AgentTimings(0.01, 0.02, 1.7e9, 1), "node", per_node=True
    )
    exporter = Exporter("127.0.0.1", 0, live=lambda: text, health=lambda: (True, ""), ready=lambda: (True, ""))
    return exporter.metrics_text().decode()


def registry_names() -> set[str]:
    """Every series name the manager, scheduler, extender and descheduler can export: their metric objects are
    module-level on the default registry, so importing the modules that run them registers all of them."""
    for module in SERVING_MODULES:
        importlib.import_module(module)
    suffixes = {
        "counter": ("_total",),
        "gauge": ("",),
        "histogram": ("_bucket", "_sum", "_count"),
        "summary": ("", "_sum", "_count"),
        "info": ("_info",),
    }
    names = set()
    for family in REGISTRY.collect():
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


@pytest.fixture(scope="module")
def exported() -> set[str]:
    agent = {s.name for f in text_string_to_metric_families(agent_metrics_text()) for s in f.samples}
    names = agent | registry_names()
    # sanity: the collection itself worked, for every component
    for probe in ("loadline_node_cpu_usage_window_cores", "loadline_container_memory_working_set_bytes",
                  "loadline_agent_last_publish_success_timestamp_seconds", "loadline_manager_reconciles_total",
                  "loadline_scheduler_schedule_attempts_total", "loadline_extender_requests_total",
                  "loadline_descheduler_evictions_total", "loadline_leader", "process_resident_memory_bytes"):  # fmt: skip
        assert probe in names, probe
    return names


def recorded() -> set[str]:
    return {r["record"] for r in all_rules() if "record" in r}


def missing(exprs: Sequence[str], known: set[str]) -> dict[str, set[str]]:
    return {e: unknown for e in exprs if (unknown := promql_metric_names(e) - known)}


def test_missing_finds_a_renamed_metric(exported: set[str]) -> None:
    assert missing(["rate(loadline_agent_publishes_total[5m])"], exported) == {}
    assert missing(["rate(loadline_agent_publish_total[5m])"], exported) == {
        "rate(loadline_agent_publish_total[5m])": {"loadline_agent_publish_total"}
    }


def test_rules_name_only_exported_metrics(exported: set[str]) -> None:
    exprs = [r["expr"] for r in all_rules()]
    assert missing(exprs, exported | recorded() | PROMETHEUS_SERIES) == {}


def dashboard_exprs(board: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(board) for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            selector = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            assert selector, f"{variable['name']}: {query}"
            exprs.append(selector.group(1))
    return exprs


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboards_name_only_exported_metrics(path: Path, exported: set[str]) -> None:
    assert missing(dashboard_exprs(load_dashboard(path)), exported | recorded() | PROMETHEUS_SERIES) == {}


def test_label_values_are_the_agents() -> None:
    """`window` and `quantile` values in the rules are the ones the agent renders by default."""
    from agent.exporter import QUANTILE_LABELS
    from agent.report import ReportPolicy
    from common.api.wire import GoDuration

    windows = {GoDuration.from_seconds(w).canonical() for w in ReportPolicy().windows}
    exprs = [r["expr"] for r in all_rules()] + [e for p in DASHBOARDS for e in dashboard_exprs(load_dashboard(p))]
    used_windows = set().union(*(label_values(e, "window") for e in exprs)) - {"$window"}
    used_quantiles = set().union(*(label_values(e, "quantile") for e in exprs))
    assert used_windows and used_windows <= windows, (used_windows, windows)
    assert used_quantiles and used_quantiles <= set(QUANTILE_LABELS.values())


# ------------------------------------------------------------------------------------------------ dashboards
def test_dashboards_exist() -> None:
    titles = {load_dashboard(p)["title"] for p in DASHBOARDS}
    assert {"Loadline / Node agent", "Loadline / Scheduling"} <= titles
    uids = [load_dashboard(p)["uid"] for p in DASHBOARDS]
    assert len(set(uids)) == len(uids)


def _datasources(node: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield where, value
            yield from _datasources(value, f"{where}/{node.get('title') or node.get('name') or key}")
    elif isinstance(node, list):
        for item in node:
            yield from _datasources(item, where)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_structure(path: Path) -> None:
    text = path.read_text()
    board = load_dashboard(path)
    assert text == json.dumps(board, indent=2) + "\n", "keep the JSON hand-readable: indent 2, trailing newline"
    assert 36 <= board["schemaVersion"] <= 41
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"

    all_panels = list(panels(board))
    ids = [p["id"] for p in all_panels]
    assert len(set(ids)) == len(ids), "panel ids must be unique"
    graphs = [p for p in all_panels if p["type"] != "row"]
    assert len(graphs) >= 8
    for panel in graphs:
        targets = panel.get("targets") or []
        assert targets and all(t.get("expr", "").strip() for t in targets), panel["title"]
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24 and pos["w"] > 0 and pos["h"] > 0, panel["title"]
        assert panel.get("description"), f"{panel['title']}: say what the panel shows"
        for target in targets:
            used = set(re.findall(r"\$\{?(\w+)", target["expr"]))
            assert used <= set(variables) | GRAFANA_BUILTINS, (panel["title"], used)

    for where, ref in _datasources(board):
        if isinstance(ref, dict) and ref.get("type") == "grafana":
            continue  # the built-in annotations
        assert ref == {"type": "prometheus", "uid": DATASOURCE_UID}, f"{path.name}{where}: {ref}"


def _substitute(expr: str) -> str:
    expr = re.sub(r"\$\{?(__\w+)\}?", "5m", expr)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def test_dashboard_queries_parse(promtool: str, tmp_path: Path) -> None:
    """Every dashboard expression, with Grafana's variables filled in, is PromQL promtool accepts."""
    rules = [
        {"record": f"dashboard:check:{i}", "expr": _substitute(expr)}
        for i, expr in enumerate(e for p in DASHBOARDS for e in dashboard_exprs(load_dashboard(p)))
    ]
    assert len(rules) >= 40
    (tmp_path / "dashboards.rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": rules}]}))
    result = run(promtool, "check", "rules", tmp_path / "dashboards.rules.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_rules_file_is_shipped_in_the_chart() -> None:
    chart = REPO / "deploy" / "helm" / "loadline"
    assert (chart / "prometheus").resolve() == RULES.parent.resolve()
    assert (chart / "dashboards").resolve() == (REPO / "deploy" / "dashboards").resolve()
    assert RULE_TESTS.parent.resolve() != RULES.parent.resolve()  # the promtool tests stay out of the chart


def test_window_panels_default_to_the_shortest_window_the_agent_exports() -> None:
    """The agent exports a window once half of it is covered: the shortest is there first, so the dashboard picks
    it (numerical sort, no saved choice) instead of a fixed 5m0s that stays empty for 150 s."""
    board = load_dashboard(REPO / "deploy" / "dashboards" / "loadline-node-agent.json")
    window = next(v for v in board["templating"]["list"] if v["name"] == "window")
    assert window["sort"] == 3 and not window["current"]


def test_error_counters_exist_at_zero_before_the_first_error() -> None:
    from common.kube.reflector import Reflector
    from manager.batch import BatchWriter
    from manager.objects import NODE_SLO, SpecWriter
    from scheduler_plugin.server import metrics as scheduler_metrics

    Reflector(None, "/api/v1/nodes", name="zero-probe")  # type: ignore[arg-type]
    SpecWriter(None, NODE_SLO)  # type: ignore[arg-type]
    BatchWriter(None)  # type: ignore[arg-type]
    assert scheduler_metrics.BIND_ERRORS is not None
    zero = [
        ("loadline_kube_watch_errors_total", {"resource": "zero-probe"}),
        ("loadline_manager_api_errors_total", {"kind": "NodeSLO", "action": "delete"}),
        ("loadline_manager_api_errors_total", {"kind": "Node", "action": "status"}),
        ("loadline_scheduler_bind_errors_total", {"reason": "conflict"}),
        ("loadline_scheduler_api_errors_total", {"call": "event"}),
    ]
    for name, labels in zero:  # present (0 unless an earlier test in this process counted an error)
        assert REGISTRY.get_sample_value(name, labels) is not None, name
