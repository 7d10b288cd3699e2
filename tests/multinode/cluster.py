"""A two-node Ray cluster on this machine whose nodes share no directory (run as a subprocess).

    python tests/multinode/cluster.py CONFIG_JSON

CONFIG_JSON: ``{"gcs_port": P, "nodes": [{"name", "cwd", "env", "num_cpus", "num_gpus"}, ...]}``,
the first node being the head. Each node is a real raylet (``ray.cluster_utils.Cluster``)
started in its own working directory with its own environment (``env``: HOME, HF_HOME,
HF_ENDPOINT, TMPDIR), which its workers and their children inherit: as on separate
machines, nothing on one node can find a path of another by accident.

Prints ``{"address": ..., "nodes": {name: node_id}}`` as one JSON line, then reads
commands on stdin:

- ``actors``: prints the live trial workers as JSON, ``[{"node", "pid", "state"}]``;
- ``remove``: removes the last node (its raylet and every worker on it are killed, as when
  a machine is lost) and prints ``removed``.

End of input shuts the cluster down.
"""

from __future__ import annotations

import json
import os
import sys

from ray.cluster_utils import Cluster


def _node_args(spec: dict) -> dict:
    return {"num_cpus": spec["num_cpus"], "num_gpus": spec["num_gpus"], "env_vars": spec["env"]}


def _start(config: dict) -> tuple[Cluster, dict[str, object]]:
    head, *others = config["nodes"]
    # A raylet's processes start in the directory the raylet is started from.
    os.chdir(head["cwd"])
    cluster = Cluster(initialize_head=True, head_node_args={
        **_node_args(head), "gcs_server_port": config["gcs_port"], "include_dashboard": False})
    nodes: dict[str, object] = {head["name"]: cluster.head_node}
    for spec in others:
        os.chdir(spec["cwd"])
        nodes[spec["name"]] = cluster.add_node(**_node_args(spec))
    cluster.wait_for_nodes()
    return cluster, nodes


def _workers(cluster: Cluster) -> list[dict]:
    table = cluster.global_state.actor_table(None)
    return [{"node": a["Address"]["NodeID"], "pid": a["Pid"], "state": a["State"]}
            for a in table.values() if a["ActorClassName"].endswith("TrialWorker") and a["State"] != "DEAD"]


def main() -> None:
    config = json.loads(sys.argv[1])
    cluster, nodes = _start(config)
    print(json.dumps({"address": cluster.address,
                      "nodes": {name: n.node_id for name, n in nodes.items()}}), flush=True)  # type: ignore[attr-defined]
    last = list(nodes.values())[-1]
    try:
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == "actors":
                print(json.dumps(_workers(cluster)), flush=True)
            elif cmd == "remove":
                cluster.remove_node(last, allow_graceful=False)  # type: ignore[arg-type]
                print("removed", flush=True)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
