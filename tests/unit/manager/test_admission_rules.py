"""The Colocation Profile's pure parts: profile checking, the pod mutation, the pod rules, the patch subset, reviews.

Expected values are those of Koordinator v1.8.0's table tests (pkg/webhook/pod/mutating/cluster_colocation_profile_test.go,
extended_resource_spec_test.go, pkg/webhook/pod/validating/cluster_colocation_profile_test.go), read for facts.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from common.api.colocation import check_profile, digest_profile, parse_probability
from common.api.malformed import MalformedObjectError
from common.api.podpatch import PatchError, apply_patch, patch_errors
from common.api.scheduling import PriorityClassInfo, parse_priority_class
from common.api.validation import aggregate
from manager.admission.mutate import Skip, extended_resource_spec, mutate_pod
from manager.admission.podrules import pod_errors
from manager.admission.review import BadReview, allowed, denied, json_patch, parse_review
from tests import objects

Obj = dict[str, Any]
BATCH = "kubernetes.io/batch-cpu"
BATCH_MEM = "kubernetes.io/batch-memory"
CLASSES = {"koordinator-batch": PriorityClassInfo("koordinator-batch", 5999, "fakePreemptionPolicy"),
           "koord-batch": PriorityClassInfo("koord-batch", 5000, "PreemptLowerPriority"),
           "koord-prod": PriorityClassInfo("koord-prod", 9000, "PreemptLowerPriority")}  # fmt: skip


def res(cpu: str | None = None, memory: str | None = None, **other: str) -> dict[str, str]:
    out = {"cpu": cpu, "memory": memory, **other}
    return {k: v for k, v in out.items() if v is not None}


def koord_pod(*, requests: bool = True, limits: bool = True, init: bool = True, overhead: bool = True,
              labels: dict[str, str] | None = None) -> Obj:  # fmt: skip
    """The pod of Koordinator's "mutating pod" case: priority 5999 (batch), an init container, overhead."""
    def resources(cpu: str, memory: str) -> Obj:
        out: Obj = {}
        if limits:
            out["limits"] = res(cpu, memory)
        if requests:
            out["requests"] = res(cpu, memory)
        return out

    spec: Obj = {"containers": [{"name": "test-container-a", "resources": resources("1", "4Gi")}],
                 "schedulerName": "nonExistSchedulerName", "priority": 5999}  # fmt: skip
    if init:
        spec["initContainers"] = [{"name": "test-init-container-a", "resources": resources("500m", "1Gi")}]
    if overhead:
        spec["overhead"] = res("1", "2Gi")
    return {"metadata": {"namespace": "default", "name": "test-pod-1",
                         "labels": labels or {"koordinator-colocation-pod": "true"}}, "spec": spec}  # fmt: skip


def koord_profile(**spec: Any) -> Obj:
    base: Obj = {
        "namespaceSelector": {"matchLabels": {"enable-koordinator-colocation": "true"}},
        "selector": {"matchLabels": {"koordinator-colocation-pod": "true"}},
        "labels": {"testLabelA": "valueA"},
        "annotations": {"testAnnotationA": "valueA"},
        "schedulerName": "koordinator-scheduler",
        "qosClass": "BE",
        "priorityClassName": "koordinator-batch",
        "koordinatorPriority": 1111,
        "patch": {"metadata": {"labels": {"test-patch-label": "patch-a"},
                               "annotations": {"test-patch-annotation": "patch-b"}}},
    }  # fmt: skip
    annotations = spec.pop("profile_annotations", None)
    meta: Obj = {"name": spec.pop("name", "test-profile")}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile", "metadata": meta,
            "spec": {**base, **spec}}  # fmt: skip


NS = {"enable-koordinator-colocation": "true"}


def mutated(pod: Obj, *profiles: Obj, roll: int = 0, ns: dict[str, str] = NS) -> Obj:
    result = mutate_pod(pod, ns, [digest_profile(p) for p in profiles], CLASSES, roll=lambda: roll)
    out: Obj = result.pod
    return out


# ----------------------------------------------------------------------------- mutation (Koordinator's table)
def test_mutating_pod_as_koordinator() -> None:
    pod = koord_pod()
    out = mutated(pod, koord_profile())
    assert out["metadata"]["labels"] == {
        "koordinator-colocation-pod": "true", "testLabelA": "valueA", "test-patch-label": "patch-a",
        "koordinator.sh/qosClass": "BE", "koordinator.sh/priority": "1111"}  # fmt: skip
    assert out["metadata"]["annotations"] == {"testAnnotationA": "valueA", "test-patch-annotation": "patch-b",
                                              "loadline.io/colocation-profile": "test-profile"}  # fmt: skip
    spec = out["spec"]
    assert spec["initContainers"][0]["resources"] == {"limits": {BATCH: "500", BATCH_MEM: "1Gi"},
                                                      "requests": {BATCH: "500", BATCH_MEM: "1Gi"}}  # fmt: skip
    assert spec["containers"][0]["resources"] == {"limits": {BATCH: "1k", BATCH_MEM: "4Gi"},
                                                  "requests": {BATCH: "1k", BATCH_MEM: "4Gi"}}  # fmt: skip
    assert spec["overhead"] == {BATCH: "1k", BATCH_MEM: "2Gi"}
    assert (spec["schedulerName"], spec["priority"], spec["priorityClassName"], spec["preemptionPolicy"]) == (
        "koordinator-scheduler", 5999, "koordinator-batch", "fakePreemptionPolicy")
    assert pod == koord_pod(), "the original pod must be left as it was"


def test_a_limit_alone_becomes_the_request_and_a_request_alone_keeps_no_limit() -> None:
    only_limits = mutated(koord_pod(requests=False, init=False, overhead=False), koord_profile())
    assert only_limits["spec"]["containers"][0]["resources"] == {
        "limits": {BATCH: "1k", BATCH_MEM: "4Gi"}, "requests": {BATCH: "1k", BATCH_MEM: "4Gi"}}  # fmt: skip
    only_requests = mutated(koord_pod(limits=False, init=False, overhead=False), koord_profile())
    assert only_requests["spec"]["containers"][0]["resources"] == {"requests": {BATCH: "1k", BATCH_MEM: "4Gi"}}


@pytest.mark.parametrize(("probability", "roll", "applies"), [
    (100, 99, True), ("100%", 99, True), (0, 0, False), ("0%", 0, False),
    ("50%", 70, False), ("50%", 30, True), (50, 50, True), (50, 51, False),
])  # fmt: skip
def test_probability_rolls_as_koordinator(probability: int | str, roll: int, applies: bool) -> None:
    result = mutate_pod(koord_pod(), NS, [digest_profile(koord_profile(probability=probability))], CLASSES,
                        roll=lambda: roll)  # fmt: skip
    assert result.applied == (["test-profile"] if applies else [])
    assert ("koordinator.sh/qosClass" in result.pod["metadata"]["labels"]) is applies
    if not applies:
        assert result.skipped == [("test-profile", Skip.PROBABILITY, f"probability {parse_probability(probability)}%")]
        # A matched profile renames resources even when its roll skipped it (the pod's own priority is batch).
        assert BATCH in result.pod["spec"]["containers"][0]["resources"]["requests"]


def test_skip_update_resources_annotation_keeps_cpu_and_memory() -> None:
    profile = koord_profile(profile_annotations={"config.koordinator.sh/skip-update-resources": "true"})
    out = mutated(koord_pod(), profile)
    assert out["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "4Gi"}
    assert out["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"


def test_label_keys_mapping_and_suffixes() -> None:
    pod = koord_pod(labels={"koordinator-colocation-pod": "true", "label-key-to-load": "test-label-value",
                            "label-key-1": "label-value-1"})  # fmt: skip
    profile = koord_profile(
        labelKeysMapping={"label-key-to-load": "label-key-to-store",
                          "label-key-to-load-not-exist": "label-key-to-store-not-exist"},
        labelSuffixes={"label-key-1": "suffix", "label-key-to-store": "suffix-0", "suffix-label-key-1": "suffix-1"},
    )  # fmt: skip
    labels = mutated(pod, profile)["metadata"]["labels"]
    assert labels["label-key-to-store"] == "test-label-valuesuffix-0"
    assert labels["label-key-to-store-not-exist"] == ""  # Go reads a missing label as ""
    assert labels["label-key-1"] == "label-value-1suffix"
    assert "suffix-label-key-1" not in labels


def test_annotation_keys_mapping() -> None:
    pod = koord_pod()
    pod["metadata"]["annotations"] = {"annotation-key-to-load": "test-annotation-value"}
    out = mutated(pod, koord_profile(annotationKeysMapping={"annotation-key-to-load": "annotation-key-to-store"}))
    assert out["metadata"]["annotations"]["annotation-key-to-store"] == "test-annotation-value"


def test_selectors_decide_and_profiles_apply_in_name_order() -> None:
    pod = koord_pod()
    assert mutate_pod(pod, {"other": "ns"}, [digest_profile(koord_profile())], CLASSES).matched == []
    other_pod = koord_pod(labels={"app": "web"})
    assert mutate_pod(other_pod, NS, [digest_profile(koord_profile())], CLASSES).matched == []
    first = koord_profile(name="b-second", labels={"order": "b"}, patch=None)
    second = koord_profile(name="a-first", labels={"order": "a"}, patch=None)
    result = mutate_pod(pod, NS, [digest_profile(first), digest_profile(second)], CLASSES)
    assert result.applied == ["a-first", "b-second"] and result.pod["metadata"]["labels"]["order"] == "b"
    assert result.pod["metadata"]["annotations"]["loadline.io/colocation-profile"] == "a-first,b-second"


def test_a_missing_priority_class_skips_the_profile_for_the_pod() -> None:
    result = mutate_pod(koord_pod(), NS, [digest_profile(koord_profile(priorityClassName="nope"))], CLASSES)
    assert result.applied == [] and result.skipped[0][:2] == ("test-profile", Skip.PRIORITY_CLASS_MISSING)
    assert "koordinator.sh/qosClass" not in result.pod["metadata"]["labels"]


def test_a_patch_naming_a_container_the_pod_lacks_skips_the_profile() -> None:
    patch = {"spec": {"containers": [{"name": "sidecar", "env": [{"name": "A", "value": "1"}]}]}}
    result = mutate_pod(koord_pod(), NS, [digest_profile(koord_profile(patch=patch))], CLASSES)
    assert result.skipped[0][:2] == ("test-profile", Skip.PATCH) and "sidecar" in result.skipped[0][2]
    assert result.applied == []


@pytest.mark.parametrize(("priority", "labels", "expected"), [
    (5000, {}, BATCH), (7000, {}, "kubernetes.io/mid-cpu"), (3000, {}, "cpu"), (9000, {}, "cpu"),
    (0, {"koordinator.sh/qosClass": "BE"}, BATCH),  # no class: BE defaults to batch
    (5000, {"koordinator.sh/priority-class": "koord-prod"}, "cpu"),  # the label wins over the value
])  # fmt: skip
def test_which_priority_classes_get_renamed_resources(priority: int, labels: dict[str, str], expected: str) -> None:
    pod = koord_pod(init=False, overhead=False)
    pod["spec"]["priority"] = priority
    profile = koord_profile(priorityClassName="", qosClass="", labels=labels or {"x": "y"}, patch=None)
    out = mutated(pod, profile)
    assert expected in out["spec"]["containers"][0]["resources"]["requests"]


def test_extended_resource_spec_annotation() -> None:
    pod = mutated(koord_pod(init=False, overhead=False), koord_profile())
    value = extended_resource_spec(pod)
    assert value == ('{"containers":{"test-container-a":{"limits":{"kubernetes.io/batch-cpu":"1k",'
                     '"kubernetes.io/batch-memory":"4Gi"},"requests":{"kubernetes.io/batch-cpu":"1k",'
                     '"kubernetes.io/batch-memory":"4Gi"}}}}')  # fmt: skip
    pod["metadata"]["annotations"]["node.koordinator.sh/extended-resource-spec"] = value
    assert extended_resource_spec(pod) is None  # already right
    assert extended_resource_spec(koord_pod()) is None  # no batch resources, no annotation


# ----------------------------------------------------------------------------- pod rules (Koordinator's table)
def pod(labels: dict[str, str] | None = None, priority: int | None = None, requests: dict[str, str] | None = None) -> Obj:
    return objects.pod(cpu=None, memory=None, labels=labels, priority=priority, requests=requests)


QOS = "koordinator.sh/qosClass"


@pytest.mark.parametrize(("new", "old", "message"), [
    (pod(), None, ""),
    (pod({QOS: "LS"}), pod({QOS: "BE"}), 'labels.koordinator.sh/qosClass: Invalid value: "LS": field is immutable'),
    (pod(), pod({QOS: "BE"}, 5000), ('[labels.koordinator.sh/qosClass: Invalid value: "": field is immutable, '
                                     'spec.priority: Invalid value: "": field is immutable]')),
    (pod({QOS: "LS"}, requests={BATCH: "1000"}), None,
     "labels.koordinator.sh/qosClass: Required value: must specify koordinator QoS BE with koordinator colocation "
     "resources"),
    (pod(priority=9000), pod(priority=5000), 'spec.priority: Invalid value: "koord-prod": field is immutable'),
    (pod({"koordinator.sh/priority": "8888"}), pod({"koordinator.sh/priority": "7777"}),
     'labels.koordinator.sh/priority: Invalid value: "8888": field is immutable'),
    (pod({QOS: "BE"}, 5000, {BATCH: "1000"}), None, ""),
    (pod({QOS: "BE"}, 9000), None,
     "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in combination"),
    (pod({QOS: "BE"}), None, "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass= cannot be used in combination"),
    (pod({QOS: "LSR"}, 5000, {"cpu": "1"}), None,
     "Pod: Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-batch cannot be used in combination"),
    (pod({QOS: "LSR"}, 9000, {"cpu": "2"}), None, ""),
    (pod({QOS: "LSR"}, 9000), None,
     "pod.spec.containers[*].resources.requests: Required value: LSR Pod must declare the requested CPUs"),
    (pod({QOS: "LSR"}, 9000, {"cpu": "100m"}), None,
     'pod.spec.containers[*].resources.requests: Invalid value: "100m": the requested CPUs of LSR Pod must be integer'),
])  # fmt: skip
def test_pod_rules_as_koordinator(new: Obj, old: Obj | None, message: str) -> None:
    errors = pod_errors(new, old)
    assert (aggregate(errors) if errors else "") == message


# ----------------------------------------------------------------------------- profile checking
@pytest.mark.parametrize(("change", "message"), [
    ({"probability": "150%"}, 'spec.probability: Invalid value: "150%": must be between 0 and 100'),
    ({"probability": "half"}, 'spec.probability: Invalid value: "half": a string must be a percentage'),
    ({"qosClass": "GOLD"}, 'spec.qosClass: Unsupported value: "GOLD"'),
    ({"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
     "spec.selector.matchExpressions[0].operator: Invalid value: \"selector\": unknown operator 'Near'"),
    ({"namespaceSelector": {"matchLabels": {"bad key!": "x"}}}, 'spec.namespaceSelector.matchLabels: Invalid value: "bad key!"'),
    ({"labels": {"ok": "not ok!"}}, 'spec.labels[ok]: Invalid value: "not ok!"'),
    ({"patch": "not an object"}, 'spec.patch: Invalid value: "string": must be an object'),
    ({"patch": {"spec": {"hostNetwork": True}}}, 'spec.patch.spec.hostNetwork: Unsupported value: "hostNetwork"'),
    ({"patch": {"metadata": {"name": "x"}}}, 'spec.patch.metadata.name: Unsupported value: "name"'),
    ({"patch": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
     "spec.patch.spec.containers[0].image: Forbidden: a profile's patch may set only env and resources"),
    ({"patch": {"spec": {"terminationGracePeriodSeconds": "30"}}},
     'spec.patch.spec.terminationGracePeriodSeconds: Invalid value: "30": must be an integer >= 0'),
    ({"patch": {"$patch": "replace"}}, "spec.patch.$patch: Forbidden: strategic merge patch directives"),
    ({"priorityClassName": "koord-prod"},
     "spec: Forbidden: every pod this profile mutates would be refused: koordinator.sh/qosClass=BE and "
     "priorityClass=koord-prod cannot be used in combination"),
])  # fmt: skip
def test_profile_refusals_name_the_rule(change: Obj, message: str) -> None:
    profile, errors = check_profile(koord_profile(**change), lambda name: CLASSES[name].value if name in CLASSES else None)
    assert profile is None
    assert message in aggregate(errors), aggregate(errors)


def test_koordinator_doc_profile_is_accepted_and_a_missing_class_is_no_refusal() -> None:
    doc = {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
           "metadata": {"name": "colocation-profile-example"},
           "spec": {"namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                    "selector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                    "qosClass": "BE", "priorityClassName": "koord-batch", "koordinatorPriority": 1000,
                    "schedulerName": "koord-scheduler", "labels": {"koordinator.sh/mutated": "true"},
                    "annotations": {"koordinator.sh/intercepted": "true"},
                    "patch": {"spec": {"terminationGracePeriodSeconds": 30}}}}  # fmt: skip
    profile, errors = check_profile(doc)
    assert errors == [] and profile is not None and profile.percent == 100
    with pytest.raises(MalformedObjectError, match=r"spec\.probability"):
        digest_profile({**doc, "spec": {**doc["spec"], "probability": -1}})


# ----------------------------------------------------------------------------- the patch subset
def test_patch_merges_containers_and_env_by_name_and_orders_as_strategic_merge() -> None:
    pod = {"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}, {"name": "b"}],
                    "tolerations": [{"key": "k", "operator": "Exists"}]}}  # fmt: skip
    patch = {"spec": {"containers": [{"name": "b", "env": [{"name": "Y", "value": "2"}]},
                                     {"name": "a", "env": [{"name": "X", "value": "9"}, {"name": "Z", "value": "3"}],
                                      "resources": {"limits": {"cpu": "1"}}}],
                      "tolerations": [{"key": "other", "operator": "Exists"}], "terminationGracePeriodSeconds": 5}}  # fmt: skip
    assert patch_errors(patch) == []
    out = apply_patch(pod, patch)
    # Items the patch names come in the patch's order (normalizeElementOrder), merged with what the pod had.
    b, a = out["spec"]["containers"]
    assert (a["name"], b["name"]) == ("a", "b")
    assert a["env"] == [{"name": "X", "value": "9"}, {"name": "Z", "value": "3"}]
    assert a["resources"] == {"limits": {"cpu": "1"}}
    assert b["env"] == [{"name": "Y", "value": "2"}]
    # The pod's items the patch does not name keep their place ahead of new ones (mergeSortedSlice).
    merged = apply_patch({"spec": {"containers": [{"name": "a", "env": [{"name": "P"}, {"name": "Q"}]}]}},
                         {"spec": {"containers": [{"name": "a", "env": [{"name": "N", "value": "1"}, {"name": "Q", "value": "2"}]}]}})
    assert [e["name"] for e in merged["spec"]["containers"][0]["env"]] == ["P", "N", "Q"]
    assert out["spec"]["tolerations"] == [{"key": "other", "operator": "Exists"}]  # replaced, no merge key
    # null deletes; a value the pod lacks is taken without its nulls
    out = apply_patch(out, {"spec": {"terminationGracePeriodSeconds": None, "nodeSelector": {"a": "b", "c": None}}})
    assert "terminationGracePeriodSeconds" not in out["spec"] and out["spec"]["nodeSelector"] == {"a": "b"}
    with pytest.raises(PatchError, match="no container 'z'"):
        apply_patch(out, {"spec": {"containers": [{"name": "z", "env": []}]}})


# ----------------------------------------------------------------------------- reviews
def review(request: Obj) -> bytes:
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b'{"kind": "Pod"}', review({"uid": ""}),
                                  review({"uid": "u", "object": []})])  # fmt: skip
def test_bad_reviews_are_refused(body: bytes) -> None:
    with pytest.raises(BadReview):
        parse_review(body)


def test_responses_and_json_patch() -> None:
    request = parse_review(review({"uid": "u1", "operation": "CREATE", "resource": {"resource": "pods"},
                                   "namespace": "ns", "object": {"metadata": {}}}))  # fmt: skip
    assert (request.uid, request.operation, request.resource, request.namespace) == ("u1", "CREATE", "pods", "ns")
    before = {"metadata": {"name": "x", "labels": {"a": "1", "keep": "k"}}, "spec": {"containers": [{"name": "c"}]}}
    after = {"metadata": {"name": "x", "labels": {"a": "2", "b/c": "3", "keep": "k"}, "annotations": {"k": "v"}},
             "spec": {"containers": [{"name": "c", "resources": {}}]}}  # fmt: skip
    ops = json_patch(before, after)
    assert ops == [
        {"op": "replace", "path": "/metadata/labels/a", "value": "2"},
        {"op": "add", "path": "/metadata/labels/b~1c", "value": "3"},
        {"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}},
        {"op": "add", "path": "/spec/containers/0/resources", "value": {}},
    ]
    # A map none of whose entries is kept is one replace, not a remove and an add per key (a batch pod's requests).
    before = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
    batch = {"kubernetes.io/batch-cpu": "1k", "kubernetes.io/batch-memory": "1Gi"}
    after = {"spec": {"containers": [{"name": "c", "resources": {"requests": batch}}]}}
    assert json_patch(before, after) == [{"op": "replace", "path": "/spec/containers/0/resources/requests",
                                          "value": batch}]  # fmt: skip
    assert json_patch({"a": {"x": 1, "y": 2}}, {"a": {}}) == [{"op": "replace", "path": "/a", "value": {}}]
    assert json_patch({"a": {"x": 1}}, {"a": {}}) == [{"op": "remove", "path": "/a/x"}]  # one op either way
    assert json_patch({}, {"a": 1}) == [{"op": "add", "path": "/a", "value": 1}]  # the root is never replaced
    answer = orjson.loads(allowed("u1", ops, ["w" * 300]))["response"]
    assert orjson.loads(base64.b64decode(answer["patch"])) == ops and len(answer["warnings"][0]) == 120
    refusal = orjson.loads(denied("u1", "no"))["response"]
    assert refusal == {"uid": "u1", "allowed": False, "status": {"code": 400, "reason": "BadRequest", "message": "no"}}


def test_priority_class_parsing() -> None:
    assert parse_priority_class({"metadata": {"name": "p"}, "value": 5000}) == PriorityClassInfo("p", 5000, None)
    with pytest.raises(MalformedObjectError):
        parse_priority_class({"metadata": {"name": "p"}, "value": "high"})


def test_explain_names_the_profile_and_what_the_pod_got() -> None:
    from manager.admission.explain import describe_admission

    pod = mutated(koord_pod(init=False, overhead=False), koord_profile())
    line = describe_admission(pod)
    assert line.startswith("Colocation profile: test-profile (applied when the pod was created: qosClass BE; "
                           "priority koordinator-batch 5999; scheduler koordinator-scheduler")  # fmt: skip
    assert "kubernetes.io/batch-cpu=1k" in line
    assert describe_admission(koord_pod()).startswith("Colocation profile: none")


def test_profile_problems_for_events() -> None:
    from manager.admission.profilecheck import NO_CLASS, NO_NAMESPACE, profile_problems

    ok = digest_profile(koord_profile(name="ok"))
    no_class = digest_profile(koord_profile(name="no-class", priorityClassName="gone"))
    no_namespace = digest_profile(koord_profile(name="nowhere", namespaceSelector={"matchLabels": {"x": "y"}}))
    problems = profile_problems([ok, no_class, no_namespace], {"broken": "spec.probability: Invalid value"},
                                {"colocated": NS, "other": {}}, ["koordinator-batch"])  # fmt: skip
    assert set(problems) == {"no-class", "nowhere", "broken"}
    assert [reason for reason, _ in problems["no-class"]] == [NO_CLASS]
    assert [reason for reason, _ in problems["nowhere"]] == [NO_NAMESPACE]
    assert problems["broken"] == [("InvalidProfile", "not applied to any pod: spec.probability: Invalid value")]


def test_settings_certify_the_service_and_read_lists_from_the_environment() -> None:
    from common.config import load_settings
    from manager.settings import ManagerSettings

    settings = load_settings(ManagerSettings, env_prefix="LOADLINE_MANAGER",
                             environ={"LOADLINE_MANAGER_WEBHOOK_HOSTS": "127.0.0.1, webhook.example.com",
                                      "LOADLINE_MANAGER_NAMESPACE": "ll"})  # fmt: skip
    assert settings.webhook_names() == ("loadline-webhook.ll.svc", "loadline-webhook.ll.svc.cluster.local",
                                        "127.0.0.1", "webhook.example.com")  # fmt: skip
