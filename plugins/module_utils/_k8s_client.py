# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The API connection of the collection's own Kubernetes modules (``k8s_bulk_apply``, ``k8s_bulk_info``).

Options and environment variables are kubernetes.core's (doc fragment ``gpuops.nvidia.k8s_auth``), so one
``module_defaults`` block for ``group/gpuops.nvidia.k8s`` configures both. Needs the ``kubernetes``
Python library (the one kubernetes.core needs); imported lazily so input checks run without it.

Every request the modules make, the library's discovery included, goes through ``Client.request``: it has a
connect and a read timeout (``connect_timeout``, ``request_timeout``; doc fragment ``gpuops.nvidia.k8s_timeouts``),
cut to what a deadline leaves (a wait's ``timeout``), and is retried as ``retry_decision`` says -- never by urllib3
on its own (its default retries a read that timed out three times, and sleeps a 429's Retry-After unbounded). A
request that times out fails naming itself: ``GET /api/v1/nodes?limit=500 timed out after 5 s (read)``.
"""
from __future__ import annotations

import json
import os
import re
import time
from collections import namedtuple
from urllib.parse import urlencode

from ansible.module_utils.basic import env_fallback, missing_required_lib
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, HostError, InputError, fail

try:
    from kubernetes import client as k8s_client, config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import GoneError
    from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError
    HAS_K8S = True
except ImportError:
    HAS_K8S = False
    DynamicClient = object  # connect() says the library is missing before any Client is made

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


def list_items(dyn, path, page_size, query_params=None, header_params=None, deadline=None):
    """Every item of a LIST, read in pages of ``page_size`` objects (limit and continue, as kubectl reads; 0: one
    request) -> (items, requests made). A continue token that expired before the last page (410 Gone: the server
    keeps a list's snapshot for a few minutes) restarts the list once, in one request. ``deadline``: a Deadline
    every page ends by (None: each has its own timeouts only)."""
    base = list(query_params or [])
    items, token, requests = [], None, 0
    while True:
        params = base + ([("limit", page_size)] if page_size else []) + ([("continue", token)] if token else [])
        requests += 1
        try:
            answer = json.loads(dyn.request("get", path, query_params=params, header_params=header_params or {},
                                            serialize=False, deadline=deadline).data)
        except GoneError:
            if token is None:
                raise
            requests += 1
            answer = json.loads(dyn.request("get", path, query_params=base, header_params=header_params or {},
                                            serialize=False, deadline=deadline).data)
            return answer.get("items") or [], requests
        items.extend(answer.get("items") or [])
        token = (answer.get("metadata") or {}).get("continue")
        if not token or not page_size:
            return items, requests


# seconds to connect, and to wait for the API server's answer (the longest silence while it is awaited or read: the
# API server ends a request of its own after 60 s, --request-timeout)
CONNECT_TIMEOUT = 10
REQUEST_TIMEOUT = 60
TIMEOUT_MAX = 3600
# tries after the first one, for a 429 and (requests that may be repeated) a 5xx or a connection lost before an
# answer; the pause between tries is the answer's Retry-After (at most RETRY_AFTER_MAX seconds), else BACKOFF
# seconds doubling each time
RETRIES = 3
RETRY_AFTER_MAX = 30
BACKOFF = 0.5
RETRY_STATUSES = (500, 502, 503, 504)
APPLY_PATCH = "application/apply-patch+yaml"
# discovery of one API group version: a 503 there is an aggregated API whose service is down, which the library
# skips; asking again would only delay every module run in such a cluster
GROUP_DISCOVERY = re.compile(r"/?(?:api|apis/[^/]+)/[^/]+")

#: a point in time.monotonic() every request ends by, and what set it (for the message)
Deadline = namedtuple("Deadline", "at what")


class RequestTimeout(HostError):
    """A request got no (complete) answer in time. ``by_deadline``: the limit was what a deadline had left, not
    the request's own timeout."""

    def __init__(self, msg, by_deadline=False):
        super().__init__(msg)
        self.by_deadline = by_deadline


def timeout_spec():
    """argument_spec entries of the request timeouts (doc fragment ``gpuops.nvidia.k8s_timeouts``)."""
    return dict(connect_timeout=dict(type="float", default=CONNECT_TIMEOUT),
                request_timeout=dict(type="float", default=REQUEST_TIMEOUT))


def timeout_problems(params):
    """What is wrong with the request timeouts (a list of sentences)."""
    out = []
    for name in ("connect_timeout", "request_timeout"):
        value = params.get(name)
        if value is not None and not 0 < value <= TIMEOUT_MAX:
            out.append("%s must be a number of seconds above 0 and at most %d, got %g" % (name, TIMEOUT_MAX, value))
    return out


def request_limits(timeouts, left):
    """{phase: (seconds, whether the deadline set them)} of one request, for the phases connect and read, given the
    request timeouts (connect, read) and the seconds ``left`` to a deadline (None: no deadline)."""
    return {phase: (limit, False) if left is None or limit <= left else (left, True)
            for phase, limit in zip(("connect", "read"), timeouts)}


def retry_after(headers):
    """An answer's Retry-After in seconds (the delay form; None when absent or a date)."""
    value = None
    for key, text in (headers or {}).items():
        if str(key).lower() == "retry-after":
            value = str(text).strip()
    return int(value) if value is not None and re.fullmatch(r"[0-9]{1,9}", value) else None


def idempotent(method, content_type=None):
    """May the request be sent again after a failure that leaves its effect unknown? Reads, and server-side
    apply: applying the same manifest under the same field manager again changes nothing more."""
    method = method.upper()
    return method in ("GET", "HEAD") or (method == "PATCH" and content_type == APPLY_PATCH)


def retry_decision(status, repeatable, wait, tries, left, what="the deadline"):
    """(seconds to pause before the next try, None) or (None, why not; None when the failure is not one to retry).

    ``status``: the answer's HTTP status, None for a connection lost before any answer; ``repeatable``:
    idempotent(); ``wait``: its Retry-After; ``tries``: tries made; ``left``: seconds to the deadline (None)."""
    if not (status == 429 or (repeatable and (status is None or status in RETRY_STATUSES))):
        return None, None
    if tries > RETRIES:
        return None, "%d tries" % tries
    if wait is not None and wait > RETRY_AFTER_MAX:
        return None, "Retry-After %d s, longer than the %d s waited at most" % (wait, RETRY_AFTER_MAX)
    pause = wait if wait is not None else BACKOFF * 2 ** (tries - 1)
    if left is not None and pause >= left:
        return None, "%s %g s, more than the %.1f s %s has left" % (
            "Retry-After" if wait is not None else "next try in", pause, max(left, 0), what)
    return pause, None


def _seconds(value):
    return "%g" % round(value, 1)


def _failure(exc):
    """'connect' | 'read' (a timeout), 'connection' (lost before an answer), or None, for an urllib3 error."""
    if isinstance(exc, MaxRetryError):
        exc = exc.reason
    if isinstance(exc, NewConnectionError):  # a ConnectTimeoutError subclass: refused, unreachable
        return "connection"
    if isinstance(exc, ConnectTimeoutError):
        return "connect"
    if isinstance(exc, ReadTimeoutError):
        return "read"
    if isinstance(exc, ProtocolError):
        return "connection"
    return None


class Client(DynamicClient):
    """A DynamicClient whose every request (the library's discovery included: it calls ``request`` too) has the
    timeouts, is cut to a ``deadline`` (a Deadline) when one is given, is retried as ``retry_decision`` says, and
    fails naming itself when it times out. ``deadline`` is a keyword of ``request`` and of the calls that end in it
    (``server_side_apply(..., deadline=...)``)."""

    def __init__(self, api, timeouts=(CONNECT_TIMEOUT, REQUEST_TIMEOUT), clock=time.monotonic, sleep=time.sleep):
        self.timeouts, self.clock, self.sleep = timeouts, clock, sleep
        super().__init__(api)

    def request(self, method, path, body=None, deadline=None, **params):
        query = list(params.get("query_params") or [])
        target = "%s %s%s" % (method.upper(), path if path.startswith("/") else "/" + path,
                              "?" + urlencode(query) if query else "")
        repeatable = idempotent(method, params.get("content_type"))
        tries = 0
        while True:
            left = None if deadline is None else deadline.at - self.clock()
            if left is not None and left <= 0:
                raise RequestTimeout("%s not sent: %s is over" % (target, deadline.what), by_deadline=True)
            limits = request_limits(self.timeouts, left)
            tries += 1
            attempt = dict(params, query_params=list(query), header_params=dict(params.get("header_params") or {}))
            try:
                resp = super().request(method, path, body=body,
                                       _request_timeout=(limits["connect"][0], limits["read"][0]), **attempt)
                if params.get("serialize", True) is False:
                    _body = resp.data  # the answer is read here, under the same limits (urllib3 keeps it)
                return resp
            except ApiException as exc:
                error, status, wait = exc, exc.status, retry_after(getattr(exc, "headers", None))
            except Exception as exc:  # pylint: disable=broad-except  # urllib3's errors, sorted by _failure()
                kind = _failure(exc)
                if kind in limits:
                    limit, cut = limits[kind]
                    raise RequestTimeout("%s timed out after %s s (%s%s)" % (
                        target, _seconds(limit), kind, ", cut to what %s had left" % deadline.what if cut else ""),
                        by_deadline=cut) from None
                if kind is None:
                    raise
                error, status, wait = exc, None, None
            if status == 503 and GROUP_DISCOVERY.fullmatch(path):
                raise error
            left = None if deadline is None else deadline.at - self.clock()
            pause, why = retry_decision(status, repeatable, wait, tries, left, deadline.what if deadline else None)
            if pause is None:
                if why:
                    error.retry_note = why
                raise error
            self.sleep(pause)


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
    cfg.retries = False  # Client.request retries; urllib3's own would repeat a timed-out read and sleep any Retry-After
    api = k8s_client.ApiClient(configuration=cfg)
    if params["impersonate_user"]:
        api.set_default_header("Impersonate-User", params["impersonate_user"])
    if params["impersonate_groups"]:
        api.set_default_header("Impersonate-Group", params["impersonate_groups"][0])
    return api


def dynamic_client(params, pool):
    """A Client (discovery cached by the library, its requests under the timeouts) over api_client()."""
    return Client(api_client(params, pool), (params.get("connect_timeout") or CONNECT_TIMEOUT,
                                             params.get("request_timeout") or REQUEST_TIMEOUT))


def connect(module, check, pool):
    """(check(), DynamicClient), or the module fails: without the kubernetes library, when ``check`` (the
    module's own input checks, raising GpuopsError) or the connection options refuse the input -- all of
    that before any connection -- or when no client can be made from the options."""
    if not HAS_K8S:
        module.fail_json(msg=missing_required_lib("kubernetes"))
    try:
        checked = check()
        problems = connection_problems(module.params) + list_problems(module.params) + timeout_problems(module.params)
        if problems:
            raise InputError("; ".join(problems))
    except GpuopsError as exc:
        fail(module, exc)
    try:
        return checked, dynamic_client(module.params, pool)
    except Exception as exc:  # pylint: disable=broad-except  # config errors of every kind end here
        fail(module, HostError("cannot reach the API server: %s" % exc))


def api_error(exc):
    """The API server's own sentence for a refused request (the error's own, for one of the collection's), and why
    it was not tried again when it could have been."""
    if isinstance(exc, GpuopsError):
        return str(exc)
    status, body = getattr(exc, "status", None), getattr(exc, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (TypeError, ValueError, AttributeError):
        message = None
    note = getattr(exc, "retry_note", None)
    return "%s %s%s" % (status or "", message or getattr(exc, "reason", None) or exc, " (%s)" % note if note else "")
