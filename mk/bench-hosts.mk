# Host-side stages benchmark (issue 18): discovery and preflight over BENCH_HOSTS node-root hosts
# (ansible_connection: local) against the Ansible floor (one ping per host) on the same inventory.
#   make bench-hosts                          200 hosts, 3 repetitions, forks 20 and 50
#   make bench-hosts BENCH_HOSTS=50 BENCH_HOSTS_REPEAT=1
# run.py builds any node root missing under .lab/roots.  Not part of `make test`.
BENCH_HOSTS        ?= 200
BENCH_HOSTS_REPEAT ?= 3
BENCH_HOSTS_FORKS  ?= 20 50

.PHONY: bench-hosts

bench-hosts: install ## benchmarks/host_stages: discovery + preflight over $(BENCH_HOSTS) hosts vs one ping per host
	$(PY) benchmarks/host_stages/run.py --hosts $(BENCH_HOSTS) --repeat $(BENCH_HOSTS_REPEAT) \
	  --forks $(BENCH_HOSTS_FORKS) --out benchmarks/host_stages/results.json
