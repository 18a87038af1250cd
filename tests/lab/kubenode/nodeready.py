#!/usr/bin/env python3
"""Exit 0 when the Node is Ready (stdlib only: runs on the GPU machine too).

    nodeready.py KUBECONFIG NODE      prints the Node's conditions as JSON
"""
from __future__ import annotations

import json
import sys

from kubeapi import Api


def main(kubeconfig, node):
    n = Api(kubeconfig).get("/api/v1/nodes/" + node)
    conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
    print(json.dumps(conds, sort_keys=True))
    return 0 if conds.get("Ready") == "True" else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
