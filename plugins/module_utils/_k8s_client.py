# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The API connection of the collection's own Kubernetes modules (``k8s_bulk_apply``, ``k8s_bulk_info``).

Options and environment variables are kubernetes.core's (doc fragment ``gpuops.nvidia.k8s_auth``), so one
``module_defaults`` block for ``group/gpuops.nvidia.k8s`` configures both. Needs the ``kubernetes``
Python library (the one kubernetes.core needs); imported lazily so input checks run without it.
"""
from __future__ import annotations

import json
import os

from ansible.module_utils.basic import env_fallback, missing_required_lib
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, HostError, InputError, fail

try:
    from kubernetes import client as k8s_client, config as k8s_config
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import GoneError
    HAS_K8S = True
except ImportError:
    HAS_K8S = False

# objects per page of a LIST (kubectl's --chunk-size default): a real fleet's Nodes, with the images each one
# reports, run to tens of megabytes in one answer
LIST_PAGE_SIZE = 500


def connection_spec():
    """argument_spec entries of the connection options (kubernetes.core's names and environment)."""
    def env(name, **kw):
        return dict(fallback=(env_fallback, [name]), **kw)
    return dict(
        kubeconfig=env("K8S_AUTH_KUBECONFIG", type="raw"),
        context=env("K8S_AUTH_CONTEXT", type="str"),
        host=env("K8S_AUTH_HOST", type="str"),
        api_key=env("K8S_AUTH_API_KEY", type="str", no_log=True),
        validate_certs=env("K8S_AUTH_VERIFY_SSL", type="bool", aliases=["verify_ssl"]),
        ca_cert=env("K8S_AUTH_SSL_CA_CERT", type="path", aliases=["ssl_ca_cert"]),
        client_cert=env("K8S_AUTH_CERT_FILE", type="path", aliases=["cert_file"]),
        client_key=env("K8S_AUTH_KEY_FILE", type="path", aliases=["key_file"], no_log=False),
        username=env("K8S_AUTH_USERNAME", type="str"),
        password=env("K8S_AUTH_PASSWORD", type="str", no_log=True),
        proxy=env("K8S_AUTH_PROXY", type="str"),
        no_proxy=env("K8S_AUTH_NO_PROXY", type="str"),
        impersonate_user=env("K8S_AUTH_IMPERSONATE_USER", type="str"),
        impersonate_groups=env("K8S_AUTH_IMPERSONATE_GROUPS", type="list", elements="str"),
        persist_config=dict(type="bool"),
        proxy_headers=dict(type="dict"),
    )


def list_spec():
    """argument_spec entry of the LIST page size (doc fragment ``gpuops.nvidia.k8s_list``)."""
    return dict(list_page_size=dict(type="int", default=LIST_PAGE_SIZE))


def list_problems(params):
    """What is wrong with the LIST page size (a list of sentences)."""
    size = params.get("list_page_size")
    if size is not None and size < 0:
        return ["list_page_size must be 0 (one request per LIST) or more, got %d" % size]
    return []


def list_items(dyn, path, page_size, query_params=None, header_params=None):
    """Every item of a LIST, read in pages of ``page_size`` objects (limit and continue, as kubectl reads; 0: one
    request) -> (items, requests made). A continue token that expired before the last page (410 Gone: the server
    keeps a list's snapshot for a few minutes) restarts the list once, in one request."""
    base = list(query_params or [])
    items, token, requests = [], None, 0
    while True:
        params = base + ([("limit", page_size)] if page_size else []) + ([("continue", token)] if token else [])
        requests += 1
        try:
            answer = json.loads(dyn.request("get", path, query_params=params, header_params=header_params or {},
                                            serialize=False).data)
        except GoneError:
            if token is None:
                raise
            requests += 1
            answer = json.loads(dyn.request("get", path, query_params=base, header_params=header_params or {},
                                            serialize=False).data)
            return answer.get("items") or [], requests
        items.extend(answer.get("items") or [])
        token = (answer.get("metadata") or {}).get("continue")
        if not token or not page_size:
            return items, requests


def connection_problems(params):
    """What is wrong with the connection options, before any connection (a list of sentences)."""
    groups = params.get("impersonate_groups") or []
    if len(groups) > 1:
        return ["impersonate_groups: one group at most, got %s" % ", ".join(groups)]
    return []


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
    cfg.connection_pool_maxsize = pool  # one connection per request in flight
    api = k8s_client.ApiClient(configuration=cfg)
    if params["impersonate_user"]:
        api.set_default_header("Impersonate-User", params["impersonate_user"])
    if params["impersonate_groups"]:
        api.set_default_header("Impersonate-Group", params["impersonate_groups"][0])
    return api


def dynamic_client(params, pool):
    """A DynamicClient (discovery cached by the library) over api_client()."""
    return DynamicClient(api_client(params, pool))


def connect(module, check, pool):
    """(check(), DynamicClient), or the module fails: without the kubernetes library, when ``check`` (the
    module's own input checks, raising GpuopsError) or the connection options refuse the input -- all of
    that before any connection -- or when no client can be made from the options."""
    if not HAS_K8S:
        module.fail_json(msg=missing_required_lib("kubernetes"))
    try:
        checked = check()
        problems = connection_problems(module.params) + list_problems(module.params)
        if problems:
            raise InputError("; ".join(problems))
    except GpuopsError as exc:
        fail(module, exc)
    try:
        return checked, dynamic_client(module.params, pool)
    except Exception as exc:  # pylint: disable=broad-except  # config errors of every kind end here
        fail(module, HostError("cannot reach the API server: %s" % exc))


def api_error(exc):
    """The API server's own sentence for a refused request."""
    status, body = getattr(exc, "status", None), getattr(exc, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (TypeError, ValueError, AttributeError):
        message = None
    return "%s %s" % (status or "", message or getattr(exc, "reason", None) or exc)
