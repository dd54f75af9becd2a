"""`loadline explain <namespace>/<pod>`: why a pod went where it went, or why it is pending.

Asks a running `loadline scheduler` (its /explain endpoint) and prints the answer as a
table: for every node of the pod's last scheduling attempt, the plugin that rejected it
and why, or its score per plugin and the weighted total; then the gang's state when the
pod is in one. A one-shot command, so a plain blocking HTTP request is fine here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from scheduler_plugin.server.options import DEFAULT_PORT

DEFAULT_SERVER = f"http://127.0.0.1:{DEFAULT_PORT}"


def local_cluster_state_file() -> Path:
    """Where `make cluster`/`make demo` record the local cluster (kubeconfig, the scheduler's URL, ...)."""
    cache = os.environ.get("LOADLINE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "loadline"
    )
    return Path(cache) / "cluster" / "state.json"


def default_server() -> tuple[str, str]:
    """The scheduler to ask when --server is not given, and where that answer came from."""
    if url := os.environ.get("LOADLINE_SCHEDULER_URL"):
        return url, "$LOADLINE_SCHEDULER_URL"
    state = local_cluster_state_file()
    try:
        recorded = json.loads(state.read_text()).get("scheduler_url")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if isinstance(recorded, str) and recorded:
        return recorded, f"the local cluster ({state})"
    return DEFAULT_SERVER, "the default"

DESCRIPTION = """\
Explain a scheduling decision of `loadline scheduler`.

For the pod's last scheduling attempt, every node gets one line: either the plugin that
rejected it and the reason (the same reasons as in the pod's FailedScheduling event:
"0/N nodes are available: ..."), or its score per plugin as normalised score × weight
and the weighted total the scheduler compared — the chosen node is marked. For a pod in
a gang (PodGroup or gang labels/annotations) the gang's state follows: its minMember and
which members are bound, waiting in Permit for the rest, or still pending. A pod with
PersistentVolumeClaims gets its claims' state (bound volume, class and binding mode, the
node a claim waits to be provisioned on, what PreBind is waiting for).

The scheduler keeps the last attempt of its most recent pods in memory (and, in brief, the
pod's last earlier attempt whose binding failed, e.g. in PreBind: on which node, among how many
tied, and why); ask the replica
that holds the leader Lease (a standby has not scheduled anything).
"""

EPILOG = """\
examples:
  loadline explain default/web-0
  loadline explain batch/trainer-3 --server http://loadline-scheduler.kube-system:10251
  loadline explain batch/trainer-3 --json | jq .gang
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadline explain",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("pod", metavar="<namespace>/<pod>", help="the pod to explain (a bare name means namespace "
                        "'default')")
    parser.add_argument("--server", help="the scheduler's HTTP address (default: $LOADLINE_SCHEDULER_URL, else the "
                        f"scheduler of the local `make demo`/`make cluster`, else {DEFAULT_SERVER})")
    parser.add_argument("--json", action="store_true", help="print the scheduler's JSON answer as is")
    parser.add_argument("--max-nodes", type=int, default=40,
                        help="print at most this many node lines, 0 for all (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the scheduler")
    parser.add_argument("--kubeconfig", help="where to read the pod for its ClusterColocationProfile (default: "
                        "$KUBECONFIG, ~/.kube/config, then the in-cluster service account)")
    return parser


def fetch(server: str, namespace: str, name: str, timeout: float) -> tuple[int, dict[str, Any]]:
    url = f"{server.rstrip('/')}/explain/{urllib.parse.quote(namespace)}/{urllib.parse.quote(name)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return exc.code, {"error": f"{exc.code} {exc.reason}"}


def _scores(item: dict[str, Any]) -> str:
    parts = []
    for plugin, score in sorted((item.get("scores") or {}).items()):
        parts.append(f"{plugin} {score['normalized']}×{score['weight']}")
    return ", ".join(parts) if parts else "not scored (the only feasible node)"


def render(doc: dict[str, Any], max_nodes: int = 40) -> str:
    lines = [f"Pod {doc['pod']}  scheduler={doc.get('schedulerName')}  state={doc.get('state')}"
             + (f"  node={doc['nodeName']}" if doc.get("nodeName") else "")]
    if doc.get("waitingOnPlugins"):
        lines.append(f"Waiting in Permit for: {', '.join(doc['waitingOnPlugins'])}")
    attempt = doc.get("attempt")
    if attempt is None:
        lines.append(doc.get("note") or "no scheduling attempt recorded")
    else:
        stale = "  (for an earlier pod of the same name)" if attempt.get("stale") else ""
        lines.append(f"Last attempt {attempt['at']} (attempt #{attempt['attempts']}, profile {attempt['profile']}): "
                     f"{attempt['outcome']}{stale}")
        if attempt.get("message"):
            lines.append(f"  {attempt['message']}")
        tied = attempt.get("tiedNodes") or 0
        lines.append(f"  nodes evaluated: {attempt['evaluatedNodes']}, feasible: {attempt['feasibleNodes']}"
                     + (f", chosen: {attempt['node']}" if attempt.get("node") else "")
                     + (f" (one of {tied} tied at the best total, picked at random)" if tied > 1 else ""))
        failure = doc.get("lastBindFailure")
        if failure:
            where = f" on {failure['node']}" if failure.get("node") else ""
            among = f" (one of {failure['tiedNodes']} tied)" if (failure.get("tiedNodes") or 0) > 1 else ""
            lines.append(f"  binding failed earlier (attempt #{failure['attempts']}, {failure['at']}){where}{among}"
                         + (f": {failure['message']}" if failure.get("message") else ""))
    nodes = doc.get("nodes") or []
    if nodes:
        rows = [("NODE", "VERDICT", "PLUGIN / TOTAL", "DETAIL")]
        for item in nodes:
            if item.get("feasible"):
                verdict = "chosen" if item.get("chosen") else "feasible"
                total = item.get("total")
                rows.append((item["node"], verdict, "" if total is None else f"total {total}", _scores(item)))
            else:
                rows.append((item["node"], "rejected", item.get("rejectedBy", ""), "; ".join(item.get("reasons", []))))
        shown = rows if max_nodes <= 0 else rows[: max_nodes + 1]
        widths = [max(len(r[i]) for r in shown) for i in range(3)]
        lines.append("")
        lines.extend(
            f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in shown
        )
        if len(shown) < len(rows):
            lines.append(f"... {len(rows) - len(shown)} more node(s) (--max-nodes 0 prints all)")
        rejected = Counter(
            f"{item.get('rejectedBy')}: {reason}" for item in nodes if not item.get("feasible")
            for reason in item.get("reasons", [])
        )
        if rejected:
            lines.append("")
            lines.append("Rejections by plugin:")
            lines.extend(f"  {count:>5}  {what}" for what, count in sorted(rejected.items(), key=lambda kv: -kv[1]))
    volumes = doc.get("volumes") or []
    if volumes:
        lines.append("")
        lines.append("Volumes:")
        for v in volumes:
            what = f"  {v['volume']} -> claim {v['claim']}" + (" (ephemeral)" if v.get("ephemeral") else "")
            if v.get("phase") is not None or v.get("volumeName"):
                what += f": {v.get('phase') or 'Pending'}"
                what += f", volume {v['volumeName']}" if v.get("volumeName") else ""
                what += f", class {v.get('storageClass') or '(none)'}" + (
                    f" ({v['bindingMode']})" if v.get("bindingMode") else "")
                if v.get("selectedNode"):
                    what += f", selected node {v['selectedNode']}"
            lines.append(what)
            for extra in ("binding", "problem"):
                if v.get(extra):
                    lines.append(f"      {v[extra]}")
    gang = doc.get("gang")
    if gang:
        lines.append("")
        if "error" in gang:
            lines.append(f"Gang: invalid gang spec: {gang['error']}")
        else:
            found = "" if gang.get("podGroupFound") is not False else "  (PodGroup object not found!)"
            lines.append(f"Gang {gang['name']} ({gang['source']}): minMember {gang.get('minMember')}, "
                         f"{gang['members']} member(s){found}")
            for label, field in (("bound", "bound"), ("waiting in Permit", "waitingOnPermit"),
                                 ("assumed", "assumed"), ("pending", "pending")):
                members = gang.get(field) or []
                lines.append(f"  {label:<18} {len(members):>3}  {' '.join(members)}".rstrip())
    preemption = doc.get("preemption")
    if preemption:
        lines.append("")
        lines.append(f"Preemption: {len(preemption['candidates'])} candidate node(s) from "
                     f"{preemption['simulatedNodes']} simulated of {preemption['potentialNodes']} where it might help; "
                     f"nominated {preemption['nominatedNode']}")
        lines.append(f"  order: {preemption['rule']}")
        for c in preemption["candidates"][:max_nodes]:
            victims = " ".join(c["victims"])
            lines.append(f"  {c['node']:<24} {c['victimCount']:>3} victim(s), highest priority "
                         f"{c['highestVictimPriority']}, {c['pdbViolations']} PDB violation(s): {victims}")
        if preemption["executed"]:
            done = (f"evicted on {preemption['evictedOn']}: {' '.join(preemption['evicted'])}"
                    if preemption["evictedOn"] else "no candidate could be evicted")
            refused = f" (refused by a PodDisruptionBudget on {', '.join(preemption['refusedOn'])})" \
                if preemption["refusedOn"] else ""
            lines.append(f"  outcome: {done}{refused}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    namespace, _, name = args.pod.rpartition("/")
    namespace = namespace or "default"
    if not name or "/" in namespace:
        print(f"loadline explain: expected <namespace>/<pod>, got {args.pod!r}", file=sys.stderr)
        return 2
    from manager.admission.explain import admission_line  # the pod's admission, from the API server

    admission = admission_line(namespace, name, args.kubeconfig, args.timeout)
    server, source = (args.server, "--server") if args.server else default_server()
    try:
        status, doc = fetch(server, namespace, name, args.timeout)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        print(
            f"loadline explain: cannot reach the scheduler at {server} (from {source}): {reason}\n"
            "  pass the scheduler's address with --server URL or set LOADLINE_SCHEDULER_URL",
            file=sys.stderr,
        )
        print(admission, file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**doc, "admission": admission}, indent=2))
        return 0 if status == 200 else 1
    if status != 200:
        print(f"loadline explain: {doc.get('error') or f'the scheduler answered {status}'}", file=sys.stderr)
        print(admission, file=sys.stderr)
        return 1
    print(render(doc, args.max_nodes) + "\n" + admission)
    return 0


if __name__ == "__main__":
    sys.exit(main())
