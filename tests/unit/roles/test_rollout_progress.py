# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The components' rollout wait says what it waits for: it goes in slices of gpuops_progress_interval seconds, a
line of output each, never minutes of silence; it ends at the first read that shows every rollout done, and when
the whole time is up it fails naming the total and what is pending.

Run for real: common's rollouts entry point (ansible-playbook, the collection's k8s_bulk_info) against the
scripted API server of tests/unit/plugins/module_utils/k8s_api_server.py, whose DaemonSet list answers "not rolled
out" a number of times before it answers "rolled out"."""
from __future__ import annotations

import os
import subprocess
import sys

import yaml
from conftest import ansible_command

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "plugins", "module_utils"))
import k8s_api_server  # noqa: E402  pylint: disable=wrong-import-position

RETRY = "RETRYING: [localhost]: Wait for every GPU component's DaemonSets and Deployments to roll out"


def daemonset(ready):
    return {"metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator", "generation": 1,
                         "labels": {"app.kubernetes.io/managed-by": "gpuops.nvidia"}},
            "status": {"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2,
                       "numberReady": ready}}


def items(kind, *objs):
    return {"body": {"kind": kind + "List", "apiVersion": "apps/v1", "metadata": {"resourceVersion": "9"},
                     "items": list(objs)}}


def run_rollouts(tmp_path, script, extra):
    discovery = dict(k8s_api_server.DISCOVERY)
    discovery["/apis/apps/v1"] = {"kind": "APIResourceList", "groupVersion": "apps/v1", "resources": [
        {"name": "daemonsets", "singularName": "daemonset", "namespaced": True, "kind": "DaemonSet",
         "verbs": ["get", "list", "patch", "watch"]},
        {"name": "deployments", "singularName": "deployment", "namespaced": True, "kind": "Deployment",
         "verbs": ["get", "list", "patch", "watch"]}]}
    book = tmp_path / "rollouts.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "gpuops.nvidia.common", "tasks_from": "rollouts"}}]}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default")
    old, k8s_api_server.DISCOVERY = k8s_api_server.DISCOVERY, discovery
    try:
        with k8s_api_server.ApiServer(script) as api:
            kubeconfig = k8s_api_server.write_kubeconfig(tmp_path, api.url)
            args = [ansible_command("ansible-playbook"), "-i", "localhost,", "-c", "local", str(book),
                    "-e", "ansible_python_interpreter=" + sys.executable]
            env["K8S_AUTH_KUBECONFIG"] = str(kubeconfig)
            for key, value in extra.items():
                args += ["-e", "%s=%s" % (key, value)]
            res = subprocess.run(args, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=240,
                                 check=False)
            reads = len(api.seen("GET", "/apis/apps/v1/daemonsets"))
    finally:
        k8s_api_server.DISCOVERY = old
    return res, reads


def test_a_slow_rollout_prints_a_line_per_slice_and_ends_when_done(tmp_path):
    pending_then_done = [items("DaemonSet", daemonset(0))] * 5 + [items("DaemonSet", daemonset(2))]
    script = {("GET", "/apis/apps/v1/daemonsets"): pending_then_done,
              ("GET", "/apis/apps/v1/deployments"): [items("Deployment")]}
    res, reads = run_rollouts(tmp_path, script, {"gpuops_progress_interval": 2, "_common_rollout_timeout": 60})
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    lines = [ln for ln in res.stdout.splitlines() if RETRY in ln]
    assert lines, "no progress line while the rollout was pending:\n" + res.stdout[-3000:]
    assert reads >= 6  # it read until the rollout showed done, and stopped there
    assert len(lines) < 10


def test_a_rollout_that_never_ends_fails_naming_the_total_and_what_is_pending(tmp_path):
    script = {("GET", "/apis/apps/v1/daemonsets"): [items("DaemonSet", daemonset(1))],
              ("GET", "/apis/apps/v1/deployments"): [items("Deployment")]}
    res = run_rollouts(tmp_path, script, {"gpuops_progress_interval": 2, "_common_rollout_timeout": 5})[0]
    assert res.returncode != 0
    lines = [ln for ln in res.stdout.splitlines() if RETRY in ln]
    assert len(lines) == 2, lines  # 5 s in slices of 2 s: three module runs, two progress lines between them
    assert "not rolled out in 5 s: DaemonSet/gpu-operator/nvidia-device-plugin-daemonset: 1 ready of 2" in res.stdout, \
        res.stdout[-3000:]
