# SPDX-License-Identifier: Apache-2.0
"""list_items: a LIST read in pages (limit/continue) as the API server serves them, the restart when a continue token
expired, and the page size's input check. A stand-in answers like the API server (items in name order, a continue
token while more remain); the modules against a real API server, pages included: the cluster lane
(test_lists_are_read_in_pages)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import GoneError

from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_client import list_items, list_problems


class Server:
    """GET of a LIST: ``limit`` objects from the one the continue token names; ``gone_on`` continue tokens answer
    410 (expired), as the API server does once its snapshot is compacted away."""

    def __init__(self, count, gone_on=()):
        self.objects = [{"metadata": {"name": "node-%05d" % i}} for i in range(count)]
        self.gone_on, self.calls = set(gone_on), []

    def request(self, method, path, query_params=None, header_params=None, serialize=True):
        assert method == "get" and serialize is False
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
    items, made = list_items(server, "/api/v1/nodes", page)
    assert names(items) == names(server.objects) and made == requests == len(server.calls)
    for i, (_path, params, _headers) in enumerate(server.calls):
        assert (("limit", page) in params) == bool(page)
        assert (dict(params).get("continue") is None) == (i == 0)


def test_selectors_and_headers_go_with_every_page():
    server = Server(1100)
    query = [("labelSelector", "nvidia.com/gpu.present=true")]
    headers = {"Accept": "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"}
    items, made = list_items(server, "/api/v1/nodes", 500, query, headers)
    assert len(items) == 1100 and made == 3
    assert all(params[0] == query[0] and hdrs == headers for _path, params, hdrs in server.calls)
    assert query == [("labelSelector", "nvidia.com/gpu.present=true")]  # the caller's list is not extended


def test_an_expired_continue_token_reads_the_list_again_whole_once():
    server = Server(1200, gone_on={"500"})
    items, made = list_items(server, "/api/v1/nodes", 500)
    # the first page's items are not kept twice: the whole list comes from the one request after the 410
    assert names(items) == names(server.objects) and made == 3
    assert server.calls[-1][1] == []  # no limit, no continue


def test_a_refused_first_page_is_the_callers_error():
    class Refusing(Server):
        def request(self, *args, **kwargs):
            raise GoneError(ApiException(status=410, reason="Gone"))

    with pytest.raises(GoneError):
        list_items(Refusing(3), "/api/v1/nodes", 500)


@pytest.mark.parametrize("size, ok", [(None, True), (0, True), (1, True), (500, True), (-1, False)])
def test_page_size_check(size, ok):
    problems = list_problems({"list_page_size": size})
    assert (problems == []) == ok
    if not ok:
        assert "list_page_size" in problems[0] and "-1" in problems[0]
