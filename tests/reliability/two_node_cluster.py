"""A two-node Ray cluster on this machine, for the node-loss test (run as a subprocess).

    python tests/reliability/two_node_cluster.py GCS_PORT

Starts a head and a second node (``ray.cluster_utils.Cluster``, real raylets), each with
2 logical GPUs, and prints ``{"address": ...}`` as one JSON line. Then reads commands on
stdin: ``remove`` removes the second node (its raylet and every worker on it are killed,
as when a machine is lost) and prints ``removed``; end of input shuts the cluster down.
"""

from __future__ import annotations

import json
import sys

from ray.cluster_utils import Cluster


def main() -> None:
    port = int(sys.argv[1])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 2, "gcs_server_port": port,
                                                            "include_dashboard": False})
    second = cluster.add_node(num_cpus=2, num_gpus=2)
    cluster.wait_for_nodes()
    print(json.dumps({"address": cluster.address}), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "remove":
                cluster.remove_node(second, allow_graceful=False)
                print("removed", flush=True)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
