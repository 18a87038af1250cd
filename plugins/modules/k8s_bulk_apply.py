#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_bulk_apply
short_description: Server-side apply of many Kubernetes objects at once, skipping those already as wanted
version_added: 1.1.0
description:
  - Applies a list of manifests with server-side apply under one field manager, O(concurrency) requests at a
    time, with one read per kind and namespace (a LIST, or a GET for a single object) instead of a read per
    object.
  - An object is not sent at all when the field manager's applied fields are exactly the manifest's fields
    and every one already has the manifest's value (what the API server would find too). A no-op run
    therefore makes no write request.
  - C(changed) compares each object's fields involved (the manifest's, and the field manager's before and
    after) and the field manager's field set; status moving between the read and the write (a node's
    heartbeat) is not a change.
  - Built for fleets (node labels and taints of thousands of nodes, per-node Jobs). Deletions, waits and
    reads are left to C(kubernetes.core.k8s) and C(kubernetes.core.k8s_info).
  - Part of the action group C(gpuops.nvidia.k8s), which extends C(kubernetes.core.k8s); C(module_defaults)
    given for C(group/gpuops.nvidia.k8s) reach this module and every kubernetes.core k8s module. Defaults
    given only for C(group/kubernetes.core.k8s) do not reach this module.
  - Connection options and their environment variables are those of C(kubernetes.core); needs the
    C(kubernetes) Python library on the host the module runs on.
author:
  - gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details:
      - Every write is sent as a dry run (C(dryRun=All)); the server validates and answers as if applied.
      - An object in a Namespace, or of a CRD, that the same run would create cannot be dry-run (the dry run
        creates neither); it is reported as created, unvalidated.
  diff_mode:
    support: full
    details: One entry per changed object, the fields involved before and after.
  idempotent:
    support: full
options:
  objects:
    description:
      - The manifests (each with C(apiVersion), C(kind), C(metadata.name), and C(metadata.namespace) for
        namespaced kinds). The same object twice is refused before any request.
      - Applied in up to three waves, each read and applied before the next is read - Namespaces,
        CustomResourceDefinitions, PriorityClasses, RuntimeClasses and StorageClasses first; workloads
        (DaemonSet, Deployment, StatefulSet, ReplicaSet, Job, CronJob, Pod) last; every other kind
        between - so what a workload refers to exists before its pods start. Objects of a kind whose
        CRD is in the same list are applied once the API server serves that kind (up to 30 s).
      - When an object fails, the objects of the later waves are not sent (each is listed in C(failed)).
    type: list
    elements: dict
    required: true
  field_manager:
    description: The server-side apply field manager. Fields it applied before and not given now are removed.
    type: str
    required: true
  force_conflicts:
    description: Take over fields another manager owns (otherwise such an object fails with a conflict).
    type: bool
    default: false
  concurrency:
    description: Writes in flight at once (1-256).
    type: int
    default: 16
  kubeconfig:
    description:
      - Path to a kubeconfig file (or its content as a dict). Default C(K8S_AUTH_KUBECONFIG), then
        C(~/.kube/config), then the in-cluster service account.
    type: raw
  context:
    description: The kubeconfig context (default C(K8S_AUTH_CONTEXT), then the current context).
    type: str
  host:
    description: API server URL, for token authentication with O(api_key) (default C(K8S_AUTH_HOST)).
    type: str
  api_key:
    description: Bearer token (default C(K8S_AUTH_API_KEY)).
    type: str
  validate_certs:
    description: Verify the API server's certificate (default C(K8S_AUTH_VERIFY_SSL), then true).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description: CA bundle for the API server (default C(K8S_AUTH_SSL_CA_CERT)).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description: Client certificate (default C(K8S_AUTH_CERT_FILE)).
    type: path
    aliases: [cert_file]
  client_key:
    description: Client key (default C(K8S_AUTH_KEY_FILE)).
    type: path
    aliases: [key_file]
  username:
    description: Basic authentication user (default C(K8S_AUTH_USERNAME)).
    type: str
  password:
    description: Basic authentication password (default C(K8S_AUTH_PASSWORD)).
    type: str
  proxy:
    description: HTTP proxy for the API server (default C(K8S_AUTH_PROXY)).
    type: str
  no_proxy:
    description: Hosts reached without the proxy (default C(K8S_AUTH_NO_PROXY)).
    type: str
  impersonate_user:
    description: User to act as (default C(K8S_AUTH_IMPERSONATE_USER)).
    type: str
  impersonate_groups:
    description:
      - Group to act as (default C(K8S_AUTH_IMPERSONATE_GROUPS)). One group at most (the client sends one
        header value); more are refused.
    type: list
    elements: str
  persist_config:
    description: Accepted for C(module_defaults) shared with C(kubernetes.core); refreshed tokens are not written back.
    type: bool
  proxy_headers:
    description: Accepted for C(module_defaults) shared with C(kubernetes.core); not used.
    type: dict
requirements:
  - kubernetes (Python library, the one kubernetes.core uses)
notes:
  - Objects are applied whole one by one; when some fail the others stay applied (a rerun finishes the
    rest) and the failure lists each failed object with the API server's answer.
seealso:
  - module: kubernetes.core.k8s
"""

EXAMPLES = r"""
- name: Label and taint the GPU nodes (only the nodes that differ are written)
  gpuops.nvidia.k8s_bulk_apply:
    field_manager: gpuops-node-labels
    force_conflicts: true
    objects:
      - apiVersion: v1
        kind: Node
        metadata: {name: gpu-1, labels: {nvidia.com/gpu.deploy.device-plugin: "true"}}
        spec: {taints: []}
"""

RETURN = r"""
created:
  description: Objects created (C(Kind/name) or C(Kind/namespace/name)).
  type: list
  elements: str
  returned: always
updated:
  description: Objects the apply changed.
  type: list
  elements: str
  returned: always
unchanged:
  description: Objects sent whose apply changed nothing.
  type: list
  elements: str
  returned: always
in_sync:
  description: How many objects were already as wanted and not sent.
  type: int
  returned: always
applied:
  description: How many objects were sent.
  type: int
  returned: always
failed:
  description: Objects the API server refused, with its answer.
  type: list
  elements: dict
  returned: on failure
requests:
  description: Requests made, C(read) (one per kind and namespace) and C(apply) (one per object sent).
  type: dict
  returned: always
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib
from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, HostError, InputError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_bulk import Applier, check_objects

try:
    from kubernetes import client as k8s_client, config as k8s_config
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError
    HAS_K8S = True
except ImportError:
    HAS_K8S = False


def argument_spec():
    return dict(
        objects=dict(type="list", elements="dict", required=True),
        field_manager=dict(type="str", required=True),
        force_conflicts=dict(type="bool", default=False),
        concurrency=dict(type="int", default=16),
        kubeconfig=dict(type="raw", fallback=(env_fallback, ["K8S_AUTH_KUBECONFIG"])),
        context=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_CONTEXT"])),
        host=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_HOST"])),
        api_key=dict(type="str", no_log=True, fallback=(env_fallback, ["K8S_AUTH_API_KEY"])),
        validate_certs=dict(type="bool", aliases=["verify_ssl"], fallback=(env_fallback, ["K8S_AUTH_VERIFY_SSL"])),
        ca_cert=dict(type="path", aliases=["ssl_ca_cert"], fallback=(env_fallback, ["K8S_AUTH_SSL_CA_CERT"])),
        client_cert=dict(type="path", aliases=["cert_file"], fallback=(env_fallback, ["K8S_AUTH_CERT_FILE"])),
        client_key=dict(type="path", aliases=["key_file"], no_log=False,
                        fallback=(env_fallback, ["K8S_AUTH_KEY_FILE"])),
        username=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_USERNAME"])),
        password=dict(type="str", no_log=True, fallback=(env_fallback, ["K8S_AUTH_PASSWORD"])),
        proxy=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_PROXY"])),
        no_proxy=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_NO_PROXY"])),
        impersonate_user=dict(type="str", fallback=(env_fallback, ["K8S_AUTH_IMPERSONATE_USER"])),
        impersonate_groups=dict(type="list", elements="str", fallback=(env_fallback, ["K8S_AUTH_IMPERSONATE_GROUPS"])),
        persist_config=dict(type="bool"),
        proxy_headers=dict(type="dict"),
    )


def api_client(params, pool):
    """An ApiClient from the kubernetes.core-style options: explicit host/token, else kubeconfig, else in-cluster."""
    cfg = k8s_client.Configuration()
    kubeconfig = params["kubeconfig"]
    if params["host"] and params["api_key"] and not kubeconfig:
        cfg.host = params["host"]
        cfg.api_key = {"authorization": "Bearer " + params["api_key"]}
    elif isinstance(kubeconfig, dict):
        k8s_config.load_kube_config_from_dict(kubeconfig, context=params["context"], client_configuration=cfg)
    elif kubeconfig or os.path.exists(os.path.join(os.environ.get("HOME", "/"), ".kube", "config")):
        # the client expands ~ itself
        k8s_config.load_kube_config(config_file=kubeconfig or None, context=params["context"],
                                    client_configuration=cfg)
    else:
        k8s_config.load_incluster_config(client_configuration=cfg)
    if params["host"]:
        cfg.host = params["host"]
    if params["validate_certs"] is not None:
        cfg.verify_ssl = params["validate_certs"]
    for opt, attr in (("ca_cert", "ssl_ca_cert"), ("client_cert", "cert_file"), ("client_key", "key_file")):
        if params[opt]:
            setattr(cfg, attr, params[opt])
    for opt in ("username", "password", "proxy", "no_proxy"):
        if params[opt]:
            setattr(cfg, opt, params[opt])
    cfg.connection_pool_maxsize = pool  # one connection per write in flight
    api = k8s_client.ApiClient(configuration=cfg)
    if params["impersonate_user"]:
        api.set_default_header("Impersonate-User", params["impersonate_user"])
    if params["impersonate_groups"]:
        api.set_default_header("Impersonate-Group", params["impersonate_groups"][0])
    return api


def api_error(exc):
    """The API server's own sentence for a refused request."""
    status, body = getattr(exc, "status", None), getattr(exc, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (TypeError, ValueError, AttributeError):
        message = None
    return "%s %s" % (status or "", message or getattr(exc, "reason", None) or exc)


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    if not HAS_K8S:
        module.fail_json(msg=missing_required_lib("kubernetes"))
    p = module.params
    try:
        # every input check before connecting
        applier = Applier(None, None, p["field_manager"], p["concurrency"])
        check_objects(p["objects"])
        if len(p["impersonate_groups"] or []) > 1:
            raise InputError("impersonate_groups: one group at most, got %s" % ", ".join(p["impersonate_groups"]))
    except GpuopsError as exc:
        fail(module, exc)
    try:
        dyn = DynamicClient(api_client(p, p["concurrency"]))
    except Exception as exc:  # pylint: disable=broad-except  # config errors of every kind end here
        fail(module, HostError("cannot reach the API server: %s" % exc))
    resources = {}
    # a kind whose CRD this same run applies is served once the CRD is established (a second or so)
    with_crds = any(o["kind"] == "CustomResourceDefinition" for o in p["objects"])

    def resource(api_version, kind):
        deadline = time.monotonic() + (30 if with_crds and not module.check_mode else 0)
        while (api_version, kind) not in resources:
            try:
                resources[(api_version, kind)] = dyn.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1)
                dyn.resources.invalidate_cache()
        return resources[(api_version, kind)]

    # check mode sends dry runs: a Namespace or CRD of this same run is not created by them, so what is in
    # that namespace, or of that kind, cannot be dry-run; it is reported as it would be created
    run_namespaces = {o["metadata"]["name"] for o in p["objects"] if o["kind"] == "Namespace"}

    def not_there_yet(obj, exc):
        if not module.check_mode:
            return False
        if isinstance(exc, ResourceNotFoundError):
            return with_crds
        return isinstance(exc, NotFoundError) and obj["metadata"].get("namespace") in run_namespaces

    def read(api_version, kind, namespace, names):
        try:
            res = resource(api_version, kind)
        except ResourceNotFoundError:
            if module.check_mode and with_crds:
                return {}
            raise
        ns = namespace if res.namespaced else None
        try:
            if len(names) == 1:
                try:
                    one = json.loads(dyn.request("get", res.path(name=names[0], namespace=ns), serialize=False).data)
                except NotFoundError:
                    return {}
                return {names[0]: one}
            items = json.loads(dyn.request("get", res.path(namespace=ns), serialize=False).data).get("items") or []
        except Exception as exc:  # pylint: disable=broad-except
            raise HostError("cannot read %s %s: %s" % (kind, "in " + ns if ns else "", api_error(exc)))
        wanted = set(names)
        return {o["metadata"]["name"]: o for o in items if o["metadata"]["name"] in wanted}

    def apply(obj):
        try:
            res = resource(obj["apiVersion"], obj["kind"])
            resp = dyn.server_side_apply(res, body=obj, name=obj["metadata"]["name"],
                                         namespace=obj["metadata"].get("namespace") if res.namespaced else None,
                                         force_conflicts=p["force_conflicts"], field_manager=p["field_manager"],
                                         dry_run="All" if module.check_mode else None, serialize=False)
        except Exception as exc:  # pylint: disable=broad-except
            if not_there_yet(obj, exc):
                return obj
            raise HostError(api_error(exc))
        return json.loads(resp.data)

    applier.read, applier.apply = read, apply
    try:
        result, diffs = applier.run(p["objects"])
    except GpuopsError as exc:
        fail(module, exc)
    except Exception as exc:  # pylint: disable=broad-except  # discovery: an unknown kind or API version
        fail(module, HostError("cannot apply: %s" % exc))
    _diff.exit_json(module, result, diffs)


if __name__ == "__main__":
    main()
