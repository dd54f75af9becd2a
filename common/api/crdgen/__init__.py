"""Generate Loadline's CustomResourceDefinitions into ``deploy/crds/``.

Usage::

    python -m common.api.crdgen [--check] [OUTDIR]

Without ``--check`` one YAML file per CRD is (re)written into OUTDIR (default: the repository's
``deploy/crds``), named ``<group>_<plural>.yaml`` like controller-gen does. With ``--check`` nothing is
written; the command lists every file that is missing, differs from what would be generated, or is a
stale generated file, and exits 1 if there is any (used by the unit tests and CI).

The APIs are wire-compatible with Koordinator (``slo.koordinator.sh``, ``scheduling.sigs.k8s.io``) and
scheduler-plugins (``scheduling.x-k8s.io``): group, version, kind, scope and every field mirror upstream
(koordinator ``config/crd/bases`` and ``apis/``; field set of v1.8.0 plus the main branch's additions to
``apis/slo/v1alpha1/nodemetric_types.go``). What is ours is presentation only: short names, categories and
printer columns.
Schemas are structural (every node typed, except int-or-string and preserve-unknown-fields nodes), and
``x-kubernetes-preserve-unknown-fields`` is used only where Koordinator uses it, so the API server prunes
exactly what Koordinator's own CRDs would prune.

NodeMetric and NodeSLO are generated from their pydantic models (common/api/nodemetric.py, nodeslo.py; see
from_model.py): names, types and descriptions are the models', so the CRD and the model cannot drift apart.
"""

from common.api.crdgen.cli import check, main, render_all, write
from common.api.crdgen.crds import all_crds
from common.api.crdgen.schema import HEADER

__all__ = ["HEADER", "all_crds", "check", "main", "render_all", "write"]
