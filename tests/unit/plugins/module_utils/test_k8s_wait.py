# SPDX-License-Identifier: Apache-2.0
"""_k8s_wait: what 'done' means for a rollout and a Job, and the in-run poll loop (a clock of our own: the loop's
pauses, its deadline and its read count are checked exactly, without sleeping).

The loop against a real API server: the cluster lane (every rollout and validation wait of the playbooks goes
through it) and benchmarks/cluster_deploy."""
from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_wait as kw
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError
from ansible_collections.gpuops.nvidia.plugins.modules import k8s_bulk_info
from conftest import run_module


def ds(name, desired=3, updated=3, ready=3, gen=1, seen=1, **meta):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": dict(name=name, namespace="gpu-operator", generation=gen, **meta),
            "status": {"observedGeneration": seen, "desiredNumberScheduled": desired,
                       "updatedNumberScheduled": updated, "numberReady": ready}}


def job(name, *conds):
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "gpu-operator"},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conds]}}


QUERIES = {"jobs": {"kind": "Job", "fields": ["metadata.annotations"]}, "ds": {"kind": "DaemonSet", "fields": None}}


def checked(**wait):
    queries = {k: dict(v) for k, v in QUERIES.items()}
    return kw.check_wait(wait, queries), queries


def test_rollout_pending_says_why():
    assert kw.rollout_pending(ds("a")) is None
    assert kw.rollout_pending(ds("a", ready=1)) == "DaemonSet/gpu-operator/a: 1 ready of 3"
    assert kw.rollout_pending(ds("a", gen=2)) == "DaemonSet/gpu-operator/a: spec not yet seen by its controller"
    # being deleted: nothing to wait for
    assert kw.rollout_pending(ds("a", ready=0, deletionTimestamp="2026-12-04T00:00:00Z")) is None
    dep = {"kind": "Deployment", "metadata": {"name": "m", "namespace": "n"}, "spec": {"replicas": 2},
           "status": {"updatedReplicas": 2, "availableReplicas": 1}}
    assert kw.rollout_pending(dep) == "Deployment/n/m: 1 available of 2"


def test_job_state_reads_the_conditions():
    assert kw.job_state(job("j")) == "running"
    assert kw.job_state(job("j", ("Complete", "False"))) == "running"
    assert kw.job_state(job("j", ("SuccessCriteriaMet", "True"))) == "complete"
    assert kw.job_state(job("j", ("FailureTarget", "True"))) == "failed"
    with pytest.raises(InputError, match="status.conditions must be a list"):
        kw.job_state({"metadata": {"name": "j"}, "status": {"conditions": "Complete"}})


def test_pending_finished_with_names_counts_only_those_and_requires_each():
    wait, _queries = checked(condition="finished", queries=["jobs"], names=["a", "b", "c"])
    reads = {"jobs": {"resources": [job("a", ("Complete", "True")), job("b"), job("stale")]},
             "ds": {"resources": [ds("x", ready=0)]}}  # read along, not waited for
    assert kw.pending(reads, wait) == ["c: not found", "Job/gpu-operator/b: running"]
    reads["jobs"]["resources"] += [job("c", ("Failed", "True"))]
    reads["jobs"]["resources"][1] = job("b", ("Complete", "True"))
    assert kw.pending(reads, wait) == []  # a failed Job is finished too


def test_pending_without_names_waits_for_every_object_read():
    wait, _queries = checked(condition="rolled_out")
    reads = {"jobs": {"resources": [job("j")]},  # not a workload: done as far as a rollout goes
             "ds": {"resources": [ds("a"), ds("b", updated=2, ready=1)]}}
    assert kw.pending(reads, wait) == ["DaemonSet/gpu-operator/b: 2 updated, 1 ready of 3"]
    assert kw.pending({"ds": {"resources": []}}, wait) == []  # nothing read, nothing to wait for


def test_check_wait_keeps_the_fields_the_condition_reads():
    wait, queries = checked(condition="finished", queries=["jobs"])
    assert wait == {"condition": "finished", "queries": ["jobs"], "names": None, "timeout": 600, "interval": 1}
    assert queries["jobs"]["fields"] == ["metadata.annotations", "status.conditions"]
    assert queries["ds"]["fields"] is None  # whole objects stay whole
    _wait, queries = checked(condition="rolled_out", queries=["jobs"])
    assert queries["jobs"]["fields"] == ["metadata.annotations", "metadata.generation",
                                         "metadata.deletionTimestamp", "spec.replicas", "status"]


@pytest.mark.parametrize("wait, words", [
    ({"condition": "ready"}, ["condition must be one of finished, rolled_out, got 'ready'"]),
    ({"condition": "finished", "queries": ["jobs", "pods"]}, ["'pods' is not one of the queries (jobs, ds)"]),
    ({"condition": "finished", "queries": "jobs"}, ["queries must be a list"]),
    ({"condition": "finished", "names": ["a", ""]}, ["names must be a list of object names"]),
    ({"condition": "finished", "timeout": 0}, ["timeout must be a number"]),
    ({"condition": "finished", "interval": True}, ["interval must be a number"]),
    ({"condition": "finished", "timeout": "10"}, ["timeout must be a number"]),
    ({"condition": "finished", "until": 3}, ["unknown key(s) until"]),
    ({"queries": ["x"], "timeout": -1}, ["condition must be", "'x' is not one of", "timeout must be"]),
])
def test_check_wait_refuses_bad_input_naming_every_problem(wait, words):
    with pytest.raises(InputError) as err:
        kw.check_wait(wait, dict(QUERIES))
    for word in words:
        assert word in str(err.value), str(err.value)


class Clock:
    """time.monotonic and time.sleep of a world where each read takes ``read_s`` seconds."""

    def __init__(self, read_s=0.0):
        self.now, self.read_s, self.sleeps = 100.0, read_s, []

    def clock(self):
        return self.now

    def sleep(self, s):
        assert s > 0
        self.sleeps.append(round(s, 6))
        self.now += s


def reader(clock, answers, deadlines=None):
    """read(deadline) returning each of ``answers`` in turn (the last one again and again), advancing the clock; the
    deadlines it is given are appended to ``deadlines``."""
    answers = list(answers)

    def read(deadline):
        if deadlines is not None:
            deadlines.append(deadline)
        clock.now += clock.read_s
        return {"ds": {"resources": answers.pop(0) if len(answers) > 1 else answers[0]}}
    return read


def test_wait_returns_at_the_first_read_that_shows_everything_done():
    c = Clock(read_s=0.1)
    wait, _queries = checked(condition="rolled_out", queries=["ds"], interval=1)
    reads, left, polls, waited = kw.wait_for(reader(c, [[ds("a")]]), wait, c.clock, c.sleep)
    assert (left, polls, c.sleeps) == ([], 1, [])
    assert reads["ds"]["resources"][0]["metadata"]["name"] == "a"
    assert waited == pytest.approx(0.1)


def test_wait_polls_every_interval_until_done():
    c = Clock(read_s=0.1)
    wait, _queries = checked(condition="rolled_out", queries=["ds"], interval=1)
    answers = [[ds("a", ready=0)], [ds("a", ready=1)], [ds("a", ready=2)], [ds("a")]]
    _reads, left, polls, waited = kw.wait_for(reader(c, answers), wait, c.clock, c.sleep)
    assert (left, polls, c.sleeps) == ([], 4, [1, 1, 1])
    assert waited == pytest.approx(3.4)


def test_a_slow_read_stretches_the_pause_to_twice_its_length():
    c = Clock(read_s=2.0)  # the API server takes 2 s to answer: ask again after 4, not 1
    wait, _queries = checked(condition="rolled_out", queries=["ds"], interval=1)
    read = reader(c, [[ds("a", ready=0)], [ds("a", ready=0)], [ds("a")]])
    _reads, left, polls, _waited = kw.wait_for(read, wait, c.clock, c.sleep)
    assert (left, polls, c.sleeps) == ([], 3, [4, 4])


def test_wait_times_out_with_what_is_pending_after_a_last_read_at_the_deadline():
    c = Clock(read_s=0.0)
    wait, _queries = checked(condition="rolled_out", queries=["ds"], interval=2, timeout=5)
    _reads, left, polls, waited = kw.wait_for(reader(c, [[ds("a", ready=1)]]), wait, c.clock, c.sleep)
    assert left == ["DaemonSet/gpu-operator/a: 1 ready of 3"]
    # reads at 0, 2, 4 and 5 (the deadline), never past it
    assert (polls, c.sleeps, waited) == (4, [2, 2, 1], 5)


def test_a_failed_read_ends_the_wait_with_its_error():
    c = Clock()
    wait, _queries = checked(condition="finished")

    def read(deadline):
        raise InputError("cannot read Job in gpu-operator: 403 forbidden")
    with pytest.raises(InputError, match="403 forbidden"):
        kw.wait_for(read, wait, c.clock, c.sleep)


class CutShort(Exception):
    """What a read raises when the wait's deadline, not a request's own timeout, ended one of its requests."""

    by_deadline = True


def test_every_read_is_given_the_deadline_of_the_whole_wait():
    c = Clock(read_s=0.5)
    wait, _queries = checked(condition="rolled_out", queries=["ds"], interval=1, timeout=10)
    deadlines = []
    kw.wait_for(reader(c, [[ds("a", ready=0)], [ds("a")]], deadlines), wait, c.clock, c.sleep)
    assert deadlines == [110.0, 110.0]  # started at 100: the same end for every read


def test_the_last_read_starts_early_enough_to_end_by_the_deadline():
    c = Clock(read_s=0.5)
    wait, _queries = checked(condition="rolled_out", queries=["ds"], interval=2, timeout=5)
    _reads, left, polls, waited = kw.wait_for(reader(c, [[ds("a", ready=1)]]), wait, c.clock, c.sleep)
    # reads at 0, 2.5 and 4.5 (the deadline less the 0.5 s a read takes), the last one ending at 5
    assert left == ["DaemonSet/gpu-operator/a: 1 ready of 3"]
    assert (polls, c.sleeps, waited) == (3, [2, 1.5], 5)


def test_no_read_starts_with_less_time_left_than_the_last_one_took():
    c = Clock(read_s=3)
    wait, _queries = checked(condition="rolled_out", queries=["ds"], interval=1, timeout=5)
    _reads, left, polls, waited = kw.wait_for(reader(c, [[ds("a", ready=1)]]), wait, c.clock, c.sleep)
    assert left and (polls, c.sleeps, waited) == (1, [], 3)  # 2 s left after a read of 3 s: none started


def test_a_read_the_deadline_cuts_short_ends_the_wait_with_the_last_complete_read():
    c = Clock(read_s=0.1)
    wait, _queries = checked(condition="rolled_out", queries=["ds"], interval=1, timeout=5)
    answers = [[ds("a", ready=1)]]

    def read(deadline):
        if answers:
            c.now += c.read_s
            return {"ds": {"resources": answers.pop()}}
        c.now = deadline  # the server fell silent: the request ran until the deadline
        raise CutShort("GET /apis/apps/v1/daemonsets timed out after 3.9 s (read, cut to what wait.timeout had left)")
    reads, left, polls, waited = kw.wait_for(read, wait, c.clock, c.sleep)
    assert left == ["DaemonSet/gpu-operator/a: 1 ready of 3"] and reads["ds"]["resources"][0]["metadata"]["name"] == "a"
    assert (polls, waited) == (1, 5)


def test_a_first_read_the_deadline_cuts_short_is_the_waits_error():
    c = Clock()
    wait, _queries = checked(condition="rolled_out", queries=["ds"], timeout=2)

    def read(deadline):
        raise CutShort("GET /apis/apps/v1/daemonsets timed out after 2 s (read, cut to what wait.timeout had left)")
    with pytest.raises(CutShort, match="timed out after 2 s"):
        kw.wait_for(read, wait, c.clock, c.sleep)


def test_an_error_of_a_later_read_not_caused_by_the_deadline_is_raised():
    c = Clock()
    wait, _queries = checked(condition="rolled_out", queries=["ds"], timeout=20)
    calls = []

    def read(deadline):
        calls.append(deadline)
        if len(calls) == 1:
            return {"ds": {"resources": [ds("a", ready=0)]}}
        raise InputError("GET /apis/apps/v1/daemonsets timed out after 1 s (read)")  # its own timeout: a failure
    with pytest.raises(InputError, match="timed out after 1 s"):
        kw.wait_for(read, wait, c.clock, c.sleep)


@pytest.mark.parametrize("wait, words", [
    ({"condition": "ready"}, ["value of condition must be one of: rolled_out, finished"]),
    ({"condition": "finished", "queries": ["jobs", "pods"]}, ["'pods' is not one of the queries (jobs)"]),
    ({"condition": "finished", "timeout": 0}, ["timeout must be a number"]),
])
def test_the_module_refuses_a_bad_wait_before_any_connection(capsys, tmp_path, wait, words):
    rc, out = run_module(capsys, k8s_bulk_info.main, {
        "queries": {"jobs": {"kind": "Job", "api_version": "batch/v1"}}, "wait": wait,
        "kubeconfig": str(tmp_path / "no-such-kubeconfig")})
    assert rc == 1 and "cannot reach the API server" not in out["msg"], out
    for word in words:
        assert word in out["msg"], out["msg"]
