# gpuops.nvidia — build, test and lab entry points.
# Everything is built from nothing: `make test` and `make lab` each do their own set-up.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT        := $(CURDIR)
VENV        ?= $(ROOT)/.venv
BIN         := $(VENV)/bin
PY          := $(BIN)/python
PYTHON3     ?= python3
GPUOPS_CACHE ?= $(HOME)/.cache/gpuops
COLLECTIONS := $(ROOT)/.collections
COLL_DIR    := $(COLLECTIONS)/ansible_collections/gpuops/nvidia
VERSION     := $(shell sed -n 's/^version: *//p' galaxy.yml)
TARBALL     := build/gpuops-nvidia-$(VERSION).tar.gz
SHARED      ?= $(ROOT)/../shared
# ansible-test needs the collection outside any git checkout (it lists files through git);
# AT_COLLECTIONS=<dir> gives a run a private copy
AT_COLLECTIONS ?= $(GPUOPS_CACHE)/ansible-test
AT_DIR      := $(AT_COLLECTIONS)/ansible_collections/gpuops/nvidia

export PATH := $(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_CONFIG := $(ROOT)/ansible.cfg
export GPUOPS_CACHE
export GPUOPS_SHARED := $(SHARED)
export PYTHONDONTWRITEBYTECODE := 1

COLLECTION_SRC := $(shell find galaxy.yml README.md meta plugins roles playbooks docs changelogs tests/unit tests/fixtures tests/integration tests/sanity -type f -not -path '*/__pycache__/*' 2>/dev/null)

.PHONY: help venv lock build install test test-queues test-unit test-sanity test-integration lab bench clean distclean

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-18s %s\n", $$1, $$2}'

# requirements-dev.txt names what the controller and the tests use; requirements-dev.lock is its resolution, every
# distribution pinned with its hashes (uv pip compile, universal). `make venv` installs the lock and nothing else
# (--require-hashes --no-deps: a fresh machine gets exactly what CI tested); `make lock` resolves it anew after an
# edit of requirements-dev.txt (or LOCK_UPGRADE=1 to move every pin). tests/unit/meta/test_locks.py fails while a
# lock and its input disagree. The same holds for the newest-core sanity lane's chroot (tests/lab/sanity-newest).
LOCKS := requirements-dev.lock tests/lab/sanity-newest/requirements.lock
venv: $(VENV)/.stamp ## controller/test virtualenv, installed from requirements-dev.lock (hashes checked)
$(VENV)/.stamp: requirements-dev.lock
	rm -rf $(VENV)
	$(PYTHON3) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --require-hashes --no-deps -r requirements-dev.lock
	$(BIN)/pip check
	touch $@

lock: $(VENV)/.stamp ## resolve requirements-dev.txt (and the sanity-newest chroot's pins) anew into the .lock files
	$(BIN)/python mk/lock.py $(if $(filter 1,$(LOCK_UPGRADE)),--upgrade) $(LOCKS)

build: $(TARBALL) ## build the collection tarball (what Galaxy users get)
$(TARBALL): $(VENV)/.stamp $(COLLECTION_SRC)
	mkdir -p build
	$(BIN)/ansible-galaxy collection build --force --output-path build >/dev/null
	@echo "built $@"

install: $(COLL_DIR)/MANIFEST.json ## install the built tarball into .collections
$(COLL_DIR)/MANIFEST.json: $(TARBALL)
	rm -rf $(COLL_DIR)
	$(BIN)/ansible-galaxy collection install --force --no-deps -p $(COLLECTIONS) $(TARBALL) >/dev/null
	rm -rf $(AT_DIR)
	$(BIN)/ansible-galaxy collection install --force --no-deps -p $(AT_COLLECTIONS) $(TARBALL) >/dev/null
	@echo "installed $(TARBALL) into $(COLLECTIONS) and $(AT_COLLECTIONS)"

# `make test` runs two queues after the unit tests.  BESIDE_TEST_TARGETS (the native driver lane, the GPU bundle,
# the runtime lane, the VM lane) keep about one core busy: a qemu TCG guest, one daemon at a time -- or, on a
# fresh machine, Go builds that then overlap the main queue's single-core lanes; the main queue (sanity,
# integration, AWX, cluster, driver replay, faults, galaxy, newest-core sanity) runs beside them, so neither core
# idles.  Lanes never share state that the other queue writes (VMs are scoped by VM_RUN_ID, apt waits for dpkg's
# lock, daemons run in private directories, the driver lane installs its own copy of the collection, molecule's
# prerun is off).  The beside queue writes to $(BESIDE_LOG), printed after the main queue's output so that
# neither splits the other's lines; both queues always run to their end and `make test` fails if either did.
# TEST_BESIDE=0 runs every lane in one queue, in order.
TEST_BESIDE ?= 1
BESIDE_LOG  ?= $(ROOT)/.lab/test-beside.log
test: ## everything CI runs
	$(MAKE) test-unit
ifeq ($(TEST_BESIDE),1)
	$(MAKE) vm-deps
	$(MAKE) test-queues MAIN_LANES="test-sanity test-integration $(strip $(EXTRA_TEST_TARGETS))" \
	  BESIDE_LANES="$(strip $(BESIDE_TEST_TARGETS))"
else
	$(MAKE) test-sanity
	$(MAKE) test-integration
	$(MAKE) $(EXTRA_TEST_TARGETS) $(BESIDE_TEST_TARGETS)
endif

# MAIN_LANES in order, and BESIDE_LANES in order at the same time (output to $(BESIDE_LOG), shown at the end)
test-queues:
	@mkdir -p $(dir $(BESIDE_LOG)); t0=$$(date +%s); \
	echo "test: $(BESIDE_LANES) run beside the other lanes; their output follows at the end (live: $(BESIDE_LOG))"; \
	( rc=0; $(MAKE) $(BESIDE_LANES) >$(BESIDE_LOG) 2>&1 || rc=$$?; echo "beside queue done in $$(( $$(date +%s) - t0 )) s, rc=$$rc" >>$(BESIDE_LOG); exit $$rc ) & \
	beside=$$!; trap 'kill $$beside 2>/dev/null' INT TERM; \
	rc=0; $(MAKE) $(MAIN_LANES) || rc=$$?; \
	t1=$$(date +%s); rcb=0; wait $$beside || rcb=$$?; \
	sed 's/^/[beside] /' $(BESIDE_LOG); \
	echo "test: main queue ($(MAIN_LANES)) rc=$$rc in $$((t1 - t0)) s; beside queue ($(BESIDE_LANES)) rc=$$rcb; both done in $$(( $$(date +%s) - t0 )) s"; \
	[ "$$rc" = 0 ] && [ "$$rcb" = 0 ]

test-unit: install ## unit tests over captured and synthetic node data (the installed tarball)
	GPUOPS_COLLECTIONS=$(COLLECTIONS) $(BIN)/pytest -q -n auto tests/unit

ANSIBLE_TEST_PIP := $(HOME)/.ansible/test/cache/get_pip_24_2.py

test-sanity: install ## ansible-test sanity, ansible-lint (production), ruff
	$(BIN)/ruff check plugins tests benchmarks
	@# ansible-test fetches its pip bootstrap from a host we cannot reach: give it ours
	mkdir -p $(dir $(ANSIBLE_TEST_PIP)) && cp tests/sanity/get_pip_offline.py $(ANSIBLE_TEST_PIP)
	cd $(AT_DIR) && $(BIN)/ansible-test sanity --python 3.11 --requirements --color no $(SANITY_ARGS)
	$(BIN)/ansible-lint --profile production --offline -q $(LINT_PATHS)

test-integration: install ## ansible-test integration targets that run on this machine
	cd $(AT_DIR) && $(BIN)/ansible-test integration --python 3.11 --color no --local gpu_facts

LAB_INV := -i inventories/example/hosts.yml -i inventories/lab/hosts.yml
lab: install ## the main job: site.yml on the example inventory, in the lab (node-root stand-ins + a real-kernel VM as gpu-p01 + a real control plane whose KWOK nodes are the example's k8s_nodes)
	$(BIN)/python tests/fixtures/noderoots/build.py --out $(ROOT)/.lab/roots
ifeq ($(LAB_MINIMAL),1)
	$(BIN)/ansible-playbook $(LAB_INV) -e gpuops_k8s_api=false playbooks/site.yml $(LAB_ARGS)
else
	$(MAKE) vm-up
	$(MAKE) cluster-up NODES=$(ROOT)/inventories/lab/cluster-nodes.yml
	$(BIN)/python tests/lab/lab_inventory.py --vm $(ROOT)/.lab/vm/hosts.yml --out $(ROOT)/.lab/example/vm.yml
	rc=0; $(BIN)/ansible-playbook $(LAB_INV) -i $(ROOT)/.lab/example/vm.yml \
	  -e gpuops_kubeconfig=$(CLUSTER_DIR_LAB)/kubeconfig -e gpuops_empty_stage=fail -e gpu_reboot_allowed=true \
	  playbooks/site.yml $(LAB_ARGS) || rc=$$?; \
	  [ "$(LAB_KEEP)" = 1 ] || { $(MAKE) vm-down; $(MAKE) cluster-down; }; exit $$rc
endif

bench: install ## benchmarks (results under benchmarks/)
	$(BIN)/python benchmarks/gpu_facts/run.py --fixtures --host --out benchmarks/gpu_facts/results-local.json

clean:
	rm -rf build $(COLLECTIONS) .lab tests/output

distclean: clean
	rm -rf $(VENV)

LINT_PATHS ?= roles playbooks
EXTRA_TEST_TARGETS ?=
BESIDE_TEST_TARGETS ?=
-include mk/*.mk
