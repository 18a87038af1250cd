# SPDX-License-Identifier: Apache-2.0
"""list_items: a LIST read in pages (limit/continue) as the API server serves them, the restart when a continue token
expired, and the page size's input check. A stand-in answers like the API server (items in name order, a continue
token while more remain); the modules against a real API server, pages included: the cluster lane
(test_lists_are_read_in_pages).

Client: every request's timeouts, cut to a deadline, its retries and its messages -- the rules one by one, then the
client itself over real sockets (k8s_api_server, a misbehaving API server on 127.0.0.1) with the clock's pauses
recorded instead of slept. The modules over the same sockets: tests/unit/security/test_k8s_hangs.py."""
from __future__ import annotations

import json
import tempfile
import time
from types import SimpleNamespace

import pytest
from k8s_api_server import ApiServer, node_list, silent_listener, status, write_kubeconfig
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import GoneError, InternalServerError, TooManyRequestsError

from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_client as kc
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_client import list_items, list_problems


class Server:
    """GET of a LIST: ``limit`` objects from the one the continue token names; ``gone_on`` continue tokens answer
    410 (expired), as the API server does once its snapshot is compacted away."""

    def __init__(self, count, gone_on=()):
        self.objects = [{"metadata": {"name": "node-%05d" % i}} for i in range(count)]
        self.gone_on, self.calls = set(gone_on), []

    def request(self, method, path, query_params=None, header_params=None, serialize=True, deadline=None):
        assert method == "get" and serialize is False and deadline == "d"
        params = dict(query_params or [])
        self.calls.append((path, list(query_params or []), dict(header_params or {})))
        token = params.get("continue")
        if token in self.gone_on:
            raise GoneError(ApiException(status=410, reason="Gone"))
        start = int(token) if token else 0
        limit = params.get("limit") or len(self.objects)
        items = self.objects[start:start + limit]
        meta = {"resourceVersion": "42"}
        if start + limit < len(self.objects):
            meta["continue"] = str(start + limit)
        return SimpleNamespace(data=json.dumps({"kind": "NodeList", "metadata": meta, "items": items}))


def names(items):
    return [o["metadata"]["name"] for o in items]


@pytest.mark.parametrize("count, page, requests", [
    (0, 500, 1), (499, 500, 1), (500, 500, 1), (501, 500, 2), (1200, 500, 3), (5000, 500, 10), (7, 2, 4), (1200, 0, 1)])
def test_every_item_once_in_order_one_request_a_page(count, page, requests):
    server = Server(count)
    items, made = list_items(server, "/api/v1/nodes", page, deadline="d")
    assert names(items) == names(server.objects) and made == requests == len(server.calls)
    for i, (_path, params, _headers) in enumerate(server.calls):
        assert (("limit", page) in params) == bool(page)
        assert (dict(params).get("continue") is None) == (i == 0)


def test_selectors_and_headers_go_with_every_page():
    server = Server(1100)
    query = [("labelSelector", "nvidia.com/gpu.present=true")]
    headers = {"Accept": "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"}
    items, made = list_items(server, "/api/v1/nodes", 500, query, headers, "d")
    assert len(items) == 1100 and made == 3
    assert all(params[0] == query[0] and hdrs == headers for _path, params, hdrs in server.calls)
    assert query == [("labelSelector", "nvidia.com/gpu.present=true")]  # the caller's list is not extended


def test_an_expired_continue_token_reads_the_list_again_whole_once():
    server = Server(1200, gone_on={"500"})
    items, made = list_items(server, "/api/v1/nodes", 500, deadline="d")  # every page, the restart's too
    # the first page's items are not kept twice: the whole list comes from the one request after the 410
    assert names(items) == names(server.objects) and made == 3
    assert server.calls[-1][1] == []  # no limit, no continue


def test_a_refused_first_page_is_the_callers_error():
    class Refusing(Server):
        def request(self, *args, **kwargs):
            raise GoneError(ApiException(status=410, reason="Gone"))

    with pytest.raises(GoneError):
        list_items(Refusing(3), "/api/v1/nodes", 500, deadline="d")


@pytest.mark.parametrize("size, ok", [(None, True), (0, True), (1, True), (500, True), (-1, False)])
def test_page_size_check(size, ok):
    problems = list_problems({"list_page_size": size})
    assert (problems == []) == ok
    if not ok:
        assert "list_page_size" in problems[0] and "-1" in problems[0]


# --- the rules ---

def test_request_limits_are_the_timeouts_cut_to_what_the_deadline_leaves():
    assert kc.request_limits((10, 60), None) == {"connect": (10, False), "read": (60, False)}
    assert kc.request_limits((10, 60), 100) == {"connect": (10, False), "read": (60, False)}
    assert kc.request_limits((10, 60), 30) == {"connect": (10, False), "read": (30, True)}
    assert kc.request_limits((10, 60), 4) == {"connect": (4, True), "read": (4, True)}


@pytest.mark.parametrize("headers, seconds", [
    ({"Retry-After": "1"}, 1), ({"retry-after": " 20 "}, 20), ({}, None), (None, None),
    ({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}, None), ({"Retry-After": "-1"}, None),
    ({"Retry-After": "1.5"}, None), ({"Retry-After": "1 2"}, None)])
def test_retry_after_is_read_in_seconds_only(headers, seconds):
    assert kc.retry_after(headers) == seconds


@pytest.mark.parametrize("method, content_type, ok", [
    ("get", None, True), ("GET", None, True), ("patch", "application/apply-patch+yaml", True),
    ("patch", "application/merge-patch+json", False), ("post", None, False), ("delete", None, False)])
def test_reads_and_server_side_applies_are_the_requests_sent_again(method, content_type, ok):
    assert kc.idempotent(method, content_type) is ok


@pytest.mark.parametrize("status, repeatable, wait, tries, left, decision", [
    (429, False, 1, 1, None, (1, None)),            # throttled: any request, after Retry-After
    (429, False, None, 2, None, (1.0, None)),       # without Retry-After: the backoff
    (503, True, 0, 1, None, (0, None)),
    (500, True, None, 1, None, (0.5, None)),
    (504, True, None, 3, None, (2.0, None)),
    (None, True, None, 1, None, (0.5, None)),       # connection lost before an answer
    (500, True, None, 4, None, (None, "4 tries")),  # at most RETRIES more
    (500, False, None, 1, None, (None, None)),      # a write that is not idempotent: its effect is unknown
    (None, False, None, 1, None, (None, None)),
    (404, True, None, 1, None, (None, None)), (410, True, None, 1, None, (None, None)),
    (429, True, 31, 1, None, (None, "Retry-After 31 s, longer than the 30 s waited at most")),
    (429, True, 20, 1, 2.93, (None, "Retry-After 20 s, more than the 2.9 s wait.timeout has left")),
    (500, True, None, 3, 1.5, (None, "next try in 2 s, more than the 1.5 s wait.timeout has left")),
])
def test_retry_decision(status, repeatable, wait, tries, left, decision):
    assert kc.retry_decision(status, repeatable, wait, tries, left, "wait.timeout") == decision


@pytest.mark.parametrize("params, problems", [
    ({"connect_timeout": 10.0, "request_timeout": 60.0}, []), ({}, []),
    ({"connect_timeout": 0.0}, ["connect_timeout must be a number of seconds above 0 and at most 3600, got 0"]),
    ({"request_timeout": 3600.5, "connect_timeout": -1.0}, [
        "connect_timeout must be a number of seconds above 0 and at most 3600, got -1",
        "request_timeout must be a number of seconds above 0 and at most 3600, got 3600.5"]),
])
def test_timeout_problems(params, problems):
    assert kc.timeout_problems(params) == problems


def test_api_error_says_why_a_request_was_not_tried_again():
    exc = ApiException(status=503, reason="Service Unavailable")
    exc.body = json.dumps({"message": "apiserver down"})
    assert kc.api_error(exc) == "503 apiserver down"
    exc.retry_note = "4 tries"
    assert kc.api_error(exc) == "503 apiserver down (4 tries)"
    assert kc.api_error(kc.RequestTimeout("GET /version timed out after 1 s (read)")) == \
        "GET /version timed out after 1 s (read)"


# --- the client over real sockets ---

def params(kubeconfig, **kw):
    out = {k: None for k in kc.connection_spec()}
    out.update(kubeconfig=kubeconfig, connect_timeout=kw.pop("connect_timeout", 2.0),
               request_timeout=kw.pop("request_timeout", 2.0), **kw)
    return out


def client(tmp_path, url, monkeypatch, **kw):
    """A Client over ``url`` (discovery cached under tmp_path), its pauses recorded in client.slept, not slept."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the library's discovery cache: this test's own
    dyn = kc.dynamic_client(params(write_kubeconfig(tmp_path, url), **kw), 4)
    dyn.slept = []
    dyn.sleep = dyn.slept.append
    return dyn


def test_the_default_timeouts_go_with_every_request(tmp_path, monkeypatch):
    seen = []
    real = kc.DynamicClient.request

    def spy(self, method, path, body=None, **kw):
        seen.append((path, kw.get("_request_timeout")))
        return real(self, method, path, body=body, **kw)
    monkeypatch.setattr(kc.DynamicClient, "request", spy)
    with ApiServer({("GET", "/api/v1/nodes"): [{"body": node_list("a")}]}) as api:
        dyn = client(tmp_path, api.url, monkeypatch, connect_timeout=None, request_timeout=None)
        dyn.resources.get(api_version="v1", kind="Node")
        list_items(dyn, "/api/v1/nodes", 500)
    # discovery's requests (the library's own) and ours
    assert {"/version", "/apis", "api/v1"} <= {p for p, _t in seen[:-1]} and seen[-1][0] == "/api/v1/nodes"
    assert {t for _p, t in seen} == {(kc.CONNECT_TIMEOUT, kc.REQUEST_TIMEOUT)} == {(10, 60)}


def test_an_unavailable_api_group_is_skipped_by_discovery_without_retries(tmp_path, monkeypatch):
    down = {"status": 503, "body": status(503, "ServiceUnavailable", "the aggregated API's service is down")}
    with ApiServer({("GET", "/apis/apps/v1"): [down]}) as api:
        dyn = client(tmp_path, api.url, monkeypatch)
        assert dyn.resources.get(api_version="v1", kind="Node").kind == "Node"
    assert len(api.seen("GET", "/apis/apps/v1")) == 1 and dyn.slept == []
    assert kc.GROUP_DISCOVERY.fullmatch("/apis/metrics.k8s.io/v1beta1") and kc.GROUP_DISCOVERY.fullmatch("api/v1")
    assert not kc.GROUP_DISCOVERY.fullmatch("/api/v1/nodes") and not kc.GROUP_DISCOVERY.fullmatch("/apis/apps/v1/daemonsets")


def test_a_silent_server_times_out_naming_the_request(tmp_path, monkeypatch):
    with silent_listener() as url:
        start = time.monotonic()
        with pytest.raises(kc.RequestTimeout, match=r"^GET /version timed out after 0\.5 s \(read\)$") as err:
            client(tmp_path, url, monkeypatch, request_timeout=0.5)
    assert time.monotonic() - start < 3 and err.value.by_deadline is False


def test_a_deadline_cuts_the_read_timeout_and_says_so(tmp_path, monkeypatch):
    with ApiServer({("GET", "/api/v1/nodes"): [{"silent": True}]}) as api:
        dyn = client(tmp_path, api.url, monkeypatch, request_timeout=30.0)
        start = time.monotonic()
        with pytest.raises(kc.RequestTimeout) as err:
            list_items(dyn, "/api/v1/nodes", 2, deadline=kc.Deadline(time.monotonic() + 0.6, "wait.timeout"))
        assert time.monotonic() - start < 3
        assert str(err.value) == ("GET /api/v1/nodes?limit=2 timed out after 0.6 s "
                                  "(read, cut to what wait.timeout had left)") and err.value.by_deadline
        with pytest.raises(kc.RequestTimeout, match="^GET /api/v1/nodes not sent: wait.timeout is over$") as err:
            dyn.request("get", "/api/v1/nodes", deadline=kc.Deadline(time.monotonic(), "wait.timeout"))
        assert err.value.by_deadline and len(api.seen("GET", "/api/v1/nodes")) == 1


def test_throttled_then_failing_reads_are_tried_again_after_retry_after_or_the_backoff(tmp_path, monkeypatch):
    throttled = {"status": 429, "headers": {"Retry-After": "3"}, "body": status(429, "TooManyRequests", "slow down")}
    broken = {"status": 500, "body": status(500, "InternalError", "etcd hiccup")}
    with ApiServer({("GET", "/api/v1/nodes"): [throttled, broken, broken, {"body": node_list("a", "b")}]}) as api:
        dyn = client(tmp_path, api.url, monkeypatch)
        items, made = list_items(dyn, "/api/v1/nodes", 500)
    assert [o["metadata"]["name"] for o in items] == ["a", "b"] and made == 1  # one request, tried four times
    assert dyn.slept == [3, 1.0, 2.0] and len(api.seen("GET", "/api/v1/nodes")) == 4


def test_a_persistent_5xx_ends_after_four_tries_with_the_servers_answer(tmp_path, monkeypatch):
    broken = {"status": 500, "body": status(500, "InternalError", "etcd down")}
    with ApiServer({("GET", "/api/v1/nodes"): [broken]}) as api:
        dyn = client(tmp_path, api.url, monkeypatch)
        with pytest.raises(InternalServerError) as err:
            list_items(dyn, "/api/v1/nodes", 500)
    assert dyn.slept == [0.5, 1.0, 2.0] and len(api.seen("GET", "/api/v1/nodes")) == 4
    assert kc.api_error(err.value) == "500 etcd down (4 tries)"


def test_a_write_that_is_not_idempotent_is_not_sent_again_after_a_5xx(tmp_path, monkeypatch):
    broken = {"status": 500, "body": status(500, "InternalError", "webhook failed")}
    with ApiServer({("PATCH", "/api/v1/nodes/a"): [broken, {"body": {}}]}) as api:
        dyn = client(tmp_path, api.url, monkeypatch)
        with pytest.raises(InternalServerError):
            dyn.request("patch", "/api/v1/nodes/a", body={"metadata": {"labels": {"x": "y"}}},
                        content_type="application/merge-patch+json", serialize=False)
        assert len(api.seen("PATCH")) == 1 and dyn.slept == []
        # server-side apply is: the same manifest under the same manager twice is applied once
        api.script[("PATCH", "/api/v1/nodes/a")] = [broken, {"body": {}}]
        dyn.request("patch", "/api/v1/nodes/a", body={"metadata": {"labels": {"x": "y"}}},
                    content_type=kc.APPLY_PATCH, field_manager="m", serialize=False)
        assert len(api.seen("PATCH")) == 3 and dyn.slept == [0.5]


def test_429_beyond_what_the_deadline_leaves_is_not_waited_for(tmp_path, monkeypatch):
    throttled = {"status": 429, "headers": {"Retry-After": "20"}, "body": status(429, "TooManyRequests", "slow down")}
    with ApiServer({("GET", "/api/v1/nodes"): [throttled]}) as api:
        dyn = client(tmp_path, api.url, monkeypatch)
        with pytest.raises(TooManyRequestsError) as err:
            list_items(dyn, "/api/v1/nodes", 500, deadline=kc.Deadline(time.monotonic() + 5, "wait.timeout"))
    assert dyn.slept == [] and len(api.seen("GET", "/api/v1/nodes")) == 1
    assert kc.api_error(err.value).startswith("429 slow down (Retry-After 20 s, more than the ")


def test_a_connection_refused_is_tried_again_for_a_read_then_reported(tmp_path, monkeypatch):
    with ApiServer() as api:
        dyn = client(tmp_path, api.url, monkeypatch)
    dyn.client.rest_client.pool_manager.clear()  # the server is gone: nothing listens on its port any more
    with pytest.raises(Exception) as err:
        list_items(dyn, "/api/v1/nodes", 500)
    assert dyn.slept == [0.5, 1.0, 2.0] and "4 tries" in kc.api_error(err.value), kc.api_error(err.value)
