"""The Kubernetes scheduling fields and their matching, as kube-scheduler evaluates them.

Loadline's counterpart of k8s.io/component-helpers/scheduling: taints and tolerations
(v1.Toleration.ToleratesTaint), node selector requirements and terms, and metav1.LabelSelector,
parsed once into immutable values and matched by the scheduler's plugins, the descheduler and
the manager alike.
A malformed field raises `MalformedObjectError` naming it; the caller logs and skips the object.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.api.malformed import MalformedObjectError

_INT64 = re.compile(r"[+-]?[0-9]+")


def parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), how Gt/Lt read a requirement's value and a label's: no spaces, no
    underscores, within int64; None where Go fails."""
    if _INT64.fullmatch(text) is None:
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


LABEL_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
NODE_SELECTOR_OPERATORS = LABEL_SELECTOR_OPERATORS | {"Gt", "Lt"}
TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """v1.Toleration.ToleratesTaint: an empty effect/key matches all; Exists ignores the value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("Equal", "") and self.value == taint.value


def tolerated(taint: Taint, tolerations: Sequence[Toleration]) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


# Effects a pod must tolerate to be placed on a node; PreferNoSchedule only affects scoring.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def first_untolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint not tolerated (v1helper.FindMatchingUntoleratedTaint)."""
    for taint in taints:
        if taint.effect in BLOCKING_EFFECTS and not tolerated(taint, tolerations):
            return taint
    return None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement; Gt/Lt hold their single integer in `number`."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    number: int | None = None

    def matches(self, value: str | None) -> bool:
        """The requirement against a label's value (None: the node has no such label)."""
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op not in ("Gt", "Lt") or value is None or len(self.values) != 1:
            return False
        have = parse_int64(value)
        want = self.number if self.number is not None else parse_int64(self.values[0])
        if have is None or want is None:
            return False  # a label that is no integer matches neither Gt nor Lt
        return have > want if op == "Gt" else have < want


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """A NodeSelectorTerm: all expressions (labels) and fields (only metadata.name) must match."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    @property
    def is_empty(self) -> bool:
        return not self.match_expressions and not self.match_fields

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """An empty term matches no node; otherwise every requirement must hold."""
        if self.is_empty:
            return False
        return all(req.matches(labels.get(req.key)) for req in self.match_expressions) and all(
            req.matches(node_name) for req in self.match_fields
        )


def node_matches(
    node_name: str,
    labels: Mapping[str, str],
    node_selector: Mapping[str, str],
    required_affinity: Sequence[SelectorTerm] | None,
) -> bool:
    """spec.nodeSelector AND (any required node affinity term). None: the pod has no required
    affinity; an empty term list matches no node, as kube-scheduler's nodeaffinity helper has it."""
    if any(labels.get(key) != value for key, value in node_selector.items()):
        return False
    return required_affinity is None or any(term.matches(node_name, labels) for term in required_affinity)


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector as labels.Selector matches it: every matchLabels pair and every
    expression (In, NotIn, Exists, DoesNotExist) must hold; the empty selector matches everything.

    What a *missing* selector means is the caller's: nothing for NodeSLO profiles and PDBs
    (`LabelSelectorAsSelector(nil)` is `labels.Nothing()`), everything for the descheduler's filters.
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @classmethod
    def of(
        cls, match_labels: Mapping[str, str] | None, expressions: Iterable[tuple[str, str, Iterable[str]]] = ()
    ) -> LabelSelector:
        """From validated fields (key, operator, values) of a config schema."""
        return cls(
            tuple(sorted((match_labels or {}).items())),
            tuple(Requirement(key, op, tuple(values)) for key, op, values in expressions),
        )

    @property
    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(req.matches(labels.get(req.key)) for req in self.match_expressions)


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: SelectorTerm


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedObjectError(f"{field}: expected an object, got {type(value).__name__}")
    return value


def _sequence(value: Any, field: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise MalformedObjectError(f"{field}: expected a list, got {type(value).__name__}")
    return value


def string_map(value: Any, field: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in _mapping(value, field).items():
        if not isinstance(v, str):
            raise MalformedObjectError(f"{field}.{k}: expected a string, got {v!r}")
        out[str(k)] = v
    return out


def parse_taints(value: Any, field: str = "spec.taints") -> tuple[Taint, ...]:
    taints = []
    for i, raw in enumerate(_sequence(value, field)):
        item = _mapping(raw, f"{field}[{i}]")
        effect = item.get("effect", "")
        if effect not in TAINT_EFFECTS:
            raise MalformedObjectError(f"{field}[{i}].effect: unknown taint effect {effect!r}")
        taints.append(Taint(str(item.get("key", "")), str(item.get("value", "") or ""), effect))
    return tuple(taints)


def parse_tolerations(value: Any, field: str = "spec.tolerations") -> tuple[Toleration, ...]:
    out = []
    for i, raw in enumerate(_sequence(value, field)):
        item = _mapping(raw, f"{field}[{i}]")
        operator = item.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise MalformedObjectError(f"{field}[{i}].operator: unknown toleration operator {operator!r}")
        out.append(
            Toleration(
                key=str(item.get("key") or ""),
                operator=operator,
                value=str(item.get("value") or ""),
                effect=str(item.get("effect") or ""),
            )
        )
    return tuple(out)


def _parse_requirement(raw: Any, field: str, operators: frozenset[str] = NODE_SELECTOR_OPERATORS) -> Requirement:
    item = _mapping(raw, field)
    key = item.get("key")
    if not isinstance(key, str) or not key:
        raise MalformedObjectError(f"{field}.key: required")
    operator = item.get("operator")
    if operator not in operators:
        raise MalformedObjectError(f"{field}.operator: unknown operator {operator!r}")
    values = tuple(str(v) for v in _sequence(item.get("values"), f"{field}.values"))
    if operator in ("In", "NotIn") and not values:
        raise MalformedObjectError(f"{field}.values: must be non-empty for {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise MalformedObjectError(f"{field}.values: must be empty for {operator}")
    number = None
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise MalformedObjectError(f"{field}.values: {operator} needs exactly one value")
        number = parse_int64(values[0])
        if number is None:
            raise MalformedObjectError(f"{field}.values[0]: {values[0]!r} is not an integer")
    return Requirement(key, operator, values, number)


def parse_selector_term(raw: Any, field: str) -> SelectorTerm:
    item = _mapping(raw, field)
    expressions = tuple(
        _parse_requirement(r, f"{field}.matchExpressions[{i}]")
        for i, r in enumerate(_sequence(item.get("matchExpressions"), f"{field}.matchExpressions"))
    )
    fields = tuple(
        _parse_requirement(r, f"{field}.matchFields[{i}]")
        for i, r in enumerate(_sequence(item.get("matchFields"), f"{field}.matchFields"))
    )
    for i, req in enumerate(fields):
        if req.key != "metadata.name":
            raise MalformedObjectError(
                f"{field}.matchFields[{i}].key: only metadata.name is supported, got {req.key!r}"
            )
    return SelectorTerm(expressions, fields)


def parse_node_affinity(
    affinity: Any, field: str = "spec.affinity"
) -> tuple[tuple[SelectorTerm, ...] | None, tuple[PreferredTerm, ...]]:
    """(required terms or None when there is no required affinity, preferred terms)."""
    node_affinity = _mapping(_mapping(affinity, field).get("nodeAffinity"), f"{field}.nodeAffinity")
    base = f"{field}.nodeAffinity"
    required: tuple[SelectorTerm, ...] | None = None
    req_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req_raw is not None:
        req_field = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
        terms = _sequence(_mapping(req_raw, req_field).get("nodeSelectorTerms"), f"{req_field}.nodeSelectorTerms")
        required = tuple(parse_selector_term(t, f"{req_field}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms))
    preferred = []
    pref_field = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
    pref_raw = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    for i, raw in enumerate(_sequence(pref_raw, pref_field)):
        item = _mapping(raw, f"{pref_field}[{i}]")
        weight = item.get("weight")
        if not isinstance(weight, int) or not 1 <= weight <= 100:
            raise MalformedObjectError(f"{pref_field}[{i}].weight: must be an integer in 1..100, got {weight!r}")
        term = parse_selector_term(item.get("preference"), f"{pref_field}[{i}].preference")
        preferred.append(PreferredTerm(weight, term))
    return required, tuple(preferred)


def parse_label_selector(raw: Any, field: str) -> LabelSelector:
    """A metav1.LabelSelector object as it comes from the API server."""
    item = _mapping(raw, field)
    expressions = tuple(
        _parse_requirement(r, f"{field}.matchExpressions[{i}]", LABEL_SELECTOR_OPERATORS)
        for i, r in enumerate(_sequence(item.get("matchExpressions"), f"{field}.matchExpressions"))
    )
    match_labels = string_map(item.get("matchLabels"), f"{field}.matchLabels")
    return LabelSelector(tuple(sorted(match_labels.items())), expressions)


# --------------------------------------------------------------------------- host ports and images
# (kube-scheduler's util.GetHostPorts / framework.HostPortInfo and imagelocality's normalizedImageName)

DEFAULT_BIND_ALL_HOST_IP = "0.0.0.0"  # framework.DefaultBindAllHostIP: an empty hostIP binds every address


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port bound on the node, sanitised as HostPortInfo.Add does it (an empty hostIP
    is 0.0.0.0, an empty protocol TCP)."""

    protocol: str
    port: int
    ip: str = DEFAULT_BIND_ALL_HOST_IP


def parse_host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """The pod's host ports as kube-scheduler counts them: every container's ports with a hostPort > 0,
    and those of init containers with `restartPolicy: Always` (sidecars, which run as long as the pod);
    in that order, each (protocol, port, ip) once."""
    out: dict[HostPort, None] = {}
    for kind in ("initContainers", "containers"):
        for i, raw in enumerate(_sequence(spec.get(kind), f"spec.{kind}")):
            container = _mapping(raw, f"spec.{kind}[{i}]")
            if kind == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            for j, port_raw in enumerate(_sequence(container.get("ports"), f"spec.{kind}[{i}].ports")):
                port = _mapping(port_raw, f"spec.{kind}[{i}].ports[{j}]")
                host_port = port.get("hostPort")
                if host_port is None:
                    continue
                if not isinstance(host_port, int) or isinstance(host_port, bool):
                    raise MalformedObjectError(f"spec.{kind}[{i}].ports[{j}].hostPort: expected an integer")
                if host_port <= 0:
                    continue
                protocol = port.get("protocol") or "TCP"
                ip = port.get("hostIP") or DEFAULT_BIND_ALL_HOST_IP
                out[HostPort(str(protocol), host_port, str(ip))] = None
    return tuple(out)


def normalized_image_name(name: str) -> str:
    """imagelocality.normalizedImageName: a reference without a tag gets ":latest" (a ':' before the
    last '/' is a registry port, not a tag). Nothing else is rewritten: "nginx:1" on a node reported
    as "docker.io/library/nginx:1" does not match, as in kube-scheduler."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


# --------------------------------------------------------------------------- priority classes
@dataclass(frozen=True, slots=True)
class PriorityClassInfo:
    """A scheduling.k8s.io/v1 PriorityClass: what a pod naming it gets (value and preemptionPolicy)."""

    name: str
    value: int
    preemption_policy: str | None = None  # None: the API server's default (PreemptLowerPriority)


def parse_priority_class(obj: Mapping[str, Any]) -> PriorityClassInfo:
    meta = _mapping(obj.get("metadata"), "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise MalformedObjectError("metadata.name: required")
    value = obj.get("value")
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**31) <= value < 2**31:
        raise MalformedObjectError(f"value: must be a 32-bit integer, got {value!r}")
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in ("PreemptLowerPriority", "Never"):
        raise MalformedObjectError(f"preemptionPolicy: unknown value {policy!r}")
    return PriorityClassInfo(name, value, policy)


# --------------------------------------------------------------------------- inter-pod affinity, topology spread
# (what InterPodAffinity and PodTopologySpread read; kept apart from the node-side types above)
UNSATISFIABLE_ACTIONS = frozenset({"DoNotSchedule", "ScheduleAnyway"})
NODE_INCLUSION_POLICIES = frozenset({"Honor", "Ignore"})


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A v1.PodAffinityTerm as kube-scheduler's framework.AffinityTerm holds it (k8s.io/kube-scheduler
    framework/types.go, newAffinityTerm): the namespaces are the term's own, or its pod's namespace when the
    term names neither namespaces nor a namespaceSelector.

    matchLabelKeys/mismatchLabelKeys are not read here: since v1.33 (MatchLabelKeysInPodAffinity, locked on)
    the API server merges them into `labelSelector` when it creates the pod, and kube-scheduler v1.36 reads
    only the merged selector (pkg/registry/core/pod/strategy.go, applyMatchLabelKeysAndMismatchLabelKeys)."""

    selector: LabelSelector | None  # None: no labelSelector, which matches no pod (labels.Nothing)
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None  # None: absent, no namespace; empty: every namespace
    topology_key: str

    def matches_namespace(self, namespace: str, namespace_labels: Mapping[str, str]) -> bool:
        if namespace in self.namespaces:
            return True
        return self.namespace_selector is not None and self.namespace_selector.matches(namespace_labels)

    def matches(self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str]) -> bool:
        """AffinityTerm.Matches: the pod's namespace is the term's (or its labels match the namespaceSelector)
        and the pod's labels match the selector."""
        return (self.selector is not None and self.matches_namespace(namespace, namespace_labels)
                and self.selector.matches(labels))


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """spec.affinity.podAffinity and podAntiAffinity, parsed (requiredDuringSchedulingIgnoredDuringExecution
    and preferredDuringSchedulingIgnoredDuringExecution of each)."""

    required_affinity: tuple[PodAffinityTerm, ...] = ()
    required_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()

    @property
    def term_count(self) -> int:
        return (len(self.required_affinity) + len(self.required_anti_affinity) + len(self.preferred_affinity)
                + len(self.preferred_anti_affinity))


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    """A v1.TopologySpreadConstraint with the API server's defaults applied: nodeAffinityPolicy Honor,
    nodeTaintsPolicy Ignore; `min_domains` None when unset (kube-scheduler then uses 1)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    selector: LabelSelector | None  # None: no labelSelector, which matches no pod
    match_label_keys: tuple[str, ...] = ()
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


def parse_pod_affinity_term(raw: Any, namespace: str, field: str) -> PodAffinityTerm:
    item = _mapping(raw, field)
    key = item.get("topologyKey")
    if not isinstance(key, str) or not key:
        raise MalformedObjectError(f"{field}.topologyKey: required")
    raw_selector = item.get("labelSelector")
    selector = None if raw_selector is None else parse_label_selector(raw_selector, f"{field}.labelSelector")
    names = frozenset(str(n) for n in _sequence(item.get("namespaces"), f"{field}.namespaces"))
    raw_ns_selector = item.get("namespaceSelector")
    ns_selector = (None if raw_ns_selector is None
                   else parse_label_selector(raw_ns_selector, f"{field}.namespaceSelector"))
    if not names and raw_ns_selector is None:
        names = frozenset({namespace})
    return PodAffinityTerm(selector, names, ns_selector, key)


def _weighted_terms(raw: Any, namespace: str, field: str) -> tuple[WeightedPodAffinityTerm, ...]:
    out = []
    for i, entry in enumerate(_sequence(raw, field)):
        item = _mapping(entry, f"{field}[{i}]")
        weight = item.get("weight")
        if not isinstance(weight, int) or not 1 <= weight <= 100:
            raise MalformedObjectError(f"{field}[{i}].weight: must be an integer in 1..100, got {weight!r}")
        out.append(WeightedPodAffinityTerm(
            weight, parse_pod_affinity_term(item.get("podAffinityTerm"), namespace, f"{field}[{i}].podAffinityTerm")))
    return tuple(out)


def parse_pod_affinity(affinity: Any, namespace: str, field: str = "spec.affinity") -> PodAffinity | None:
    """The pod (anti-)affinity of `spec.affinity`, or None when it has no term at all."""
    outer = _mapping(affinity, field)
    if outer.get("podAffinity") is None and outer.get("podAntiAffinity") is None:
        return None  # (most pods: nothing to parse)
    kinds = []
    for kind in ("podAffinity", "podAntiAffinity"):
        base = f"{field}.{kind}"
        section = _mapping(outer.get(kind), base)
        required_field = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
        required = tuple(
            parse_pod_affinity_term(t, namespace, f"{required_field}[{i}]")
            for i, t in enumerate(_sequence(section.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                            required_field))
        )
        preferred = _weighted_terms(section.get("preferredDuringSchedulingIgnoredDuringExecution"), namespace,
                                    f"{base}.preferredDuringSchedulingIgnoredDuringExecution")
        kinds.append((required, preferred))
    (required_affinity, preferred_affinity), (required_anti, preferred_anti) = kinds
    parsed = PodAffinity(required_affinity, required_anti, preferred_affinity, preferred_anti)
    return parsed if parsed.term_count else None


def parse_topology_spread_constraints(
    value: Any, field: str = "spec.topologySpreadConstraints"
) -> tuple[TopologySpreadConstraint, ...]:
    out = []
    for i, raw in enumerate(_sequence(value, field)):
        where = f"{field}[{i}]"
        item = _mapping(raw, where)
        max_skew = item.get("maxSkew")
        if not isinstance(max_skew, int) or isinstance(max_skew, bool) or max_skew < 1:
            raise MalformedObjectError(f"{where}.maxSkew: must be an integer greater than 0, got {max_skew!r}")
        key = item.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise MalformedObjectError(f"{where}.topologyKey: required")
        action = item.get("whenUnsatisfiable")
        if action not in UNSATISFIABLE_ACTIONS:
            raise MalformedObjectError(f"{where}.whenUnsatisfiable: unknown value {action!r}")
        raw_selector = item.get("labelSelector")
        selector = None if raw_selector is None else parse_label_selector(raw_selector, f"{where}.labelSelector")
        keys = tuple(str(k) for k in _sequence(item.get("matchLabelKeys"), f"{where}.matchLabelKeys"))
        min_domains = item.get("minDomains")
        if min_domains is not None and (not isinstance(min_domains, int) or min_domains < 1):
            raise MalformedObjectError(f"{where}.minDomains: must be an integer greater than 0, got {min_domains!r}")
        policies = []
        for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            policy = item.get(name) or default
            if policy not in NODE_INCLUSION_POLICIES:
                raise MalformedObjectError(f"{where}.{name}: unknown value {policy!r}")
            policies.append(str(policy))
        out.append(TopologySpreadConstraint(max_skew, key, str(action), selector, keys, min_domains, *policies))
    return tuple(out)
