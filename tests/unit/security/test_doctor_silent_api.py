"""The doctor's reads of the API server (component pods, Nodes, KubeVirt VMIs) against a server that accepts
connections and never answers: kubernetes.core's k8s_info has no request timeout, so each read has a task
timeout (doctor_k8s_read_timeout) and ends as an info finding that says so; the rest of the diagnosis stands."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import yaml
from conftest import ansible_command

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
BOOK = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia", "playbooks", "doctor.yml")
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "plugins", "module_utils"))
import k8s_api_server  # noqa: E402  pylint: disable=wrong-import-position


def test_doctor_against_a_silent_api_server_ends_at_its_read_timeout(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"k8s_nodes": {"hosts": {"node-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "gpu_facts_root": "/"}}}}}}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="default")
    with k8s_api_server.silent_listener() as url:
        kubeconfig = k8s_api_server.write_kubeconfig(tmp_path, url)
        start = time.monotonic()
        r = subprocess.run([ansible_command("ansible-playbook"), "-i", str(inv), BOOK, "-e", "gpuops_kubeconfig=%s" % kubeconfig,
                            "-e", "doctor_k8s_read_timeout=3"], env=env, cwd=str(tmp_path), capture_output=True,
                           text=True, timeout=240, check=False)
        took = time.monotonic() - start
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert took < 90, "the doctor took %.0f s" % took
    # both reads ended and said so; nothing of a pod finding was made up from a read that never came back
    assert "[INFO] component-pods-unknown:" in r.stdout, r.stdout[-4000:]
    assert "[INFO] kubevirt-vmis-unknown:" in r.stdout, r.stdout[-4000:]
    assert "component-pod-missing" not in r.stdout
