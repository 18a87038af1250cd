#!/usr/bin/env python3
"""The GPU cluster lane's steps and checks, run on the lent GPU machine by ``tests/lab/gpu/cluster.sh run`` once
the control plane is up (its environment: KN_*, GPUC_*, CLUSTER_DIR, ANSIBLE_*).

In order: the node joins (node.sh, kubelet on the GPU machine); site.yml with gpuops_k8s_api: true, twice (the
second run must change nothing); from the API server: the component pods Running and Ready, the Node's
allocatable nvidia.com/gpu from NVIDIA's device plugin DaemonSet, GFD's labels (its output file, NFD's
record of the labels it set, the Node) against ours (gpu_facts); a Deployment asking for nvidia.com/gpu: 1
placed by the scheduler runs the CUDA check; the guide's `kubectl run ... nvidia-smi` check; time-slicing
switched live through the device plugin's config label (1 -> 4 -> 1) with four pods at once on the one GPU;
MPS through NVIDIA's MPS control daemon (config mps2: two pods as MPS clients at once); the validator role
(NVIDIA's nvidia-validator in its DaemonSet, its workload pods, the role's Job, the node labelled validated);
the doctor on the healthy cluster, then on a device plugin pod that cannot start and a node without its
workload label (each named, with its fix, and repaired by site.yml); NVIDIA's MIG manager v0.15.0 on the node
(the default config all-disabled it already has, reported success; then a config it lacks, reported failed,
named by the doctor and fixed through the inventory); driver_upgrade.yml on the node; cluster
uninstall and the toolkit's uninstall (the Node's labels and containerd's config as before); every daemon
stopped; the GPU's settings unchanged.  GPUC_SKIP leaves steps out (two run calls on one loan).

Each check is a row of $GPUC_OUT/checks.tsv (name, PASS/FAIL, detail); summary.json holds the commit, date,
GPU, versions and checks.  Exit status 0 only when every check passed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import yaml
from kubernetes import client, config

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from compare_labels import compare  # noqa: E402  (tests/lab/gpu: the host lane's comparison with GFD)

ROOT = os.environ["GPUC_ROOT"]
OUT = os.environ["GPUC_RESULTS"]
KIT = os.environ["GPUC_KIT"]
KCFG = os.environ["KN_KUBECONFIG"]
KN_DIR = os.environ["KN_DIR"]
KN_BIN = os.environ["KN_BIN"]
NODE = os.environ.get("KN_NODE", "gpu-0")
NS = "gpu-operator"
INV = os.path.join(ROOT, "tests", "lab", "gpu", "cluster", "hosts.yml")
VARS = os.path.join(ROOT, "tests", "lab", "gpu", "cluster", "vars.yml")
NODE_SH = os.path.join(ROOT, "tests", "lab", "kubenode", "node.sh")
POLICY = os.path.join(ROOT, "tests", "lab", "kubenode", "host-network-policy.yaml")
# GFD v0.18+ writes its labels into this NodeFeature object (the gfd role's default, as the GPU Operator runs it)
GFD_NODEFEATURE = "nvidia-features-for-" + NODE
# the image the guide's check names, made on the node from its own files (no registry there)
CUDA_IMAGE = "nvcr.io/nvidia/cuda:12.6.0-base-ubuntu22.04"
APPS = ("nfd-master", "nfd-worker", "gpu-feature-discovery", "nvidia-device-plugin-daemonset")
SETTINGS_Q = ("uuid,name,pci.bus_id,driver_version,mig.mode.current,mig.mode.pending,compute_mode,persistence_mode,"
              "ecc.mode.current,power.limit,clocks.applications.graphics,clocks.applications.memory")
T0 = time.time()
# the seconds lane.py has (cluster.sh kills it at GPUC_BUDGET): steps that do not fit are skipped, each a failed
# check that says so, and the uninstall, the teardown and the summary always run
BUDGET = int(os.environ.get("GPUC_BUDGET", "500"))
# what the uninstall, the teardown and finish() take: cluster.yml absent 177 s on an H100 (commit ee84ea0), when every
# object was deleted in the foreground (~5 s each before the garbage collector let it go: uninstall-trace.tsv);
# 72 s on the kubelet node lane with background deletion and a wait for the pods; the toolkit's uninstall 10 s, the
# teardown 16 s
UNINSTALL_S = 130
# steps left out of this run (GPUC_SKIP, comma-separated: timeslice, mps, validator, mig-manager, doctor, driver-upgrade,
# uninstall), e.g. two run calls on one loan, each within the call's 10 minutes; without the uninstall (a loan
# with little device time left) the teardown still stops every daemon and compares the GPU's settings
SKIP = set(filter(None, os.environ.get("GPUC_SKIP", "").split(",")))
# steps run only when asked (GPUC_ONLY, comma-separated): dra (the node moved to the DRA driver, part d of the kit)
ONLY = set(filter(None, os.environ.get("GPUC_ONLY", "").split(",")))
if "uninstall" in SKIP:
    UNINSTALL_S = 20
CHECKS = []
STATE = {}  # what finish() reports: the GPU as read before anything ran


def time_for(step, seconds):
    """Whether `seconds` more fit before the budget, the uninstall's share kept; else a failed check says so."""
    left = BUDGET - (time.time() - T0) - UNINSTALL_S
    if left >= seconds:
        return True
    check(step + "-not-run", False, "%d s left of GPUC_BUDGET=%d before the uninstall, the step needs ~%d s"
          % (left, BUDGET, seconds))
    return False


def say(msg):
    print("[gpu-cluster %6.1fs] %s" % (time.time() - T0, msg), flush=True)


def check(name, ok, detail=""):
    CHECKS.append({"name": name, "ok": bool(ok), "detail": str(detail)[:2000]})
    with open(os.path.join(OUT, "checks.tsv"), "a", encoding="utf-8") as f:
        f.write("%s\t%s\t%s\n" % (name, "PASS" if ok else "FAIL", str(detail).replace("\n", " ")[:2000]))
    say("CHECK %s %s -- %s" % ("PASS" if ok else "FAIL", name, str(detail)[:400]))
    return bool(ok)


def sh(args, timeout=120, log=None, env=None, check_rc=False):
    t = time.time()
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timed out"
    if log:
        with open(os.path.join(OUT, log), "w", encoding="utf-8") as f:
            f.write("$ %s\n%s\n%s\n[rc=%d, %.1f s]\n" % (" ".join(args), out, err, rc, time.time() - t))
    if check_rc and rc:
        raise RuntimeError("%s failed (rc=%d): %s %s" % (args[0], rc, out[-2000:], err[-2000:]))
    return rc, out, err


def recap(out, key):
    return sum(int(m) for m in re.findall(r"\s%s=(\d+)" % key, out.split("PLAY RECAP")[-1])) if "PLAY RECAP" in out else -1


def kit_versions():
    """What part b of the kit was built with (cluster.sh pack's versions.txt): name -> version."""
    with open(os.path.join(KIT, "b", "versions.txt"), encoding="utf-8") as f:
        return dict(kv.split("=", 1) for kv in f.read().split() if "=" in kv)


def pinned(role):
    return sh(["python3", os.path.join(ROOT, "docs", "render_data.py"), "--get", "components." + role])[1].strip()


# the device plugin and GFD images run at the version the kit built: the roles' pin (built from NVIDIA's repository
# at that tag), else the newest the Go module proxy serves, passed to site.yml as a user would override an image
DP_BUILT = kit_versions()["k8s-device-plugin"]
IMAGE_VARS = [] if DP_BUILT == pinned("device_plugin") == pinned("gfd") else ["-e", json.dumps({
    "%s_image" % r: {"repository": "nvcr.io/nvidia", "image": "k8s-device-plugin", "version": DP_BUILT}
    for r in ("device_plugin", "gfd")})]


# extra vars of every later playbook once a step added a component (the validator, the MIG manager: the uninstall
# removes them too), with the options the step gave it
COMPONENT_VARS = []


def add_component(lane_vars, role, **options):
    added = STATE.setdefault("added", {"roles": [], "vars": {}})
    added["roles"].append(role)
    added["vars"].update(options)
    COMPONENT_VARS[:] = ["-e", json.dumps(dict(added["vars"], gpuops_cluster_components=
                                               lane_vars["gpuops_cluster_components"] + added["roles"]))]
def wanted(step, seconds):
    if step in SKIP:
        say("step %s left out (GPUC_SKIP)" % step)
        return False
    return time_for(step, seconds)


def playbook(name, book, *extra, timeout=300):
    t = time.time()
    if "uninstalled" not in STATE:  # a step's playbook never eats the uninstall's share of the budget
        timeout = int(max(30, min(timeout, BUDGET - (t - T0) - UNINSTALL_S - 10)))
    rc, out, err = sh(["ansible-playbook", "-i", INV, os.path.join(ROOT, "playbooks", book), "-e", "@" + VARS,
                       *IMAGE_VARS, *COMPONENT_VARS, *extra],
                      timeout=timeout, log=name + ".log")
    with open(os.path.join(OUT, "playbook-times.tsv"), "a", encoding="utf-8") as f:
        f.write("%s\t%d\t%.1f s\n" % (name, rc, time.time() - t))
    return rc, out, recap(out, "changed")


def node_sh(*args):
    return sh(["bash", NODE_SH, *args], timeout=240, log="node-sh-%s.log" % args[0])


def kubectl(*args, timeout=60):
    return sh(["kubectl", "--kubeconfig", KCFG, *args], timeout=timeout)


def wait(what, fn, timeout, every=1.0):
    """Poll ``fn`` (returns a truthy result when done) for up to ``timeout`` s; the last result either way.  Before
    the uninstall, never past the budget less the uninstall's share (a step that hangs cannot eat the uninstall)."""
    if "uninstalled" not in STATE:
        timeout = max(5, min(timeout, BUDGET - (time.time() - T0) - UNINSTALL_S))
    deadline = time.time() + timeout
    while True:
        try:
            r = fn()
        except client.ApiException as e:
            r = None
            say("%s: API %s" % (what, e.status))
        if r or time.time() > deadline:
            return r
        time.sleep(every)


config.load_kube_config(KCFG)
core = client.CoreV1Api()
apps = client.AppsV1Api()
custom = client.CustomObjectsApi()


def node():
    return core.read_node(NODE)


def allocatable_gpu():
    return (node().status.allocatable or {}).get("nvidia.com/gpu", "0")


def component_pods():
    out = {}
    for p in core.list_namespaced_pod(NS, field_selector="spec.nodeName=" + NODE).items:
        if p.metadata.deletion_timestamp is None:
            out[(p.metadata.labels or {}).get("app")] = p
    return out


def ready(p):
    return p.status.phase == "Running" and all(s.ready for s in p.status.container_statuses or [])


def restarts(p):
    return sum(s.restart_count for s in (p.status.init_container_statuses or []) + (p.status.container_statuses or []))


def pods_ready(want=APPS):
    now = component_pods()
    return now if all(a in now and ready(now[a]) for a in want) else None


def pod_phase(name, ns="default"):
    try:
        return core.read_namespaced_pod(name, ns).status.phase
    except client.ApiException:
        return None


def gpu_settings():
    return sh(["nvidia-smi", "--query-gpu=" + SETTINGS_Q, "--format=csv,noheader"])[1].strip()


def our_labels(config=""):
    """gpu_facts' labels for this node (what the cluster stage applies), under a device plugin config or none:
    the host lane's playbook (tests/lab/h200/labels.yml) on this inventory."""
    dest = os.path.join(OUT, "labels-ours%s.json" % ("-" + config if config else ""))
    # GFD runs with the gfd role's MIG_STRATEGY env (gpuops_mig_strategy), which overrides the config's flags
    with open(VARS, encoding="utf-8") as f:
        strategy = yaml.safe_load(f).get("gpuops_mig_strategy", "single")
    args = ["-e", "lane_host=" + NODE, "-e", "dest=" + dest, "-e", "lane_mig_strategy=" + strategy] + (
        ["-e", "lane_sharing_config=" + config] if config else [])
    sh(["ansible-playbook", "-i", INV, os.path.join(ROOT, "tests", "lab", "h200", "labels.yml"), "-e", "@" + VARS,
        *args], timeout=120, log="labels-ours%s.log" % ("-" + config if config else ""), check_rc=True)
    with open(dest, encoding="utf-8") as f:
        return json.load(f)


def pod_logs(p):
    """Every container's log of a pod as kubelet wrote it (the tail of each), for a check's detail."""
    d = os.path.join(KN_DIR, "pod-logs", "%s_%s_%s" % (p.metadata.namespace, p.metadata.name, p.metadata.uid))
    out = {}
    for c in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        text = ""
        for f in sorted(os.listdir(os.path.join(d, c))):
            with open(os.path.join(d, c, f), encoding="utf-8", errors="replace") as fh:
                text += fh.read()
        out[c] = text[-1500:]
    return out


def api_log(name, ns="default"):
    """A pod's log through the API server (which asks the kubelet at the Node's address); "" when it cannot say,
    the reason in the lane's log -- a check then fails on what the log lacks, the run goes on."""
    try:
        return core.read_namespaced_pod_log(name, ns)
    except client.ApiException as e:
        say("log of %s/%s through the API server: %s %s" % (ns, name, e.status, (e.body or "")[:200]))
        return ""


def gfd_labels():
    """The labels GFD published: spec.labels of its NodeFeature object ({} while there is none)."""
    try:
        obj = custom.get_namespaced_custom_object("nfd.k8s-sigs.io", "v1alpha1", NS, "nodefeatures", GFD_NODEFEATURE)
    except client.ApiException as e:
        if e.status == 404:
            return {}
        raise
    return dict((obj.get("spec") or {}).get("labels") or {})


def label_diff(want, have, keys):
    return {k: (want.get(k), have.get(k)) for k in sorted(keys) if want.get(k) != have.get(k)}


def gfd_vs_ours(name, gfd, ours, what):
    """GFD's nvidia.com/* labels against ours (compare_labels: the timestamp aside; gpu.present is the operator's)."""
    r = compare(gfd, ours, ignore=("nvidia.com/gpu.present",))
    json.dump(r, open(os.path.join(OUT, name + ".json"), "w"), indent=1)
    return check(name, r["counts"]["gfd"] > 0 and r["match"], "%s: %s; only GFD %s, only ours %s, different %s"
                 % (what, r["counts"], r["only_gfd"], r["only_ours"], r["different"]))


def main():
    os.makedirs(OUT, exist_ok=True)
    open(os.path.join(OUT, "checks.tsv"), "w").close()
    settings_before = STATE["settings"] = gpu_settings()
    uuid = STATE["uuid"] = settings_before.split(",")[0].strip()
    model = STATE["model"] = settings_before.split(",")[1].strip()
    say("GPU %s (%s)" % (uuid, settings_before))
    sh(["sh", "-c", "uname -a; cat /etc/os-release; nproc; free -g; nvidia-smi; cat %s/b/versions.txt" % KIT],
       log="node-info.txt")

    # ---- the node joins the cluster --------------------------------------------------------------------------
    with open(POLICY, encoding="utf-8") as f:
        for doc in yaml.safe_load_all(f):
            plural = {"MutatingAdmissionPolicy": "mutatingadmissionpolicies",
                      "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings"}[doc["kind"]]
            custom.create_cluster_custom_object("admissionregistration.k8s.io", "v1", plural, doc)
    with open(VARS, encoding="utf-8") as f:
        lane_vars = yaml.safe_load(f)
    dp_version = DP_BUILT
    nfd_version = pinned("nfd")
    # the component images that ran, by role: what tests/unit/meta/test_gpu_cluster_proof.py holds against the pins
    STATE["components"] = {"device_plugin": dp_version, "gfd": dp_version, "nfd": nfd_version}
    os.environ["KN_IMAGES"] = "device_plugin=%s nfd=%s" % (dp_version, nfd_version)
    os.environ["KN_REGISTRY"] = lane_vars["gpuops_registry"]
    rc, _, err = node_sh("images")
    libs = [p for p in ("/usr/local/nvidia/lib64/libcuda.so.1", "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
                        "/usr/local/nvidia/bin/nvidia-smi", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/bin/nvidia-smi")
            if os.path.exists(p)]
    STATE["libs"] = libs
    rc2, _, _ = sh(["python3", os.path.join(ROOT, "tests", "lab", "gpu", "node", "mkimage.py"), "--name", CUDA_IMAGE,
                    "--pause", os.path.join(KN_BIN, "pause"), "--busybox", os.path.join(KN_BIN, "busybox"),
                    "--cuda-check", os.path.join(ROOT, "plugins", "module_utils", "_cuda.py"),
                    "--out", os.path.join(KN_DIR, "images", "cuda.tar"), "--libs-for", *libs], log="mkimage-cuda.log")
    check("images-made", rc == 0 and rc2 == 0, "component images (device plugin/GFD %s, NFD %s) and %s (rc %d/%d) %s"
          % (dp_version, nfd_version, CUDA_IMAGE, rc, rc2, err[-300:]))
    rc, _, err = node_sh("start")
    n = node()
    check("node-joins-ready", rc == 0 and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions),
          "kubelet %s, containerd %s on the GPU machine; %s" % (n.status.node_info.kubelet_version,
                                                              n.status.node_info.container_runtime_version, err[-300:]))
    labels_before = dict(node().metadata.labels or {})
    cfg = os.path.join(KN_DIR, "containerd", "config.toml")
    with open(cfg, "rb") as f:
        containerd_before = f.read()
    # what the uninstall compares with, also when a step breaks (the except path below)
    STATE["before"] = (labels_before, containerd_before)

    # ---- site.yml, twice --------------------------------------------------------------------------------------
    rc, out, changed = playbook("site-1", "site.yml")
    check("site-first-run", rc == 0, "rc=%d changed=%d" % (rc, changed))
    if rc:
        return finish()
    crio_cdi(uuid)
    got = wait("component pods", lambda: pods_ready() and all(restarts(p) == 0 for p in component_pods().values()),
               int(os.environ.get("GPUC_POD_WAIT", "90")))
    pods = component_pods()
    healthy = check("component-pods-running", got and all(restarts(p) == 0 for p in pods.values()),
                    {a: (pods[a].status.phase, ready(pods[a]), restarts(pods[a])) if a in pods else "no pod" for a in APPS})
    logs = {a: pod_logs(p) for a, p in pods.items()}
    json.dump(logs, open(os.path.join(OUT, "component-pod-logs.json"), "w"), indent=1)
    if not healthy:  # what the containers said, then straight to the uninstall and the teardown
        say("component containers' logs: %s" % json.dumps({a: {c: t[-600:] for c, t in v.items()} for a, v in logs.items()
                                                            if a in ("gpu-feature-discovery", "nvidia-device-plugin-daemonset")}))
        diagnose(lane_vars)
        if os.environ.get("GPUC_DIAGNOSE_ONLY") == "1":  # a short loan: the diagnosis, then the teardown only
            return finish()
        return uninstall(labels_before, containerd_before)
    alloc = wait("allocatable", lambda: allocatable_gpu() == "1", 90)
    n = node()
    check("allocatable-gpu-1", alloc, "Node capacity %s allocatable %s (NVIDIA's device plugin %s, DaemonSet)"
          % ((n.status.capacity or {}).get("nvidia.com/gpu"), (n.status.allocatable or {}).get("nvidia.com/gpu"),
             dp_version))
    rc, out, changed = playbook("site-2", "site.yml")
    check("site-second-run-changed-0", rc == 0 and changed == 0, "rc=%d changed=%d" % (rc, changed))

    # ---- labels: GFD's (its file, NFD's record, the Node) against ours ---------------------------------------------
    ours = our_labels()
    gfd = wait("GFD output", gfd_labels, 60) or {}
    n = node()
    node_labels = dict(n.metadata.labels or {})
    nfd_set = set((n.metadata.annotations or {}).get("nfd.node.kubernetes.io/feature-labels", "").split(","))
    gfd_keys = {k for k in gfd if k.startswith("nvidia.com/")}
    nfd_names = {k if "/" in k else "feature.node.kubernetes.io/" + k for k in nfd_set if k}
    json.dump({"gfd": gfd, "ours": ours, "node": node_labels, "nfd_set": sorted(nfd_names)},
              open(os.path.join(OUT, "labels.json"), "w"), indent=1, sort_keys=True)
    gfd_vs_ours("gfd-labels-equal-ours", gfd, ours, "GFD's DaemonSet (its NodeFeature object) against gpu_facts")
    # GFD rewrites its timestamp every sleep interval: the file may be newer than what NFD last put on the Node
    d_node = label_diff(gfd, node_labels, gfd_keys - {"nvidia.com/gfd.timestamp"})
    check("gfd-labels-on-node", gfd_keys and not d_node and gfd_keys <= nfd_names,
          "the Node carries every GFD label, set through NFD (%d of %d in NFD's record); differences: %s"
          % (len(gfd_keys & nfd_names), len(gfd_keys), d_node))
    nfd_ours = {k: v for k, v in ours.items() if k.startswith("feature.node.kubernetes.io/")}
    d_nfd = label_diff(nfd_ours, node_labels, nfd_ours)
    check("nfd-labels-equal-ours", nfd_ours and not d_nfd, "%d feature.node.kubernetes.io labels of ours on the Node as "
          "NFD's worker set them; differences (ours, node): %s" % (len(nfd_ours), d_nfd))

    # ---- a Deployment the scheduler places, and the guide's check --------------------------------------------------
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "cuda-check", "namespace": "default"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "cuda-check"}},
                    "template": {"metadata": {"labels": {"app": "cuda-check"}},
                                 "spec": {"containers": [{"name": "cuda", "image": CUDA_IMAGE, "command": [
                                     "sh", "-c", "nvidia-smi -L; python3 /check/_cuda.py && echo CUDA-CHECK-OK; sleep 3600"],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
    apps.create_namespaced_deployment("default", dep)

    def dep_log():
        ps = core.list_namespaced_pod("default", label_selector="app=cuda-check").items
        if not ps or ps[0].status.phase != "Running":
            return None
        log = api_log(ps[0].metadata.name)
        return (ps[0], log) if "CUDA-CHECK-OK" in log or "mismatch" in log else None
    got = wait("cuda-check", dep_log, 120, 2)
    if got:
        p, log = got
        open(os.path.join(OUT, "pod-cuda-check.log"), "w").write(log)
        check("deployment-cuda-check", "CUDA-CHECK-OK" in log and uuid in log and p.spec.node_name == NODE,
              "pod %s placed on %s by %s; %s" % (p.metadata.name, p.spec.node_name, p.spec.scheduler_name,
                                                  " | ".join(log.strip().splitlines()[-4:])))
    else:
        check("deployment-cuda-check", False, "no Running pod with the check's output in 120 s: %s"
              % [(p.metadata.name, p.status.phase, p.status.conditions and [c.message for c in p.status.conditions])
                 for p in core.list_namespaced_pod("default", label_selector="app=cuda-check").items])
    apps.delete_namespaced_deployment("cuda-check", "default")
    wait("cuda-check gone", lambda: not core.list_namespaced_pod("default", label_selector="app=cuda-check").items, 60)

    overrides = json.dumps({"spec": {"restartPolicy": "Never", "containers": [{
        "name": "nvidia-smi", "image": CUDA_IMAGE, "command": ["nvidia-smi"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    rc, out, err = kubectl("run", "nvidia-smi", "--restart=Never", "--image=" + CUDA_IMAGE, "--overrides=" + overrides)
    wait("nvidia-smi pod", lambda: pod_phase("nvidia-smi") in ("Succeeded", "Failed"), 90)
    rc2, logs, err2 = kubectl("logs", "nvidia-smi")
    open(os.path.join(OUT, "guide-nvidia-smi.log"), "w").write(out + err + logs + err2)
    check("guide-kubectl-run-nvidia-smi", rc == 0 and rc2 == 0 and pod_phase("nvidia-smi") == "Succeeded" and model in logs,
          "kubectl run nvidia-smi (the guide's section 3.3 command) && kubectl logs: %s"
          % " | ".join(line.strip() for line in logs.splitlines() if "NVIDIA" in line or "MiB" in line)[:600])
    kubectl("delete", "pod", "nvidia-smi", "--wait=false")

    if wanted("timeslice", 110):
        timeslice()

    if wanted("mps", 130):
        mps_step()

    if wanted("validator", 200):
        validator_step(lane_vars, uuid)

    if wanted("mig-manager", 100):
        mig_manager_step(lane_vars)

    if wanted("doctor", 150):
        doctor()

    if wanted("driver-upgrade", 90):
        driver_upgrade()

    if "dra" in ONLY and wanted("dra", 240):
        dra_step(lane_vars, uuid)
    return uninstall(labels_before, containerd_before)


def pods_at_once(prefix, n, sleep, during=None):
    """``n`` pods ``<prefix>-<i>`` asking for nvidia.com/gpu: 1 each run the CUDA check and sleep; ``during()`` is
    polled while they run (its last result returned).  Returns (whether all ran it with 0 mismatches and overlapped
    in time, what each did: phase, start, end, zero mismatches, its CUDA_MPS_PIPE_DIRECTORY if any, and what
    ``during`` gave)."""
    names = ["%s-%d" % (prefix, i) for i in range(n)]
    for name in names:
        core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                               "spec": {"restartPolicy": "Never", "containers": [{
                                                   "name": "cuda", "image": CUDA_IMAGE, "command": [
                                                       "sh", "-c", "date +START%%s.%%N; env | grep ^CUDA_MPS; "
                                                       "python3 /check/_cuda.py; sleep %d; date +END%%s.%%N" % sleep],
                                                   "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    seen = wait("%s while they run" % prefix, during, 60, 1) if during else None
    wait("%s pods" % prefix, lambda: all(pod_phase(x) in ("Succeeded", "Failed") for x in names), 120, 2)
    spans = {}
    for name in names:
        log = api_log(name) if pod_phase(name) else ""
        open(os.path.join(OUT, "pod-%s.log" % name), "w").write(log)
        s_ = re.search(r"START(\d+\.\d+)", log)
        e_ = re.search(r"END(\d+\.\d+)", log)
        spans[name] = {"phase": pod_phase(name), "start": s_ and float(s_.group(1)), "end": e_ and float(e_.group(1)),
                       "zero_mismatches": " 0 mismatches" in log,
                       "pipe": (re.findall(r"^CUDA_MPS_PIPE_DIRECTORY=(.*)$", log, re.M) or [None])[0]}
    together = all(v["start"] and v["end"] and v["zero_mismatches"] and v["phase"] == "Succeeded" for v in spans.values()) \
        and max(v["start"] for v in spans.values()) < min(v["end"] for v in spans.values())
    for name in names:
        core.delete_namespaced_pod(name, "default")
    return together, dict(spans, during=seen)


def timeslice():
    """Time-slicing switched live through the device plugin's config label (1 -> 4 -> 1), four pods at once."""
    kubectl("label", "node", NODE, "nvidia.com/device-plugin.config=timeslice4", "--overwrite")
    a4 = wait("allocatable 4", lambda: allocatable_gpu() == "4", 120, 2)
    check("timeslice-allocatable-4", a4, "label nvidia.com/device-plugin.config=timeslice4: allocatable %s"
          % allocatable_gpu())
    ts_ours = our_labels("timeslice4")
    wait("GFD sharing labels", lambda: gfd_labels().get("nvidia.com/gpu.replicas") == "4", 90, 2)
    gfd_vs_ours("timeslice-gfd-labels-equal-ours", gfd_labels(), ts_ours,
                "GFD relabelled live by its config-manager (time-slicing, replicas 4) against gpu_facts with that config")
    together, spans = pods_at_once("ts", 4, 15)
    check("timeslice-four-pods-at-once", together, spans)
    kubectl("label", "node", NODE, "nvidia.com/device-plugin.config=default", "--overwrite")
    a1 = wait("allocatable 1", lambda: allocatable_gpu() == "1", 120, 2)
    check("timeslice-back-to-1", a1, "label back to default: allocatable %s" % allocatable_gpu())
    kubectl("label", "node", NODE, "nvidia.com/device-plugin.config-")


def step_image(role, image, version, what, built, *args):
    """A step's component image made on the node (mkimage.py: busybox and ``args``) and imported into its
    containerd under the name the role renders; the check <role>-image says so.  True when it is there."""
    name = role.replace("_", "-")
    tar = os.path.join(KN_DIR, "images", name + ".tar")
    rc, _, err = sh(["python3", os.path.join(ROOT, "tests", "lab", "gpu", "node", "mkimage.py"), "--name", image,
                     "--busybox", os.path.join(KN_BIN, "busybox"), *args, "--out", tar], log="mkimage-%s.log" % name)
    rc2, _, err2 = sh([os.path.join(KN_BIN, "ctr"), "--address", os.path.join(KN_DIR, "run", "containerd.sock"),
                       "-n", "k8s.io", "images", "import", tar], timeout=120, log="import-%s.log" % name)
    STATE.setdefault("components", {})[role] = version
    check(name + "-image", rc == 0 and rc2 == 0, "%s: %s %s (%s) (rc %d/%d) %s %s"
          % (image, what, version, built, rc, rc2, err[-200:], err2[-200:]))
    return rc == 0 and rc2 == 0


def validator_step(lane_vars, uuid):
    """The validator role on the live node, added to the cluster's components as a user would (cluster.yml):
    NVIDIA's nvidia-validator v26.7.0 (built from its source, part c of the kit) in the validator DaemonSet's init
    containers -- driver (found through validator_driver_install_dir: this machine's driver lives under
    /usr/local/nvidia, outside the places NVIDIA's validator searches), toolkit, cuda and plugin, the last two
    with their workload pods -- and the role's validation Job (driver check, then the CUDA check on one GPU the
    device plugin allocates); the node labelled nvidia.com/gpu.validated=true."""
    part_c = os.environ.get("GPUC_CRIO_BIN", "")
    binary = os.path.join(part_c, "nvidia-validator")
    manifests = os.path.join(part_c, "validator-manifests")
    if not (part_c and os.path.exists(binary) and os.path.isdir(manifests)):
        check("validator-not-run", False, "no nvidia-validator in the staged part c (%s): build the kit with "
              "GPU_OPERATOR_GIT and carry .gpu-cluster/c in a stage call" % (part_c or "not staged"))
        return
    version = pinned("validator")
    ok = step_image("validator", "%s/nvidia/gpu-operator:%s" % (lane_vars["gpuops_registry"], version), version,
                    "NVIDIA's nvidia-validator", kit_versions().get("gpu-operator-validator"),
                    "--pause", os.path.join(KN_BIN, "pause"),
                    "--cuda-check", os.path.join(ROOT, "plugins", "module_utils", "_cuda.py"),
                    "--validator", binary, "--validator-manifests", manifests, "--libs-for", *STATE.get("libs", []))
    if not ok:
        return
    add_component(lane_vars, "validator")
    # never past the budget's uninstall share (playbook()): a validator that hangs is cut, the uninstall still runs
    rc, out, changed = playbook("validator", "cluster.yml")
    check("validator-role", rc == 0, "cluster.yml with validator in gpuops_cluster_components: rc=%d changed=%d; %s"
          % (rc, changed, " | ".join(line.strip() for line in out.splitlines() if "fatal" in line or "FAILED" in line)[:600]))
    pods = component_pods()
    ds_pod = pods.get("nvidia-operator-validator")
    inits = {s.name: (s.state.terminated.exit_code if s.state.terminated else None)
             for s in ((ds_pod.status.init_container_statuses or []) if ds_pod else [])}
    logs = pod_logs(ds_pod) if ds_pod else {}
    json.dump(logs, open(os.path.join(OUT, "validator-pod-logs.json"), "w"), indent=1)
    vdir = "/run/nvidia/validations"
    ready_files = sorted(os.listdir(vdir)) if os.path.isdir(vdir) else []
    driver_ready = open(os.path.join(vdir, "driver-ready")).read() if "driver-ready" in ready_files else ""
    check("validator-daemonset-ready", ds_pod is not None and ready(ds_pod) and inits and all(v == 0 for v in inits.values())
          and "IS_HOST_DRIVER=" in driver_ready,
          "pod %s ready %s; init containers' exit codes %s; %s holds %s; driver-ready: %s" % (
              ds_pod and ds_pod.metadata.name, ds_pod is not None and ready(ds_pod), inits, vdir, ready_files,
              driver_ready.replace("\n", " ")))
    work = {}
    for p in core.list_namespaced_pod(NS).items:
        app = (p.metadata.labels or {}).get("app", "")
        if app in ("nvidia-cuda-validator", "nvidia-device-plugin-validator"):
            text = "".join(pod_logs(p).values())
            work[app] = (p.metadata.name, p.status.phase, "0 mismatches" in text)
    check("validator-workload-pods", work.get("nvidia-cuda-validator", (0, 0, 0))[1:] == ("Succeeded", True)
          and work.get("nvidia-device-plugin-validator", (0, 0, 0))[1:] == ("Succeeded", True),
          "the validator's CUDA and plugin workload pods (vectorAdd: the collection's CUDA check): %s" % work)
    jobs = client.BatchV1Api().list_namespaced_job(NS, label_selector="app=gpuops-validation").items
    job_logs = ""
    for p in core.list_namespaced_pod(NS, label_selector="app=gpuops-validation").items:
        job_logs += "".join(pod_logs(p).values())
    open(os.path.join(OUT, "validator-job.log"), "w").write(job_logs)
    check("validator-job-complete", len(jobs) == 1 and (jobs[0].status.succeeded or 0) == 1 and uuid in job_logs
          and "0 mismatches" in job_logs,
          "Job %s succeeded %s; its pod's log: %s" % (jobs and jobs[0].metadata.name, jobs and jobs[0].status.succeeded,
                                                        " | ".join(job_logs.strip().splitlines()[-4:])[:600]))
    label = (node().metadata.labels or {}).get("nvidia.com/gpu.validated")
    check("validator-node-validated", label == "true", "nvidia.com/gpu.validated=%s" % label)


DBUS_SOCKET = "/run/dbus/system_bus_socket"
DBUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="root"/>
    <allow send_destination="*" eavesdrop="false"/>
    <allow receive_sender="*"/>
    <allow own="*"/>
  </policy>
</busconfig>
""" % DBUS_SOCKET


def system_bus(part_c):
    """The host's D-Bus system bus, which NVIDIA's MIG manager v0.15 connects to before every reconfiguration (even
    one with nothing to change): this machine's, else Debian's dbus-daemon (part c) on its socket, stopped by
    finish().  Returns what was found or started."""
    if os.path.exists(DBUS_SOCKET):
        return "the machine's own (%s)" % DBUS_SOCKET
    conf = os.path.join(KN_DIR, "dbus-system.conf")
    with open(conf, "w", encoding="utf-8") as f:
        f.write(DBUS_CONFIG)
    os.makedirs(os.path.dirname(DBUS_SOCKET), exist_ok=True)
    log = open(os.path.join(OUT, "dbus-daemon.log"), "w")
    STATE["dbus"] = subprocess.Popen([os.path.join(part_c, "dbus-daemon", "dbus-daemon"), "--config-file=" + conf,
                                      "--nofork", "--nopidfile"], stdout=log, stderr=subprocess.STDOUT)
    wait("D-Bus socket", lambda: os.path.exists(DBUS_SOCKET), 10, 0.2)
    return "Debian's dbus-daemon started on %s (%s)" % (DBUS_SOCKET, "up" if os.path.exists(DBUS_SOCKET) else "NOT up")


def mig_manager_step(lane_vars):
    """NVIDIA's MIG manager v0.15.0 (built from its source, part c) in the mig_manager role's DaemonSet, added to the
    cluster's components as a user would: node_labels gives the MIG-capable node the default config all-disabled,
    which the node already has (MIG off: nothing changes), and the MIG manager reports success in
    nvidia.com/mig.config.state; the GPU's MIG mode is read before and after.  The host's GPU clients are not
    stopped (mig_manager_shutdown_host_gpu_clients: false: that copies nvidia-mig-parted into the driver's
    directory and stops systemd services -- not on a lent machine), and CDI specs are not regenerated (this
    machine's driver is under /usr/local/nvidia, outside the directories the MIG manager searches)."""
    part_c = os.environ.get("GPUC_CRIO_BIN", "")
    bins = [os.path.join(part_c, b) for b in ("nvidia-mig-manager", "nvidia-mig-parted")]
    if not (part_c and all(os.path.exists(b) for b in bins) and os.path.exists(os.path.join(part_c, "dbus-daemon"))):
        check("mig-manager-not-run", False, "no nvidia-mig-manager, nvidia-mig-parted or dbus-daemon in the staged part c "
              "(%s): build the kit with MIG_PARTED_GIT and carry .gpu-cluster/c in a stage call" % (part_c or "not staged"))
        return
    version = pinned("mig_manager")
    # NVIDIA's image: the two binaries, a busybox shell, and the ENV of its Dockerfile
    ok = step_image("mig_manager", "%s/nvidia/cloud-native/k8s-mig-manager:%s" % (lane_vars["gpuops_registry"], version),
                    version, "NVIDIA's nvidia-mig-manager and nvidia-mig-parted", kit_versions().get("mig-parted"),
                    "--bin", bins[0], "--bin", bins[1], "--env", "NVIDIA_DISABLE_REQUIRE=true",
                    "--env", "NVIDIA_VISIBLE_DEVICES=all", "--env", "NVIDIA_MIG_CONFIG_DEVICES=all",
                    "--env", "NVIDIA_DRIVER_CAPABILITIES=utility")
    if not ok:
        return
    bus = system_bus(part_c)
    mig_before = sh(["nvidia-smi", "--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader"])[1].strip()
    add_component(lane_vars, "mig_manager", mig_manager_shutdown_host_gpu_clients=False, mig_manager_cdi_enabled=False)
    rc, out, changed = playbook("mig-manager", "cluster.yml")
    check("mig-manager-role", rc == 0, "cluster.yml with mig_manager in gpuops_cluster_components: rc=%d changed=%d; %s"
          % (rc, changed, " | ".join(line.strip() for line in out.splitlines() if "fatal" in line or "FAILED" in line)[:600]))
    state = wait("MIG manager's state", lambda: (node().metadata.labels or {}).get("nvidia.com/mig.config.state")
                 in ("success", "failed") and node().metadata.labels["nvidia.com/mig.config.state"], 90, 2)
    labels = node().metadata.labels or {}
    pod = component_pods().get("nvidia-mig-manager")
    logs = pod_logs(pod) if pod else {}
    json.dump(logs, open(os.path.join(OUT, "mig-manager-pod-logs.json"), "w"), indent=1)
    # who wrote which label (the uninstall takes off what only the MIG manager set, by these entries)
    fields = [{"manager": m.manager, "operation": m.operation,
               "labels": sorted(k[2:] for k in ((m.fields_v1 or {}).get("f:metadata") or {}).get("f:labels", {}))}
              for m in (node().metadata.managed_fields or [])]
    json.dump(fields, open(os.path.join(OUT, "node-managed-fields-mig.json"), "w"), indent=1)
    mig_after = sh(["nvidia-smi", "--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader"])[1].strip()
    text = "".join(logs.values())
    check("mig-manager-state-success", state == "success" and labels.get("nvidia.com/mig.config") == "all-disabled"
          and pod is not None and ready(pod) and restarts(pod) == 0 and mig_before == mig_after,
          "nvidia.com/mig.config=%s (node_labels' default), nvidia.com/mig.config.state=%s; pod %s ready %s restarts %s; "
          "MIG mode before/after %s / %s; D-Bus: %s; log: %s" % (
              labels.get("nvidia.com/mig.config"), state, pod and pod.metadata.name, pod is not None and ready(pod),
              pod and restarts(pod), mig_before, mig_after, bus,
              " | ".join(line.strip() for line in text.splitlines() if "config" in line.lower())[-600:]))


def doctor():
    """The doctor on the live cluster: healthy, then a device plugin pod that cannot start and a node without its
    workload label (each named, with its fix), both repaired by site.yml."""
    rc, out, _ = playbook("doctor-ok", "doctor.yml")
    check("doctor-healthy", rc == 0 and "no problems found" in out, "rc=%d" % rc)
    ds = "nvidia-device-plugin-daemonset"
    apps.patch_namespaced_daemon_set(ds, NS, {"spec": {"template": {"spec": {"containers": [
        {"name": "nvidia-device-plugin", "image": "gpuops.lab/nvidia/k8s-device-plugin:v0.0.0-not-mirrored"}]}}}})
    wait("DP pod failing", lambda: any((s.state.waiting and s.state.waiting.reason in ("ErrImagePull", "ImagePullBackOff"))
                                       for p in [component_pods().get(ds)] if p
                                       for s in (p.status.container_statuses or [])), 90, 2)
    rc, out, _ = playbook("doctor-dp-image", "doctor.yml")
    named = "component-pod-image" in out and "device plugin" in out.lower()
    check("doctor-names-dp-not-running", named and "fix" in out.lower(),
          " | ".join(line.strip() for line in out.splitlines() if "component-pod" in line or "fix:" in line)[:800])
    # the workload label (mission section 9: a VM node's GPU not seen): taken off by hand, the doctor names it as
    # the inventory's container node without one (a warning: the GPU Operator's default), with the kubectl fix;
    # site.yml below puts it back with everything else
    kubectl("label", "node", NODE, "nvidia.com/gpu.workload.config-")
    rc, out, _ = playbook("doctor-workload-label", "doctor.yml")
    hits = [line.strip() for line in out.splitlines() if "] node-workload-label:" in line]
    check("doctor-names-workload-label", len(hits) == 1 and "nvidia.com/gpu.workload.config=container --overwrite" in out,
          " | ".join(hits)[:400])
    rc, out, changed = playbook("site-repair", "site.yml")
    got = wait("DP pod back", lambda: pods_ready((ds,)), 120, 2)
    check("site-restores-workload-label", node().metadata.labels.get("nvidia.com/gpu.workload.config") == "container",
          "label after site.yml: %s" % node().metadata.labels.get("nvidia.com/gpu.workload.config"))
    check("site-repairs-dp", rc == 0 and got and allocatable_gpu() == "1",
          "site.yml put the DaemonSet back (rc=%d changed=%d); pod Ready, allocatable %s" % (rc, changed, allocatable_gpu()))
    if "mig_manager" in STATE.get("added", {}).get("roles", []):
        doctor_mig()


def doctor_mig():
    """The MIG manager failing (the guide's section 8): the node's nvidia.com/mig.config set by hand to a config the
    MIG manager does not have -- it refuses it before touching the GPU and reports failed --, named by the doctor
    with its fix, then fixed as the fix says (the host's gpuops_mig_config, cluster.yml)."""
    kubectl("label", "node", NODE, "nvidia.com/mig.config=gpuops-lane-no-such-config", "--overwrite")
    state = wait("MIG manager failed", lambda: (node().metadata.labels or {}).get("nvidia.com/mig.config.state") == "failed"
                 and "failed", 60, 2)
    rc, out, _ = playbook("doctor-mig", "doctor.yml")
    hits = [line.strip() for line in out.splitlines() if "] mig-config-failed:" in line or "mig-config-failed" in line]
    check("doctor-names-mig-manager-failing", state == "failed" and hits and "gpuops_mig_config" in out,
          "state %s; %s" % (state, " | ".join(hits)[:600]))
    rc, out, changed = playbook("cluster-mig-fix", "cluster.yml", "-e", "gpuops_mig_config=all-disabled")
    state = wait("MIG manager success", lambda: (node().metadata.labels or {}).get("nvidia.com/mig.config.state")
                 == "success" and "success", 60, 2)
    check("cluster-fixes-mig-config", rc == 0 and state == "success"
          and node().metadata.labels.get("nvidia.com/mig.config") == "all-disabled",
          "cluster.yml -e gpuops_mig_config=all-disabled: rc=%d; nvidia.com/mig.config=%s, state %s" % (
              rc, node().metadata.labels.get("nvidia.com/mig.config"), state))


def mps_step():
    """MPS through NVIDIA's MPS control daemon: the node switched live to config mps2 (sharing.mps, 2 replicas);
    GFD relabels it (nvidia.com/mps.capable=true and the rest, against ours); the device_plugin role's MPS
    DaemonSet puts its pod there and the daemon starts an MPS control daemon on the host; the device plugin
    advertises 2; two pods asking for nvidia.com/gpu: 1 run the CUDA check at once as MPS clients (an
    nvidia-cuda-mps-server on the host while they run); the label back to default takes the MPS pod away
    and no MPS process is left.  The lane's mps-control-daemon leaves the compute mode as it is
    (patches/k8s-device-plugin-v0.20.0-keep-compute-mode.patch): the final check holds the GPU's settings."""
    build = kit_versions().get("k8s-device-plugin-build", "")
    if "+" not in build:  # a build without the lane's patch would set EXCLUSIVE_PROCESS: never run it here
        check("mps-not-run", False, "the kit's mps-control-daemon (%s) is not the lane's build that leaves the compute "
              "mode as it is: rebuild the kit (DEVICE_PLUGIN_GIT=... make gpu-cluster-kit)" % build)
        return
    mps_app = "nvidia-device-plugin-mps-control-daemon"
    kubectl("label", "node", NODE, "nvidia.com/device-plugin.config=mps2", "--overwrite")
    capable = wait("mps.capable", lambda: (node().metadata.labels or {}).get("nvidia.com/mps.capable") == "true", 90, 2)
    mps_pod = wait("MPS daemon pod", lambda: pods_ready((mps_app,)), 120, 2)
    mps_pod = mps_pod and mps_pod[mps_app]
    check("mps-daemon-pod-ready", capable and mps_pod is not None,
          "GFD labelled nvidia.com/mps.capable=%s; %s pod %s" % (
              (node().metadata.labels or {}).get("nvidia.com/mps.capable"), mps_app,
              mps_pod and (mps_pod.metadata.name, mps_pod.status.phase, restarts(mps_pod))))
    a2 = wait("allocatable 2", lambda: allocatable_gpu() == "2", 120, 2)
    check("mps-allocatable-2", a2, "label nvidia.com/device-plugin.config=mps2: allocatable %s" % allocatable_gpu())
    wait("GFD MPS labels", lambda: gfd_labels().get("nvidia.com/gpu.replicas") == "2", 60, 2)
    gfd_vs_ours("mps-gfd-labels-equal-ours", gfd_labels(), our_labels("mps2"),
                "GFD relabelled live by its config-manager (MPS, replicas 2) against gpu_facts with that config")

    def mps_server():
        procs = sh(["pgrep", "-a", "nvidia-cuda-mps"])[1].strip()
        return procs if "nvidia-cuda-mps-server" in procs else None
    together, spans = pods_at_once("mps", 2, 20, during=mps_server)
    servers = spans["during"]
    together = together and all(v["pipe"] for k, v in spans.items() if k != "during")
    check("mps-two-pods-at-once", together and bool(servers),
          "%s; on the host while they ran: %s" % (spans, servers))
    kubectl("label", "node", NODE, "nvidia.com/device-plugin.config=default", "--overwrite")
    a1 = wait("allocatable 1", lambda: allocatable_gpu() == "1", 120, 2)
    gone = wait("MPS pod gone", lambda: mps_app not in component_pods(), 90, 2)
    left = wait("MPS processes gone", lambda: not sh(["pgrep", "-a", "nvidia-cuda-mps"])[1].strip() or None, 30, 1)
    check("mps-back-to-default", a1 and gone and left is not None,
          "label back to default: allocatable %s, nvidia.com/mps.capable=%s, MPS pod gone %s, MPS processes left: %s"
          % (allocatable_gpu(), (node().metadata.labels or {}).get("nvidia.com/mps.capable"), bool(gone),
             sh(["pgrep", "-a", "nvidia-cuda-mps"])[1].strip() or "none"))
    kubectl("label", "node", NODE, "nvidia.com/device-plugin.config-")


def driver_upgrade():
    """playbooks/driver_upgrade.yml on this node, its driver already the one asked for: the real driver and
    validator roles, a workload under a PodDisruptionBudget evicted through the eviction API, the node cordoned
    and uncordoned, the operator's upgrade-state label read back."""
    state = "nvidia.com/gpu-driver-upgrade-state"
    labels = {"app": "upgrade-work"}
    apps.create_namespaced_deployment("default", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "upgrade-work"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            # no GPU asked for: the taint node_labels puts on GPU nodes tolerated by hand
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "work", "image": CUDA_IMAGE, "command": ["sleep", "3600"]}]}}}})
    # one node: a PDB that allows one disruption, so the drain evicts through it and does not wait forever
    client.PolicyV1Api().create_namespaced_pod_disruption_budget("default", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "upgrade-work"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}})

    def running():
        ps = [p for p in core.list_namespaced_pod("default", label_selector="app=upgrade-work").items
              if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
        return ps[0] if ps else None
    before = wait("upgrade workload", running, 60)
    dp_before = component_pods().get("nvidia-device-plugin-daemonset")
    rc, out, changed = playbook("driver-upgrade", "driver_upgrade.yml", "-e", json.dumps({
        "gpu_upgrade_hosts": NODE, "gpu_upgrade_become": False, "gpu_upgrade_drain_timeout": 90,
        "gpu_upgrade_drain_retry_delay": 1}))
    after = wait("upgrade workload back", lambda: (lambda p: p if p and before and p.metadata.uid != before.metadata.uid
                                                     else None)(running()), 60)
    n = node()
    dp_after = component_pods().get("nvidia-device-plugin-daemonset")
    steps = re.findall(r"TASK \[([^\]]*Step [a-z]+)\]", out)
    check("driver-upgrade", rc == 0 and (n.metadata.labels or {}).get(state) == "upgrade-done"
          and not n.spec.unschedulable and before is not None and after is not None
          and dp_before is not None and dp_after is not None and dp_before.metadata.uid == dp_after.metadata.uid,
          "rc=%d changed=%d; %s=%s; unschedulable=%s; workload pod %s evicted, %s running after the uncordon; device "
          "plugin pod kept (DaemonSet): %s; steps: %s" % (
              rc, changed, state, (n.metadata.labels or {}).get(state), n.spec.unschedulable,
              before and before.metadata.name, after and after.metadata.name,
              bool(dp_before and dp_after and dp_before.metadata.uid == dp_after.metadata.uid), steps))
    apps.delete_namespaced_deployment("upgrade-work", "default")
    client.PolicyV1Api().delete_namespaced_pod_disruption_budget("upgrade-work", "default")
    # the upgrade's record stays on a Node (as the operator's does); taken off here, so that the uninstall's check
    # compares the Node with what it was before site.yml
    kubectl("label", "node", NODE, state + "-")


def crio_cdi(uuid):
    """Part c of the kit, when it was staged: CRI-O runs a container that asks for the GPU through CDI, from the
    spec site.yml just wrote (crio_cdi.py; before the component pods are awaited, so whatever they do)."""
    crio_bin = os.environ.get("GPUC_CRIO_BIN")
    if not crio_bin:
        say("CRI-O step: part c not staged (carry .gpu-cluster/c in a stage call)")
        return
    rc, out, err = sh(["python3", os.path.join(ROOT, "tests", "lab", "gpu", "cluster", "crio_cdi.py"),
                       "--crio-bin", crio_bin, "--conmon", os.path.join(crio_bin, "conmon", "conmon"),
                       "--runc", os.path.join(KN_BIN, "runc"), "--image", os.path.join(KN_DIR, "images", "cuda.tar"),
                       "--work", os.path.join(KIT, "crio"), "--expect", uuid], timeout=300, log="crio-cdi.log")
    try:
        res = json.loads(out)
    except ValueError:
        check("crio-cdi-container", False, "crio_cdi.py rc=%d, no result: %s" % (rc, err[-800:]))
        return
    STATE["crio"] = res["version"]
    for c in res["checks"]:
        check(c["name"], c["ok"], c["detail"])


def diagnose(lane_vars):
    """The component image run by hand through the node's nvidia runtime (ctr), as its pod would: what the
    container sees of the driver, and GFD once, so that a crash loop's cause is in the results."""
    cfg = open(os.path.join(KN_DIR, "containerd", "config.toml"), encoding="utf-8").read()
    m = re.search(r'BinaryName\s*=\s*"([^"]*nvidia-container-runtime[^"]*)"', cfg)
    image = "%s/nvidia/k8s-device-plugin:%s" % (lane_vars["gpuops_registry"], DP_BUILT)
    script = ("ls -la /dev/nvidia* ; ls /usr/local/nvidia/lib64 | head -30; env | sort; "
              # what the loader makes of NVML in this image: every library it needs, found or "not found"
              "/lib64/ld-linux-x86-64.so.2 --list /usr/local/nvidia/lib64/libnvidia-ml.so.1; grep -i nvidia /proc/self/mountinfo | "
              "head -20; gpu-feature-discovery --oneshot --output-file=/tmp/gfd 2>&1 | tail -30; cat /tmp/gfd; "
              "timeout 10 nvidia-device-plugin 2>&1 | tail -30")
    args = [os.path.join(KN_BIN, "ctr"), "--address", os.path.join(KN_DIR, "run", "containerd.sock"), "-n", "k8s.io",
            "run", "--rm", "--privileged", "--env", "NVIDIA_VISIBLE_DEVICES=all",
            "--env", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
    if m:
        args += ["--runc-binary", m.group(1)]
    rc, out, err = sh(args + [image, "gpuops-diag", "sh", "-c", script], timeout=60, log="diagnose-dp-image.log")
    # what the nvidia runtime worked from: its config, the CDI specs and containerd's runtime entries
    sh(["sh", "-c", "cat /etc/nvidia-container-runtime/config.toml; ls -la /etc/cdi /var/run/cdi; cat /etc/cdi/*.yaml; "
                    "cat %s" % os.path.join(KN_DIR, "containerd", "config.toml")], log="diagnose-runtime-config.log")
    say("diagnosis (ctr run of %s through %s, rc=%d):\n%s\n%s" % (image, m and m.group(1), rc, out[-4000:], err[-1000:]))


def trace_removal(stop):
    """While cluster.yml removes the components: every second, each DaemonSet's and Deployment's deletion state
    (deletionTimestamp, finalizers) and each pod's phase, to uninstall-trace.tsv -- where the removal's time goes."""
    seen = {}
    with open(os.path.join(OUT, "uninstall-trace.tsv"), "w", encoding="utf-8") as f:
        f.write("t_s\tkind\tname\tstate\n")
        while not stop.is_set():
            now = {}
            try:
                for kind, items in (("ds", apps.list_namespaced_daemon_set(NS).items),
                                    ("deploy", apps.list_namespaced_deployment(NS).items),
                                    ("pod", core.list_namespaced_pod(NS).items)):
                    for o in items:
                        m = o.metadata
                        state = "deleting(%s)" % ",".join(m.finalizers or []) if m.deletion_timestamp else "live"
                        if kind == "pod":
                            state += " " + (o.status.phase or "")
                        now[(kind, m.name)] = state
            except Exception as e:  # noqa: BLE001  (a trace only: the API server may be going away)
                now[("error", type(e).__name__)] = str(e)[:100]
            for key in sorted(set(now) | set(seen)):
                if now.get(key) != seen.get(key):
                    f.write("%.1f\t%s\t%s\t%s\n" % (time.time() - T0, key[0], key[1], now.get(key, "gone")))
            f.flush()
            seen = now
            stop.wait(1)


def uninstall(labels_before, containerd_before):
    STATE["uninstalled"] = True
    if "uninstall" in SKIP:
        say("the uninstall left out (GPUC_SKIP): the teardown only")
        return finish()
    cfg = os.path.join(KN_DIR, "containerd", "config.toml")
    stop = threading.Event()
    tracer = threading.Thread(target=trace_removal, args=(stop,), daemon=True)
    tracer.start()
    rc, out, _ = playbook("cluster-absent", "cluster.yml", "-e", "gpuops_cluster_state=absent")
    stop.set()
    tracer.join(5)
    wait("pods gone", lambda: not component_pods(), 120, 2)
    left = {k: v for k, v in (node().metadata.labels or {}).items() if labels_before.get(k) != v}
    gone = sorted(k for k in labels_before if k not in (node().metadata.labels or {}))
    json.dump({"before": labels_before, "after": node().metadata.labels}, open(os.path.join(OUT, "node-labels-uninstall.json"), "w"),
              indent=1, sort_keys=True)
    check("cluster-uninstall-labels-as-before", rc == 0 and not component_pods() and not left and not gone,
          "rc=%d; pods left %s; labels added/changed %s; removed %s" % (rc, sorted(component_pods()), left, gone))
    rc, out, _ = playbook("toolkit-absent", "container_toolkit.yml", "-e", "container_toolkit_state=absent")
    with open(cfg, "rb") as f:
        after = f.read()
    check("toolkit-uninstall-config-as-before", rc == 0 and containerd_before == after,
          "rc=%d; containerd config byte-identical to before site.yml: %s" % (rc, containerd_before == after))
    return finish()


DRA_ROOT = "/run/gpuops-lane/driver-root"
DRA_BINDS = (("usr/lib64", "/usr/local/nvidia/lib64"), ("usr/bin", "/usr/local/nvidia/bin"))


def quantity_mib(q):
    """A Kubernetes quantity (memory: 81559Mi, 80Gi, 85520809984) -> MiB (float)."""
    units = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    return float(m.group(1)) * units.get(m.group(2), 1) / 2 ** 20 if m else None


def claim_pod(name, claim, command, template=False):
    """A pod of the CUDA image asking for a GPU through ``claim`` (a ResourceClaim's name, or a template's)."""
    ref = {"resourceClaimTemplateName" if template else "resourceClaimName": claim}
    core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "resourceClaims": [dict(name="gpu", **ref)],
        "containers": [{"name": "cuda", "image": CUDA_IMAGE, "command": ["sh", "-c", command],
                        "resources": {"claims": [{"name": "gpu"}]}}]}})


def gpu_claim(name, cel=None, sharing=None):
    req = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    if cel:
        req["exactly"]["selectors"] = [{"cel": {"expression": cel}}]
    spec = {"devices": {"requests": [req]}}
    if sharing:
        spec["devices"]["config"] = [{"requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}}}]
    custom.create_namespaced_custom_object("resource.k8s.io", "v1", "default", "resourceclaims",
                                           {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                            "metadata": {"name": name}, "spec": spec})


def dra_step(lane_vars, uuid):
    """The node moved to NVIDIA's DRA driver (issue 32): the dra_driver role with gpuops_gpu_allocation dra, its
    gpu-kubelet-plugin built from the driver's source (part d), the device plugin gone from the node; the node's
    ResourceSlice against gpu_facts; a claim by CEL running the CUDA check; one no device satisfies left pending with
    the scheduler's reason; two pods sharing one claim with time-slicing; the doctor quiet; then back to the device
    plugin.  This machine's driver lives under /usr/local/nvidia, where NVIDIA's plugin does not look (it looks
    under <driver root>/usr/lib64 and /usr/bin): the lane binds those two directories into a driver root of its
    own and gives it as dra_driver_driver_root, as a user would for such a layout."""
    part_d = os.environ.get("GPUC_DRA_BIN", "")
    plugin = os.path.join(part_d, "gpu-kubelet-plugin")
    files = os.path.join(part_d, "dra-driver-files")
    if not (part_d and os.path.exists(plugin) and os.path.exists(os.path.join(part_d, "bash"))):
        check("dra-not-run", False, "no gpu-kubelet-plugin or bash in the staged part d (%s): build the kit with "
              "DRA_DRIVER_GIT and carry .gpu-cluster/d in a stage call" % (part_d or "not staged"))
        return
    version = pinned("dra_driver")
    if not version:  # an image without a tag would be made and named wrong
        check("dra-driver-image", False, "docs/render_data.py gives no pinned version for dra_driver")
        return
    # the toolkit's CDI hook where site.yml put it: /usr/bin from packages, <archive_prefix>/bin (/usr/local/bin) from
    # the archive the lane installs
    hook = shutil.which("nvidia-cdi-hook", path="/usr/bin:/usr/local/bin") or "/usr/bin/nvidia-cdi-hook"
    ok = step_image("dra_driver", "%s/nvidia/dra-driver-nvidia-gpu:%s" % (lane_vars["gpuops_registry"], version),
                    version, "NVIDIA's gpu-kubelet-plugin", kit_versions().get("dra-driver"),
                    "--bin", plugin, "--bin", os.path.join(part_d, "bash"), "--bin", hook,
                    "--bin", os.path.join(files, "kubelet-plugin-prestart.sh"))
    if not ok:
        return
    # what ran: the source the kit built (the snapshot holds no v0.5.0 tag yet), under the pinned image name
    STATE["components"]["dra_driver"] = (kit_versions().get("dra-driver") or version).split("@")[0].replace("dra-driver-", "")
    for sub, src in DRA_BINDS:
        os.makedirs(os.path.join(DRA_ROOT, sub), exist_ok=True)
        sh(["mount", "--bind", src, os.path.join(DRA_ROOT, sub)])
    STATE["dra_root"] = True
    # the role stays among the components (its removal with the uninstall); the node allocates by DRA while dra is given
    add_component(lane_vars, "dra_driver", dra_driver_driver_root=DRA_ROOT,
                  dra_driver_feature_gates={"TimeSlicingSettings": True})
    dra = ["-e", "gpuops_gpu_allocation=dra"]
    rc, out, changed = playbook("dra-cluster", "cluster.yml", *dra)
    check("dra-role", rc == 0, "cluster.yml with gpuops_gpu_allocation dra: rc=%d changed=%d; %s" % (
        rc, changed, " | ".join(line.strip() for line in out.splitlines() if "fatal" in line or "FAILED" in line)[:600]))

    def my_slices():
        items = custom.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")["items"]
        return [s for s in items if s["spec"].get("nodeName") == NODE and s["spec"].get("driver") == "gpu.nvidia.com"
                and s["spec"].get("devices")]
    slices = wait("the node's ResourceSlice", my_slices, 120, 2) or []
    json.dump(slices, open(os.path.join(OUT, "dra-resourceslices.json"), "w"), indent=1)
    pods = core.list_namespaced_pod(NS, field_selector="spec.nodeName=" + NODE).items
    json.dump({p.metadata.name: pod_logs(p) for p in pods if (p.metadata.labels or {}).get("app") ==
               "nvidia-dra-driver-kubelet-plugin"}, open(os.path.join(OUT, "dra-plugin-logs.json"), "w"), indent=1)
    dp_here = [p.metadata.name for p in pods if (p.metadata.labels or {}).get("app") == "nvidia-device-plugin-daemonset"]
    gone = wait("the device plugin gone", lambda: not [p for p in core.list_namespaced_pod(
        NS, field_selector="spec.nodeName=" + NODE, label_selector="app=nvidia-device-plugin-daemonset").items], 60)
    check("dra-no-device-plugin", bool(gone), "device plugin pods on the DRA node: %s; allocatable nvidia.com/gpu %s"
          % (dp_here, allocatable_gpu()))
    # the GPU as gpu_facts reports it (the module's code, on this node) against the slice's device
    sys.path.insert(0, os.path.join(KIT, "collections"))
    from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts
    facts, _w = _gpu_facts.gather("/")
    gpu = next((d for d in facts.get("devices") or [] if d.get("uuid") == uuid), {})
    dev = next((d for s in slices for d in s["spec"]["devices"]
                if (d.get("attributes") or {}).get("uuid", {}).get("string") == uuid), None)
    attrs = {k: next(iter(v.values())) for k, v in ((dev or {}).get("attributes") or {}).items()}
    mem = quantity_mib(((dev or {}).get("capacity") or {}).get("memory", {}).get("value"))
    want = {"uuid": uuid, "productName": gpu.get("product"), "cudaComputeCapability": "%s.0" % gpu.get("compute_capability"),
            "resource.kubernetes.io/pciBusID": (gpu.get("bdf") or "").lower(),
            "driverVersion": (facts.get("driver") or {}).get("version")}
    diff = {k: (v, attrs.get(k)) for k, v in want.items() if attrs.get(k) != v}
    if mem is None or abs(mem - (gpu.get("memory_mib") or 0)) > 1:
        diff["memory"] = (gpu.get("memory_mib"), mem)
    family = (node().metadata.labels or {}).get("nvidia.com/gpu.family", "")
    if str(attrs.get("architecture", "")).lower() != family.lower():
        diff["architecture"] = (family, attrs.get("architecture"))
    check("dra-slice-equals-gpu-facts", dev is not None and not diff,
          "device %s of %d slice(s): %s; differences (gpu_facts, slice): %s" % (
              dev and dev.get("name"), len(slices), json.dumps(attrs, sort_keys=True)[:500], diff))
    # a claim by CEL: at least 60 GiB of memory (every GPU lent here has 80 GiB or more)
    gpu_claim("big-memory", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('60Gi')) >= 0")
    claim_pod("dra-cuda", "big-memory", "nvidia-smi -L; python3 /check/_cuda.py && echo CUDA-CHECK-OK")
    done = wait("the claim's pod", lambda: pod_phase("dra-cuda") in ("Succeeded", "Failed"), 120, 2)
    log = api_log("dra-cuda")
    open(os.path.join(OUT, "dra-cuda.log"), "w").write(log)
    check("dra-claim-cuda-check", done and pod_phase("dra-cuda") == "Succeeded" and "CUDA-CHECK-OK" in log and uuid in log,
          "pod dra-cuda (claim big-memory: memory >= 60Gi by CEL) %s; %s" % (
              pod_phase("dra-cuda"), " | ".join(log.strip().splitlines()[-3:])[:400]))
    core.delete_namespaced_pod("dra-cuda", "default")
    wait("dra-cuda gone", lambda: pod_phase("dra-cuda") is None, 60)
    # a claim no device satisfies
    gpu_claim("too-big", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('4Ti')) >= 0")
    claim_pod("dra-pending", "too-big", "true")

    def unschedulable():
        for c in core.read_namespaced_pod("dra-pending", "default").status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c.message
        return None
    msg = wait("the impossible claim reported", unschedulable, 60, 2)
    check("dra-claim-pending-with-reason", bool(msg) and "cannot allocate all claims" in (msg or ""), str(msg)[:300])
    # two pods, one claim, time-slicing
    gpu_claim("shared", sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
    for name in ("dra-share-a", "dra-share-b"):
        claim_pod(name, "shared", "python3 /check/_cuda.py && echo CUDA-CHECK-OK; sleep 20")
    both = wait("both sharing pods", lambda: all(pod_phase(n) == "Succeeded" for n in ("dra-share-a", "dra-share-b")),
                150, 2)
    logs = {n: api_log(n) for n in ("dra-share-a", "dra-share-b")}
    check("dra-two-pods-share-one-claim", bool(both) and all("CUDA-CHECK-OK" in t for t in logs.values()),
          "%s; %s" % ({n: pod_phase(n) for n in logs}, {n: t.strip().splitlines()[-1:] for n, t in logs.items()}))
    rc, out, _ = playbook("doctor-dra", "doctor.yml", *dra)
    hits = [line.strip() for line in out.splitlines() if "] dra-" in line]
    check("doctor-dra-quiet", rc == 0 and not hits, " | ".join(hits)[:400] or "no DRA finding")
    for n in ("dra-pending", "dra-share-a", "dra-share-b"):
        core.delete_namespaced_pod(n, "default")
    for c in ("big-memory", "too-big", "shared"):
        custom.delete_namespaced_custom_object("resource.k8s.io", "v1", "default", "resourceclaims", c)
    # back to the device plugin
    rc, out, changed = playbook("dra-back", "cluster.yml")
    back = wait("allocatable back", lambda: allocatable_gpu() == "1", 120, 2)
    check("dra-back-to-device-plugin", rc == 0 and back and not [
        p for p in core.list_namespaced_pod(NS, field_selector="spec.nodeName=" + NODE,
                                            label_selector="app=nvidia-dra-driver-kubelet-plugin").items],
          "cluster.yml without gpuops_gpu_allocation: rc=%d; allocatable %s" % (rc, allocatable_gpu()))


def finish():
    node_sh("stop")
    if STATE.get("dra_root"):  # the DRA step's driver root: its bind mounts taken off
        for sub, _src in reversed(DRA_BINDS):
            sh(["umount", os.path.join(DRA_ROOT, sub)])
    bus = STATE.get("dbus")
    if bus is not None:  # the system bus the MIG manager step started: stopped, its socket removed
        bus.terminate()
        try:
            bus.wait(10)
        except subprocess.TimeoutExpired:
            bus.kill()
        if os.path.exists(DBUS_SOCKET):
            os.unlink(DBUS_SOCKET)
        check("dbus-stopped", bus.poll() is not None and not os.path.exists(DBUS_SOCKET),
              "the lane's dbus-daemon exited (%s); %s removed" % (bus.poll(), DBUS_SOCKET))
    sh(["bash", os.path.join(ROOT, "tests", "lab", "cluster", "down.sh"), "--purge"], log="down.log")
    time.sleep(1)
    rc, left, _ = sh(["sh", "-c", "pgrep -af 'containerd|kubelet|kube-apiserver|etcd|nvidia-device-plugin|"
                                  "gpu-feature-discovery|nfd-|config-manager|mps-control-daemon|nvidia-cuda-mps|nvidia-validator|nvidia-mig-|"
                                  "/pause|svcproxy' | grep -v pgrep"])
    check("no-daemon-left", not left.strip(), left.strip() or "none running")
    after = gpu_settings()
    check("gpu-settings-unchanged", after == STATE.get("settings"), after)
    failed = [c["name"] for c in CHECKS if not c["ok"]]
    versions = kit_versions()
    if STATE.get("crio"):
        versions["crio"] = STATE["crio"]
    summary = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": os.environ.get("GPUC_COMMIT", ""),
               "gpu_uuid": STATE.get("uuid"), "gpu": STATE.get("model"), "gpu_settings": STATE.get("settings"),
               "components": STATE.get("components", {}), "versions": versions, "wall_s": round(time.time() - T0, 1),
               "checks": CHECKS, "failed": failed}
    json.dump(summary, open(os.path.join(OUT, "summary.json"), "w"), indent=1)
    say("%d checks, %d failed: %s" % (len(CHECKS), len(failed), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a step that broke: recorded, then the same teardown and summary
        import traceback
        traceback.print_exc()
        check("lane-error", False, "%s: %s" % (type(e).__name__, e))
        if "before" in STATE and "uninstalled" not in STATE:  # the cluster stage ran: take it off as the lane would
            # the label a broken sharing step set by hand (kubectl, not the inventory) is the lane's to take off
            kubectl("label", "node", NODE, "nvidia.com/device-plugin.config-")
            try:
                sys.exit(uninstall(*STATE["before"]) or 1)
            except Exception as e2:  # noqa: BLE001  (the teardown below must run whatever broke)
                check("lane-error-uninstall", False, "%s: %s" % (type(e2).__name__, e2))
        sys.exit(finish() or 1)
