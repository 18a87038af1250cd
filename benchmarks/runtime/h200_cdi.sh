#!/usr/bin/env bash
# Generate the CDI spec on a real GPU node with the collection's generator
# (plugins/module_utils/_cdi.py, stdlib + optional pynvml; no Ansible needed),
# and, when an nvidia-ctk binary is given, compare it with `nvidia-ctk cdi generate`.
#
#   benchmarks/runtime/h200_cdi.sh OUT.yaml [NVIDIA_CTK]      (CDI_ROOT=DIR reads a copied tree instead of /)
#
# Writes OUT.yaml (ours), OUT.ctk.yaml (nvidia-ctk's, if given) and OUT.compare.json
# (device names, device nodes, mounts and hooks present in one spec and not the other).
set -euo pipefail
out=${1:?usage: $0 OUT.yaml [NVIDIA_CTK]}
ctk=${2:-}
here=$(cd "$(dirname "$0")/../.." && pwd)
python3 - "$here/plugins/module_utils/_cdi.py" "$out" <<'PY'
import importlib.util, json, os, sys, time
t0 = time.time()
spec_mod = importlib.util.spec_from_file_location("_cdi", sys.argv[1])
cdi = importlib.util.module_from_spec(spec_mod); spec_mod.loader.exec_module(cdi)
gpus, source, root = None, "proc", os.environ.get("CDI_ROOT", "/")
try:
    import pynvml
    if root != "/":
        raise RuntimeError("CDI_ROOT set: reading /proc only")
    gpus, source = cdi.gpus_from_nvml(pynvml, "/"), "nvml"
except Exception as e:  # no pynvml, or NVML unusable
    print("NVML not used: %s" % e, file=sys.stderr)
spec, info = cdi.build_spec(root=root, gpus=gpus)
with open(sys.argv[2], "w") as f:
    f.write(cdi.render(spec, sys.argv[2]))
info.update(source=source, seconds=round(time.time() - t0, 3), cdiVersion=spec["cdiVersion"])
print(json.dumps(info, indent=1))
PY
if [ -n "$ctk" ]; then
  ctk_out="${out%.*}.ctk.yaml"
  /usr/bin/time -f "nvidia-ctk cdi generate: %e s" "$ctk" cdi generate --output "$ctk_out" >/dev/null
  python3 - "$out" "$ctk_out" > "${out%.*}.compare.json" <<'PY'
import json, sys
import yaml  # PyYAML; install python3-yaml if missing
ours, theirs = (yaml.safe_load(open(p)) for p in sys.argv[1:3])
def facts(s):
    e = s.get("containerEdits", {})
    return {
        "cdiVersion": {s.get("cdiVersion")},
        "devices": {d["name"] for d in s.get("devices", [])},
        "device_nodes": {n["path"] for d in s.get("devices", []) for n in d["containerEdits"].get("deviceNodes", [])}
                        | {n["path"] for n in e.get("deviceNodes", [])},
        "mounts": {m["containerPath"] for m in e.get("mounts", [])},
        "hooks": {" ".join(h["args"][1:3]) for h in e.get("hooks", [])},
        "env": set(e.get("env", [])),
    }
a, b = facts(ours), facts(theirs)
print(json.dumps({k: {"only_ours": sorted(a[k] - b[k]), "only_nvidia_ctk": sorted(b[k] - a[k])} for k in a}, indent=1))
PY
  echo "comparison: ${out%.*}.compare.json"
fi
