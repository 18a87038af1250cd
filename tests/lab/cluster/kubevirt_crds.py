#!/usr/bin/env python3
"""KubeVirt's own CRDs for the cluster lane, taken from KubeVirt's published Go module (data only).

The API server of the lane must validate KubeVirt and VirtualMachine objects with KubeVirt's real
schema, so the CRDs come from the release itself, not from a hand-written copy:

* ``kubevirts.kubevirt.io``: ``manifests/generated/kv-resource.yaml`` of module ``kubevirt.io/kubevirt``
  (KubeVirt's generated CRD manifest), as it is;
* ``virtualmachines.kubevirt.io``: the ``virtualmachine`` openAPIV3Schema of
  ``pkg/virt-operator/resource/generate/components/validations_generated.go`` (a generated Go file
  whose map values are the schemas as YAML text in raw string literals; read as text, no Go is run),
  under the envelope virt-operator puts around it (``NewVirtualMachineCrd`` in crds.go and
  ``ApiSupportedVersions`` in kubevirt.io/api core/v1: group kubevirt.io, names virtualmachines /
  virtualmachine / VirtualMachine / vm, vms, versions v1 (storage) and v1alpha3 (deprecated), status
  subresource).

The module is fetched with ``go mod download`` (the Go module proxy; the checksum database verifies
it) into ``$GPUOPS_CACHE/go/mod``; the CRDs are written once per KubeVirt version to
``$GPUOPS_CACHE/cluster/kubevirt/<version>/`` with ``SOURCE.json`` (module, version, h1 sum, git
commit). A rerun with the files present is a no-op.

Usage: kubevirt_crds.py [--version v1.9.0] [--print-dir]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

import yaml

MODULE = "kubevirt.io/kubevirt"
DEFAULT_VERSION = os.environ.get("KUBEVIRT_VERSION", "v1.9.0")
KV_MANIFEST = "manifests/generated/kv-resource.yaml"
VALIDATIONS = "pkg/virt-operator/resource/generate/components/validations_generated.go"
FILES = ("kubevirts.kubevirt.io.json", "virtualmachines.kubevirt.io.json", "SOURCE.json")


def cache_dir():
    return os.environ.get("GPUOPS_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gpuops")


def out_dir(version):
    return os.path.join(cache_dir(), "cluster", "kubevirt", version)


def download(version):
    go = os.environ.get("GO") or ("go" if subprocess.run(["sh", "-c", "command -v go"], capture_output=True).returncode == 0
                                  else "/usr/local/go/bin/go")
    env = dict(os.environ, GOMODCACHE=os.path.join(cache_dir(), "go", "mod"), GOTOOLCHAIN="local",
               GOPROXY=os.environ.get("GOPROXY", "https://proxy.golang.org,direct"))
    r = subprocess.run([go, "mod", "download", "-json", "%s@%s" % (MODULE, version)], env=env, cwd=cache_dir(),
                       capture_output=True, text=True, check=False)
    info = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
    if r.returncode != 0 or info.get("Error") or not info.get("Dir"):
        raise SystemExit("go mod download %s@%s failed: %s %s" % (MODULE, version, info.get("Error", ""), r.stderr[-2000:]))
    return info


def raw_string(go_source, key):
    """The raw string literal value of ``"key": `...``` in a generated Go map (no backtick inside)."""
    m = re.search(r'\n\t"%s": `' % re.escape(key), go_source)
    if not m:
        raise SystemExit("%s: no %r entry" % (VALIDATIONS, key))
    end = go_source.index("`", m.end())
    return go_source[m.end():end]


def kubevirt_crd(module_dir):
    with open(os.path.join(module_dir, KV_MANIFEST)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    crds = [d for d in docs if d.get("kind") == "CustomResourceDefinition"
            and d["metadata"]["name"] == "kubevirts.kubevirt.io"]
    if len(crds) != 1:
        raise SystemExit("%s: no kubevirts.kubevirt.io CRD" % KV_MANIFEST)
    return crds[0]


def virtualmachine_crd(module_dir):
    with open(os.path.join(module_dir, VALIDATIONS)) as f:
        validation = yaml.safe_load(raw_string(f.read(), "virtualmachine"))
    schema = {"openAPIV3Schema": validation["openAPIV3Schema"]}
    columns = [
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Status", "description": "Human Readable Status", "type": "string", "jsonPath": ".status.printableStatus"},
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type=='Ready')].status"},
    ]

    def version(name, storage, deprecated=False):
        v = {"name": name, "served": True, "storage": storage, "schema": schema,
             "additionalPrinterColumns": columns, "subresources": {"status": {}}}
        if deprecated:
            v.update(deprecated=True, deprecationWarning="kubevirt.io/%s is now deprecated and will be removed in a "
                                                         "future release." % name)
        return v

    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "virtualmachines.kubevirt.io", "labels": {"kubevirt.io": ""}},
        "spec": {
            "group": "kubevirt.io", "scope": "Namespaced",
            "names": {"plural": "virtualmachines", "singular": "virtualmachine", "kind": "VirtualMachine",
                      "shortNames": ["vm", "vms"], "categories": ["all"]},
            "versions": [version("v1", True), version("v1alpha3", False, deprecated=True)],
        },
    }


def build(version):
    d = out_dir(version)
    if all(os.path.isfile(os.path.join(d, n)) for n in FILES):
        return d, False
    t0 = time.time()
    info = download(version)
    kv = kubevirt_crd(info["Dir"])
    vm = virtualmachine_crd(info["Dir"])
    os.makedirs(d, exist_ok=True)
    for name, obj in (("kubevirts.kubevirt.io.json", kv), ("virtualmachines.kubevirt.io.json", vm)):
        tmp = os.path.join(d, name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(obj, f, sort_keys=True)
        os.replace(tmp, os.path.join(d, name))
    source = {"module": MODULE, "version": version, "sum": info.get("Sum"), "origin": info.get("Origin"),
              "files": {"kubevirts.kubevirt.io.json": KV_MANIFEST,
                        "virtualmachines.kubevirt.io.json": VALIDATIONS + ' ("virtualmachine")'},
              "seconds": round(time.time() - t0, 1)}
    with open(os.path.join(d, "SOURCE.json"), "w") as f:
        json.dump(source, f, indent=1, sort_keys=True)
    return d, True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default=DEFAULT_VERSION)
    ap.add_argument("--print-dir", action="store_true", help="print the directory of the CRDs on stdout")
    args = ap.parse_args(argv)
    d, built = build(args.version)
    if args.print_dir:
        print(d)
    with open(os.path.join(d, "SOURCE.json")) as f:
        src = json.load(f)
    print("[kubevirt-crds] %s %s@%s (%s, commit %s) in %s" % (
        "built" if built else "cached", src["module"], src["version"], src["sum"],
        (src.get("origin") or {}).get("Hash", "?")[:12], d), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
