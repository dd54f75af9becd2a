"""The ClusterColocationProfile schema (config.koordinator.sh/v1alpha1).

Field for field Koordinator v1.8.0's config/crd/bases/config.koordinator.sh_clustercolocationprofiles.yaml (types,
formats, enum, int-or-string, atomic selectors, the schemaless `patch`), so either side's API server keeps and
refuses exactly the same objects; tests/integration/test_colocation_profile.py compares the two.
"""

from __future__ import annotations

from common.api.crdgen.schema import Schema, int32, int_or_string, label_selector, obj, string, string_map


def colocation_profile_spec() -> Schema:
    return obj(
        {
            "namespaceSelector": label_selector(
                "Pods in namespaces whose labels match are mutated; empty or unset: every namespace."
            ),
            "selector": label_selector("Pods whose labels match are mutated; empty or unset: every pod."),
            "probability": int_or_string(
                "Share of the selected pods the profile applies to: an integer or a percentage (\"50%\"); unset: all."
            ),
            "qosClass": string(
                "Koordinator QoS class the pod gets as label koordinator.sh/qosClass.",
                enum=["LSE", "LSR", "LS", "BE", "SYSTEM"],
            ),
            "priorityClassName": string(
                "PriorityClass the pod gets, with that class's priority value and preemption policy."
            ),
            "koordinatorPriority": int32(
                "Sub-priority within the priority class, set as label koordinator.sh/priority (higher first)."
            ),
            "labels": string_map("Labels set on the pod."),
            "annotations": string_map("Annotations set on the pod."),
            "labelKeysMapping": string_map("For each key k: the pod's label k copied to the label named by the value."),
            "annotationKeysMapping": string_map(
                "For each key k: the pod's annotation k copied to the annotation named by the value."
            ),
            "labelSuffixes": string_map("For each key k the pod has as a label: the value appended to that label."),
            "schedulerName": string("Scheduler the pod is given to."),
            "patch": {
                "description": "Strategic merge patch applied to the pod (Loadline applies the subset in "
                "docs/colocation-profile.md and refuses a profile whose patch reaches beyond it).",
                "x-kubernetes-preserve-unknown-fields": True,
            },
        },
        "What the selected pods become when they are created.",
    )
