"""The cluster lane's real node: kubelet and containerd on this machine (tests/lab/kubenode/node.sh), joined
to the lane's API server beside the KWOK fleet, and the component roles' objects -- unchanged but for the
options in kubenode-vars.yml -- run on it by a real kubelet: NFD (master and worker), GPU feature discovery
and NVIDIA's device plugin with its config-manager, from images made here of binaries built from their
sources (tests/lab/gpu/build.sh).  The machine has no GPU: the device plugin and GFD must start, report no
GPU and keep running; NFD's labels must equal what gpu_facts computes for the same machine.

Runs after the main cluster tests on a control plane of its own (run-tests.sh); tests run in file order and
build on each other (join -> install -> rerun -> doctor -> a crash loop and its repair -> uninstall -> stop).
"""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import time

import pytest
import yaml
from conftest import HERE, KUBECONFIG, ROOT, recap_changed
from conftest import cluster_playbook as _playbook
from kubernetes import client, config

NS = "gpu-operator"
NODE = "kubenode-0"
NFD = "feature.node.kubernetes.io/"
VARS = os.path.join(HERE, "kubenode-vars.yml")
NODE_SH = os.path.join(ROOT, "tests", "lab", "kubenode", "node.sh")
POLICY = os.path.join(ROOT, "tests", "lab", "kubenode", "host-network-policy.yaml")
CACHE = os.environ.get("GPUOPS_CACHE", os.path.expanduser("~/.cache/gpuops"))
KN_DIR = os.environ.get("KN_DIR", os.path.join(CACHE, "kubenode", "lane"))
KN_BIN = os.path.join(CACHE, "gpu", "bin")
API = "127.0.0.1:%s" % os.environ.get("CLUSTER_PORT_BASE", "26543")
# the components this node runs, by the pods' `app` label
APPS = {"nfd-master", "nfd-worker", "gpu-feature-discovery", "nvidia-device-plugin-daemonset"}

with open(VARS, encoding="utf-8") as _f:
    LANE_VARS = yaml.safe_load(_f)
DP_VERSION = LANE_VARS["device_plugin_image"]["version"]
NFD_VERSION = subprocess.run(["python3", os.path.join(ROOT, "docs", "render_data.py"), "--get", "components.nfd"],
                             capture_output=True, text=True, check=True).stdout.strip()
REGISTRY = LANE_VARS["gpuops_registry"]
NODE_IP = "10.254.254.1"  # node.sh's KN_NODE_IP

config.load_kube_config(KUBECONFIG)
core = client.CoreV1Api()
custom = client.CustomObjectsApi()


def node_sh(*args, check=True):
    env = dict(os.environ, KN_DIR=KN_DIR, KN_BIN=KN_BIN, KN_KUBECONFIG=KUBECONFIG, KN_API=API, KN_NODE=NODE,
               KN_REGISTRY=REGISTRY, KN_IMAGES="device_plugin=%s nfd=%s" % (DP_VERSION, NFD_VERSION),
               # kubelet takes the API server's client certificate (up.sh's CA): logs and exec through the API
               KN_CLIENT_CA=os.path.join(os.path.dirname(KUBECONFIG), "pki", "ca.crt"),
               PYTHON=os.path.join(ROOT, ".venv", "bin", "python"))
    r = subprocess.run(["bash", NODE_SH, *args], env=env, capture_output=True, text=True, check=False)
    if check and r.returncode:
        pytest.fail("node.sh %s failed (rc=%d):\n%s\n%s" % (" ".join(args), r.returncode, r.stdout[-3000:], r.stderr[-5000:]))
    return r


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    path = tmp_path_factory.mktemp("kubenode") / "inventory.yml"
    inv = {"all": {"children": {"k8s_nodes": {"hosts": {NODE: {
        # the node is this machine: gpu_facts reads it for real (no stand-in root)
        "ansible_connection": "local",
        "ansible_python_interpreter": os.path.join(ROOT, ".venv", "bin", "python"),
        # a node without a GPU gets no deploy label for GPU components from its facts: the user-facing
        # per-node labels put the device plugin and GFD there anyway
        "gpuops_k8s_node_labels": {"nvidia.com/gpu.deploy.device-plugin": "true",
                                   "nvidia.com/gpu.deploy.gpu-feature-discovery": "true"},
        # the container_toolkit role registers the nvidia runtime in this node's containerd, as site.yml does on a
        # GPU node: the toolkit's binaries are the ones built here (no package to install), the runtime's own
        # config stays at its defaults (no GPU, so nothing for nvidia-ctk to set) and no CDI spec is written
        "ansible_become": False,
        "container_toolkit_install": False,
        "container_toolkit_runtime": "containerd",
        "container_toolkit_runtime_path": os.path.join(KN_BIN, "nvidia-container-runtime"),
        "container_toolkit_runtime_config_path": os.path.join(KN_DIR, "containerd", "config.toml"),
        "container_toolkit_runtime_mode": "",
        "container_toolkit_cdi_enabled": False,
        "container_toolkit_state_dir": os.path.join(KN_DIR, "toolkit-state"),
        "container_toolkit_restart_mode": "command",
        "container_toolkit_runtime_extra_args": {
            "restart_command": ["env", "KN_DIR=" + KN_DIR, "KN_BIN=" + KN_BIN, "bash", NODE_SH, "restart-containerd"],
            "binary_path": os.path.join(KN_BIN, "containerd"),
            "ctr_path": os.path.join(KN_BIN, "ctr"),
            "socket": os.path.join(KN_DIR, "run", "containerd.sock")},
    }}}}}}
    path.write_text(yaml.safe_dump(inv))
    return str(path)


@pytest.fixture(scope="module", autouse=True)
def kubenode():
    with open(POLICY, encoding="utf-8") as f:
        for doc in yaml.safe_load_all(f):
            plural = {"MutatingAdmissionPolicy": "mutatingadmissionpolicies",
                      "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings"}[doc["kind"]]
            try:
                custom.create_cluster_custom_object("admissionregistration.k8s.io", "v1", plural, doc)
            except client.ApiException as e:
                if e.status != 409:
                    raise
    node_sh("images")
    node_sh("start")
    yield
    node_sh("stop", check=False)


def playbook(inventory, *extra, **kw):
    return _playbook(*extra, inventory=inventory, vars_file=VARS, **kw)


def pods():
    """This node's component pods (not being deleted), by `app` label."""
    out = {}
    for p in core.list_namespaced_pod(NS, field_selector="spec.nodeName=" + NODE).items:
        if p.metadata.deletion_timestamp is None:
            out[(p.metadata.labels or {}).get("app")] = p
    return out


def statuses(p):
    return list(p.status.init_container_statuses or []) + list(p.status.container_statuses or [])


def healthy(p):
    return (p.status.phase == "Running" and all(s.ready for s in p.status.container_statuses or [])
            and all(s.restart_count == 0 for s in statuses(p)))


def wait_pods(want, timeout=120):
    """Wait until every app in ``want`` has a Running, Ready pod on the node; fail on a restart."""
    deadline = time.time() + timeout
    while True:
        now = pods()
        bad = {a: [(s.name, s.restart_count, s.state.waiting and s.state.waiting.reason) for s in statuses(now[a])]
               for a in want if a in now and any(s.restart_count for s in statuses(now[a]))}
        assert not bad, "component containers restarted: %s" % bad
        if all(a in now and healthy(now[a]) for a in want):
            return now
        if time.time() > deadline:
            pytest.fail("not Running/Ready in %d s: %s" % (timeout, {a: (now[a].status.phase if a in now else "no pod")
                                                                     for a in want}))
        time.sleep(1)


def pod_log(p, container):
    """The container's log file as the kubelet writes it."""
    d = os.path.join(KN_DIR, "pod-logs", "%s_%s_%s" % (NS, p.metadata.name, p.metadata.uid), container)
    text = ""
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
            text += fh.read()
    return text


def test_node_joins_ready():
    n = core.read_node(NODE)
    conds = {c.type: c.status for c in n.status.conditions}
    assert conds["Ready"] == "True", conds
    assert n.status.node_info.kubelet_version == "v1.37.2"
    assert n.status.node_info.container_runtime_version.startswith("containerd://2."), n.status.node_info
    # a real node: no KWOK annotation, so KWOK plays no part in what happens on it
    assert "kwok.x-k8s.io/node" not in (n.metadata.annotations or {})
    # an address the API server reaches the kubelet at (a loopback node IP is refused by kubelet: then none at all,
    # and no logs or exec through the API server)
    assert {(a.type, a.address) for a in n.status.addresses or []} >= {("InternalIP", NODE_IP)}, n.status.addresses


def toolkit(inventory, *extra):
    return _playbook("-e", "gpuops_container_toolkit_hosts=k8s_nodes", *extra, inventory=inventory, vars_file=VARS,
                     playbook="container_toolkit.yml")


def test_container_toolkit_registers_the_nvidia_runtime(inventory):
    cfg = os.path.join(KN_DIR, "containerd", "config.toml")
    with open(cfg, encoding="utf-8") as f:
        before = f.read()
    pid = open(os.path.join(KN_DIR, "run", "containerd.pid"), encoding="utf-8").read().strip()
    r = toolkit(inventory)
    assert recap_changed(r.stdout)[NODE] > 0, r.stdout[-3000:]
    with open(cfg, encoding="utf-8") as f:
        after = f.read()
    # our private settings kept, the nvidia handler added beside runc, pointing at the toolkit's runtime
    assert 'sandbox = "gpuops.local/pause:lane"' in after and 'restrict_oom_score_adj = true' in after
    assert "runtimes.nvidia" in after and os.path.join(KN_BIN, "nvidia-container-runtime") in after, after
    assert before != after
    # containerd restarted by the role through the node's own restart command, and answered
    assert open(os.path.join(KN_DIR, "run", "containerd.pid"), encoding="utf-8").read().strip() != pid
    assert {c.type: c.status for c in core.read_node(NODE).status.conditions}["Ready"] == "True"
    r = toolkit(inventory)
    assert recap_changed(r.stdout)[NODE] == 0, r.stdout[-3000:]


def test_install_runs_the_components_on_the_real_node(inventory):
    r = playbook(inventory, timing=True)
    assert recap_changed(r.stdout).get("localhost", 0) > 0
    now = wait_pods(APPS)
    # a crash loop shows within seconds (the binaries exit at once on a bad flag, file or mount): look again
    time.sleep(12)
    now = wait_pods(APPS, timeout=5)
    for app, p in now.items():
        for c in list(p.spec.init_containers or []) + list(p.spec.containers):
            assert c.image.startswith(REGISTRY + "/"), (app, c.image)
        # the lane's one admission change: nothing else of the rendered pod was touched
        assert p.spec.host_network is True
    assert {p.spec.runtime_class_name for p in now.values()} == {None}


def test_a_pod_of_runtime_class_nvidia_runs_through_the_toolkits_runtime():
    """The RuntimeClass the runtime_class role made, resolved by the kubelet to the handler the container_toolkit
    role registered: containerd runs the container with nvidia-container-runtime (which, asked for no GPU,
    hands it to runc unchanged)."""
    name = "runtime-class-nvidia"
    image = "%s/nvidia/k8s-device-plugin:%s" % (REGISTRY, DP_VERSION)
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"runtimeClassName": "nvidia", "nodeName": NODE, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": image, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", "echo via-nvidia-runtime; exec sleep 3600"]}]}}
    core.create_namespaced_pod("default", body)
    try:
        deadline = time.time() + 60
        while True:
            p = core.read_namespaced_pod(name, "default")
            if p.status.phase == "Running":
                break
            assert time.time() < deadline, p.status
            time.sleep(1)
        cid = p.status.container_statuses[0].container_id.split("://", 1)[1]
        info = subprocess.run([os.path.join(KN_BIN, "ctr"), "--address", os.path.join(KN_DIR, "run", "containerd.sock"),
                               "-n", "k8s.io", "containers", "info", cid], capture_output=True, text=True, check=True).stdout
        runtime = json.loads(info)["Runtime"]
        # the runc shim's options (a protobuf message, base64 in ctr's JSON) name the binary it runs
        options = base64.b64decode(runtime["Options"]["value"])
        assert runtime["Name"] == "io.containerd.runc.v2", runtime
        assert os.path.join(KN_BIN, "nvidia-container-runtime").encode() in options, options
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def test_the_versions_that_ran():
    now = pods()
    assert 'version="%s"' % DP_VERSION in pod_log(now["nvidia-device-plugin-daemonset"], "nvidia-device-plugin")
    assert 'version="%s"' % NFD_VERSION in pod_log(now["nfd-worker"], "worker")
    for app in ("nvidia-device-plugin-daemonset", "gpu-feature-discovery"):
        for c in statuses(now[app]):
            assert c.image == "%s/nvidia/k8s-device-plugin:%s" % (REGISTRY, DP_VERSION), c.image


def test_device_plugin_and_gfd_report_no_gpu():
    now = pods()
    dp = pod_log(now["nvidia-device-plugin-daemonset"], "nvidia-device-plugin")
    assert "No devices found. Waiting indefinitely." in dp
    # the same log through the API server, which asks the kubelet at the Node's address
    via_api = core.read_namespaced_pod_log(now["nvidia-device-plugin-daemonset"].metadata.name, NS,
                                           container="nvidia-device-plugin")
    assert "No devices found. Waiting indefinitely." in via_api
    # config-manager (init and sidecar) read the node's config label and linked the rendered default config
    assert "Successfully updated to config: default" in pod_log(now["nvidia-device-plugin-daemonset"], "config-manager-init")
    assert "Writing labels to output file" in pod_log(now["gpu-feature-discovery"], "gpu-feature-discovery")
    n = core.read_node(NODE)
    assert "nvidia.com/gpu" not in (n.status.allocatable or {})
    assert "nvidia.com/gpu.product" not in n.metadata.labels


def nodefeature_labels(timeout=60):
    deadline = time.time() + timeout
    while True:
        try:
            nf = custom.get_namespaced_custom_object("nfd.k8s-sigs.io", "v1alpha1", NS, "nodefeatures", NODE)
            labels = nf.get("spec", {}).get("labels") or {}
            if "nvidia.com/gfd.timestamp" in labels:
                return labels
        except client.ApiException as e:
            if e.status != 404:
                raise
        if time.time() > deadline:
            pytest.fail("no NodeFeature with GFD's labels for %s in %d s" % (NODE, timeout))
        time.sleep(1)


def our_labels():
    """gpu_facts on this machine (the same module the play ran): the labels we compute."""
    r = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible"), "localhost", "-o", "-m", "gpuops.nvidia.gpu_facts"],
                       capture_output=True, text=True, check=True, cwd=ROOT,
                       env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")))
    return json.loads(r.stdout.split("=>", 1)[1])["ansible_facts"]["gpu"]["labels"]


def test_nfd_labels_equal_ours():
    theirs = nodefeature_labels()
    mine = {k: v for k, v in our_labels().items() if k.startswith(NFD)}
    # the families we compute: kernel version, OS release, NVIDIA PCI functions
    families = ("kernel-version.", "system-os_release.", "pci-10de.")
    theirs_f = {k: v for k, v in theirs.items() if k.startswith(tuple(NFD + f for f in families))}
    assert any(k.startswith(NFD + "kernel-version.") for k in theirs_f), theirs
    assert any(k.startswith(NFD + "system-os_release.") for k in theirs_f), theirs
    assert theirs_f == mine, {"nfd only": sorted(set(theirs_f.items()) - set(mine.items())),
                              "ours only": sorted(set(mine.items()) - set(theirs_f.items()))}
    # and NFD's master put the worker's labels on the Node (its annotation lists what it owns)
    n = core.read_node(NODE)
    owned = set(n.metadata.annotations["nfd.node.kubernetes.io/feature-labels"].split(","))
    for k, v in theirs_f.items():
        assert k[len(NFD):] in owned and n.metadata.labels.get(k) == v, k
    # GFD's output reached the Node through NFD's local source (features.d on the host)
    assert n.metadata.labels.get("nvidia.com/vgpu.present") == "false"


def test_second_run_changes_nothing(inventory):
    before = {a: p.metadata.uid for a, p in pods().items()}
    r = playbook(inventory, timing=True)
    assert recap_changed(r.stdout) == {NODE: 0, "localhost": 0}, r.stdout[-3000:]
    time.sleep(3)
    assert {a: p.metadata.uid for a, p in pods().items()} == before


def doctor(inventory):
    r = _playbook(inventory=inventory, vars_file=VARS, playbook="doctor.yml", check=True)
    return r.stdout


def findings(out, fid):
    return [line for line in out.splitlines() if "] %s:" % fid in line]


def test_doctor_reads_the_healthy_pods_and_names_a_missing_workload_label(inventory):
    """The component pods are healthy: no component-pod finding. The doctor is told the node runs VMs
    (gpu_workload vm-passthrough, given to the doctor alone); the real Node has no nvidia.com/gpu.workload.config
    label (node_labels gives a node without a GPU none): it names that as why VMs see no GPU, with the kubectl
    fix; labelled as the fix says, it is quiet."""
    workload = "nvidia.com/gpu.workload.config"

    def ask():
        r = _playbook("-e", "gpu_workload=vm-passthrough", inventory=inventory, vars_file=VARS, playbook="doctor.yml",
                      check=True)
        return r.stdout, findings(r.stdout, "node-workload-label")

    out, hits = ask()
    assert not [line for line in out.splitlines() if re.search(r"\] component-pod", line)], out[-4000:]
    assert len(hits) == 1 and "[ERROR]" in hits[0] and "VMs on it see no GPU" in hits[0], out[-4000:]
    assert "kubectl label node %s %s=vm-passthrough --overwrite" % (NODE, workload) in out
    core.patch_node(NODE, {"metadata": {"labels": {workload: "vm-passthrough"}}})
    try:
        out, hits = ask()
        assert not hits, out[-4000:]
    finally:
        core.patch_node(NODE, {"metadata": {"labels": {workload: None}}})


def test_gfd_crash_loop_is_named_by_the_doctor_and_repaired(inventory):
    """GFD as the GPU Operator runs it (GFD_FAIL_ON_INIT_ERROR true) on a node without a GPU: NVIDIA's binary
    exits, the kubelet restarts it, and the doctor names the crash loop with its fix; the lane's setting back
    makes it run again."""
    playbook(inventory, "-e", "gfd_fail_on_init_error=true")
    deadline = time.time() + 90
    while True:
        p = pods().get("gpu-feature-discovery")
        waiting = [s.state.waiting.reason for s in statuses(p) if p and s.state.waiting] if p else []
        if "CrashLoopBackOff" in waiting:
            break
        assert time.time() < deadline, "GFD did not crash-loop: %s" % (p and p.status)
        time.sleep(1)
    # GFD v0.17.4's words for "no NVML here" (it finds no device discovery strategy that works)
    log = pod_log(p, "gpu-feature-discovery")
    assert "failed to create resource manager" in log, log[-2000:]
    # the doctor reads one moment of the loop; the few milliseconds the restarted container runs before it exits
    # again read as a restart warning: a second look then
    for _ in range(3):
        out = doctor(inventory)
        hits = findings(out, "component-pod-crashloop")
        if hits:
            break
        time.sleep(2)
    assert any(p.metadata.name in h and "gpu-feature-discovery" in h for h in hits), out[-4000:]
    assert "logs %s -c gpu-feature-discovery --previous" % p.metadata.name in out
    playbook(inventory)
    wait_pods(APPS)


def test_uninstall_removes_pods_and_our_labels(inventory):
    r = playbook(inventory, "-e", "gpuops_cluster_state=absent", timing=True)
    assert recap_changed(r.stdout).get("localhost", 0) > 0
    deadline = time.time() + 90
    while pods():
        assert time.time() < deadline, "pods left: %s" % sorted(pods())
        time.sleep(1)
    n = core.read_node(NODE)
    for k in ("nvidia.com/gpu.deploy.device-plugin", "nvidia.com/gpu.deploy.gpu-feature-discovery"):
        assert k not in n.metadata.labels
    # NFD's prune Job (nfd_prune_on_uninstall) ran on this node for real: nothing NFD set is left
    assert not [k for k in n.metadata.labels if k.startswith(NFD)], n.metadata.labels
    assert not [k for k in (n.metadata.annotations or {}) if k.startswith("nfd.node.kubernetes.io/")], n.metadata.annotations


def test_stop_leaves_nothing_running():
    node_sh("stop")
    # -ww: without a terminal ps cuts each line at 80 columns, and a state dir late in a long line would hide
    ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    # the daemons name their state dir; the pods' processes their binaries
    left = [line for line in ps.splitlines() if KN_DIR in line or "svcproxy.py" in line
            or re.match(r"(\S*/)?(nfd-master|nfd-worker|nvidia-device-plugin|gpu-feature-discovery|config-manager)\b", line)]
    assert not left, left
    with open("/proc/mounts", encoding="utf-8") as f:
        mounts = [line for line in f if KN_DIR in line]
    assert not mounts, mounts
    lo = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=True).stdout
    assert "10.96.0.1/" not in lo and NODE_IP + "/" not in lo
