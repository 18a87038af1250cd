"""CLI: materialise every node root under --out (used by `make lab` and the cluster lane)."""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import noderoots  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--only", nargs="*", choices=sorted(noderoots.BUILDERS))
    p.add_argument("--shared", help="ignored; kept for compatibility")
    args = p.parse_args()
    names = args.only or sorted(noderoots.BUILDERS)
    for name in names:
        print(noderoots.build(name, os.path.join(args.out, name)))


if __name__ == "__main__":
    main()
