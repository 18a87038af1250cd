# SPDX-License-Identifier: Apache-2.0
"""Hostile-input corpus, the API server's side: k8s_bulk_apply, k8s_bulk_info and k8s_node_labels against API
servers that accept a connection and never answer, answer slowly, throttle (429 with Retry-After), fail (5xx) or
expire a LIST's continue token between pages.

Each module runs as Ansible runs it (a Python process of its own, the real ``kubernetes`` library, real sockets
on 127.0.0.1) under a hard limit: a module that hangs is killed and the test fails. Who controls the input: whoever
runs, or sits in front of, the API server the inventory points at. Where it reaches: the controller's time (a play
that never ends) and the module's messages."""
from __future__ import annotations

import json
from urllib.parse import parse_qsl, urlsplit

import pytest

from k8s_api_server import (
    ApiServer, full_listener, node, node_list, run_module_process, silent_listener, status, write_kubeconfig)

GPU = {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}
# python start, the kubernetes library's import and discovery on two shared cores: what a run takes beyond its
# timeouts, at most
MARGIN = 8

MODULES = {
    "k8s_node_labels": {"nodes": [{"name": "gpu-1", "gpu": GPU}], "field_manager": "gpuops-test"},
    "k8s_bulk_info": {"queries": {"nodes": {"kind": "Node"}}},
    "k8s_bulk_apply": {"objects": [node("gpu-1", {"a": "b"})], "field_manager": "gpuops-test"},
}


def run(name, tmp_path, kubeconfig, limit=40, **args):
    return run_module_process(name, dict(MODULES[name], kubeconfig=kubeconfig, **args), tmp_path, limit)


def query(path):
    return dict(parse_qsl(urlsplit(path).query))


def ds(name, ready):
    return {"metadata": {"name": name, "namespace": "gpu-operator", "generation": 1},
            "status": {"observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2,
                       "numberReady": ready}}


def ds_list(*items):
    return {"kind": "DaemonSetList", "apiVersion": "apps/v1", "metadata": {"resourceVersion": "9"}, "items": list(items)}


# --- a listener that accepts and never answers ---

@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_silent_listener_fails_within_the_request_timeout_naming_the_request(tmp_path, name):
    with silent_listener() as url:
        rc, out, took = run(name, tmp_path, write_kubeconfig(tmp_path, url), request_timeout=1, connect_timeout=1)
    assert rc == 1, out
    # the first request is discovery's: the library's own requests carry the timeout as well
    assert "GET /version timed out after 1 s (read)" in out["msg"], out["msg"]
    assert took < 1 + MARGIN, took


def test_a_connection_that_never_completes_fails_within_the_connect_timeout(tmp_path):
    with full_listener() as url:
        rc, out, took = run("k8s_node_labels", tmp_path, write_kubeconfig(tmp_path, url), connect_timeout=1)
    assert rc == 1, out
    assert "GET /version timed out after 1 s (connect)" in out["msg"], out["msg"]
    assert took < 1 + MARGIN, took  # not tried again: a timeout is not retried


def test_a_list_that_is_never_answered_fails_naming_method_path_and_query(tmp_path):
    with ApiServer({("GET", "/api/v1/nodes"): [{"silent": True}]}) as api:
        rc, out, took = run("k8s_node_labels", tmp_path, api.kubeconfig(tmp_path), request_timeout=1.5)
    assert rc == 1, out
    assert "GET /api/v1/nodes?limit=500 timed out after 1.5 s (read)" in out["msg"], out["msg"]
    assert took < 1.5 + MARGIN, took
    assert api.seen("PATCH") == []  # nothing written after a failed read


def test_a_write_that_is_never_answered_is_reported_for_its_object(tmp_path):
    with ApiServer({("GET", "/api/v1/nodes/gpu-1"): [{"body": node("gpu-1")}],
                    ("PATCH", "/api/v1/nodes/gpu-1"): [{"silent": True}]}) as api:
        rc, out, took = run("k8s_bulk_apply", tmp_path, api.kubeconfig(tmp_path), request_timeout=1)
    assert rc == 1, out
    assert "Node/gpu-1: PATCH /api/v1/nodes/gpu-1 timed out after 1 s (read)" in out["msg"], out["msg"]
    # a write that timed out is not sent again: the time is spent, and the next run finds it in sync or not
    assert len(api.seen("PATCH")) == 1
    assert took < 1 + MARGIN, took


# --- an API server that answers slowly ---

@pytest.mark.parametrize("delay, timeout, ok", [(0.5, 3, True), (3, 1, False)])
def test_a_slow_answer_within_the_timeout_is_read_one_beyond_it_fails(tmp_path, delay, timeout, ok):
    with ApiServer({("GET", "/api/v1/nodes"): [{"delay": delay, "body": node_list("gpu-1", "cpu-0")}]}) as api:
        rc, out, took = run("k8s_bulk_info", tmp_path, api.kubeconfig(tmp_path), request_timeout=timeout)
    if ok:
        assert rc == 0, out
        assert [o["metadata"]["name"] for o in out["reads"]["nodes"]["resources"]] == ["gpu-1", "cpu-0"]
    else:
        assert rc == 1, out
        assert "GET /api/v1/nodes?limit=500 timed out after 1 s (read)" in out["msg"], out["msg"]
        assert took < timeout + MARGIN, took


# --- 429 with Retry-After ---

def test_429_with_retry_after_is_honoured_then_the_read_succeeds(tmp_path):
    throttled = {"status": 429, "headers": {"Retry-After": "1"},
                 "body": status(429, "TooManyRequests", "too many requests, please try again later")}
    with ApiServer({("GET", "/api/v1/nodes"): [throttled, {"body": node_list("gpu-1")}]}) as api:
        rc, out, _took = run("k8s_bulk_info", tmp_path, api.kubeconfig(tmp_path))
        times = [t for m, p, _b, t in api.requests if urlsplit(p).path == "/api/v1/nodes"]
    assert rc == 0, out
    assert len(times) == 2 and times[1] - times[0] >= 0.9  # it waited as asked before asking again


def test_429_asking_for_more_than_the_wait_has_left_fails_at_once_with_the_servers_answer(tmp_path):
    throttled = {"status": 429, "headers": {"Retry-After": "20"},
                 "body": status(429, "TooManyRequests", "too many requests, please try again later")}
    with ApiServer({("GET", "/apis/apps/v1/daemonsets"): [throttled]}) as api:
        rc, out, took = run_module_process("k8s_bulk_info", {
            "queries": {"ds": {"kind": "DaemonSet", "api_version": "apps/v1"}},
            "wait": {"condition": "rolled_out", "timeout": 3}, "kubeconfig": api.kubeconfig(tmp_path)}, tmp_path)
    assert rc == 1, out
    assert "429" in out["msg"] and "too many requests" in out["msg"] and "Retry-After 20 s" in out["msg"], out["msg"]
    assert took < 3 + MARGIN and len(api.seen("GET", "/apis/apps/v1/daemonsets")) == 1


# --- 5xx ---

def test_a_5xx_on_a_read_is_retried_then_the_read_succeeds(tmp_path):
    with ApiServer({("GET", "/api/v1/nodes"): [{"status": 500, "body": status(500, "InternalError", "etcd hiccup")},
                                               {"status": 503, "headers": {"Retry-After": "0"},
                                                "body": status(503, "ServiceUnavailable", "starting")},
                                               {"body": node_list("gpu-1")}],
                    ("PATCH", "/api/v1/nodes/gpu-1"): [{"body": node("gpu-1", {"nvidia.com/gpu.present": "true"})}]}) as api:
        rc, out, _took = run("k8s_node_labels", tmp_path, api.kubeconfig(tmp_path))
    assert rc == 0, out
    assert len(api.seen("GET", "/api/v1/nodes")) == 3 and len(api.seen("PATCH")) == 1


def test_a_5xx_on_a_server_side_apply_is_retried(tmp_path):
    # server-side apply is idempotent: the same manifest under the same field manager applied twice is applied once
    with ApiServer({("GET", "/api/v1/nodes/gpu-1"): [{"body": node("gpu-1")}],
                    ("PATCH", "/api/v1/nodes/gpu-1"): [
                        {"status": 504, "body": status(504, "Timeout", "the server was unable to return a response")},
                        {"body": node("gpu-1", {"a": "b"})}]}) as api:
        rc, out, _took = run("k8s_bulk_apply", tmp_path, api.kubeconfig(tmp_path))
    assert rc == 0, out
    assert out["updated"] == ["Node/gpu-1"] and len(api.seen("PATCH")) == 2


def test_a_persistent_5xx_fails_with_the_servers_answer_after_a_bounded_number_of_tries(tmp_path):
    down = {"status": 503, "headers": {"Retry-After": "0"}, "body": status(503, "ServiceUnavailable", "apiserver down")}
    with ApiServer({("GET", "/api/v1/nodes"): [down]}) as api:
        rc, out, took = run("k8s_node_labels", tmp_path, api.kubeconfig(tmp_path))
    assert rc == 1, out
    assert "503" in out["msg"] and "apiserver down" in out["msg"] and "4 tries" in out["msg"], out["msg"]
    assert len(api.seen("GET", "/api/v1/nodes")) == 4
    assert took < MARGIN


# --- an expired continue token mid-list ---

def test_an_expired_continue_token_restarts_the_list_once(tmp_path):
    gone = {"status": 410, "body": status(410, "Expired", "The provided continue parameter is too old")}
    with ApiServer({("GET", "/api/v1/nodes"): [{"body": node_list("a", "b", cont="tok-1")}, gone,
                                               {"body": node_list("a", "b", "c")}]}) as api:
        rc, out, _took = run("k8s_bulk_info", tmp_path, api.kubeconfig(tmp_path), list_page_size=2)
    assert rc == 0, out
    assert [o["metadata"]["name"] for o in out["reads"]["nodes"]["resources"]] == ["a", "b", "c"]
    pages = [query(p) for _m, p in api.seen("GET", "/api/v1/nodes")]
    assert pages == [{"limit": "2"}, {"limit": "2", "continue": "tok-1"}, {}] and out["requests"] == 3


# --- wait.timeout is a deadline ---

def test_a_wait_ends_at_its_timeout_when_the_server_falls_silent_mid_wait(tmp_path):
    with ApiServer({("GET", "/apis/apps/v1/daemonsets"): [{"body": ds_list(ds("dp", 1))}, {"silent": True}]}) as api:
        rc, out, took = run_module_process("k8s_bulk_info", {
            "queries": {"ds": {"kind": "DaemonSet", "api_version": "apps/v1"}},
            "wait": {"condition": "rolled_out", "timeout": 2, "interval": 0.5},
            "kubeconfig": api.kubeconfig(tmp_path)}, tmp_path)
    assert rc == 1, out
    # the last complete read says what is not done; the read the deadline cut short is not an answer
    assert out["msg"].startswith("not rolled out in 2 s: DaemonSet/gpu-operator/dp: 1 ready of 2"), out["msg"]
    assert out["polls"] == 1 and out["waited"] <= 2.5, out
    assert took < 2 + MARGIN, took


def test_a_wait_whose_first_read_outlasts_it_fails_at_its_timeout_naming_the_request(tmp_path):
    with ApiServer({("GET", "/apis/apps/v1/daemonsets"): [{"silent": True}]}) as api:
        rc, out, took = run_module_process("k8s_bulk_info", {
            "queries": {"ds": {"kind": "DaemonSet", "api_version": "apps/v1"}},
            "wait": {"condition": "rolled_out", "timeout": 1.5},
            "kubeconfig": api.kubeconfig(tmp_path)}, tmp_path)
    assert rc == 1, out
    # the request's own timeout (60 s by default) is cut to what the wait has left
    assert "GET /apis/apps/v1/daemonsets?limit=500 timed out after 1.5 s (read" in out["msg"] and "wait.timeout" in out["msg"], out["msg"]
    assert took < 1.5 + MARGIN, took


# --- check mode and diff go through the same requests ---

def test_check_mode_and_diff_are_unaffected(tmp_path):
    with ApiServer({("GET", "/api/v1/nodes"): [{"body": node_list("gpu-1")}],
                    ("PATCH", "/api/v1/nodes/gpu-1"): [{"body": node("gpu-1", {"nvidia.com/gpu.present": "true"})}]}) as api:
        rc, out, _took = run("k8s_node_labels", tmp_path, api.kubeconfig(tmp_path), request_timeout=5,
                             _ansible_check_mode=True, _ansible_diff=True)
        patches = api.seen("PATCH")
        body = json.loads(api.requests[-1][2])
    assert rc == 0 and out["changed"] and out["diff"][0]["before_header"] == "Node/gpu-1", out
    assert len(patches) == 1 and query(patches[0][1])["dryRun"] == "All"
    assert body["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"


@pytest.mark.parametrize("args, words", [
    ({"request_timeout": 0}, ["request_timeout must be", "got 0"]),
    ({"connect_timeout": -1}, ["connect_timeout must be", "got -1"]),
    ({"request_timeout": 86401}, ["request_timeout must be", "86401"]),
])
def test_bad_timeouts_are_refused_before_any_connection(tmp_path, args, words):
    with silent_listener() as url:
        rc, out, took = run("k8s_bulk_info", tmp_path, write_kubeconfig(tmp_path, url), limit=20, **args)
    assert rc == 1 and "timed out" not in out["msg"], out
    for word in words:
        assert word in out["msg"], out["msg"]
