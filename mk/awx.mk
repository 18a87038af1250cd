# AWX / Automation Platform lane (issue 16, part 3; issue 33, part 2), offline:
#   make test-awx   awx/gpuops-nvidia.yml checked against the AWX CLI import format (awxkit's loader,
#                   resources, natural keys; fields, references, playbooks, surveys, credential type and
#                   injectors, notification template, schedule rrule, workflow); the launch answers
#                   (playbooks/tasks/launch_answers.yml): an empty answer keeps the inventory's value, 'false'
#                   is false, the credential's K8S_AUTH_* environment reaches the collection's k8s modules;
#                   `ansible-builder create` on meta/execution-environment.yml (build context, no image
#                   build; helm pinned by sha256) and ansible-builder's introspection of the collection; the
#                   repository as an AWX project: collections/requirements.yml installed from the project,
#                   then ansible-runner runs playbooks/report.yml on the lab's node-root hosts in two slices
#                   and playbooks/report_merge.yml on their set_stats (rc 0, job events, typed artifacts)
#   make ee-context build context of the execution environment under build/ee: execution-environment.yml
#                   (ansible-builder's default file name) with meta/ beside it, as at the collection root
#   make ee-image   ansible-builder build in build/ee: the image options.tags names
#                   (quay.io/gpuops/gpuops-nvidia-ee:<galaxy.yml version>, the image awx/gpuops-nvidia.yml
#                   uses); needs podman (or EE_RUNTIME=docker) and the registries, so not part of make test

.PHONY: test-awx ee-context ee-image

EE_RUNTIME ?= podman

test-awx: install ## AWX: import definitions, launch answers, EE build context, ansible-runner project run with typed artifacts
	GPUOPS_COLLECTIONS=$(COLLECTIONS) $(BIN)/pytest -q -p no:cacheprovider tests/awx

ee-context: $(VENV)/.stamp ## ansible-builder create: the EE's build context under build/ee/context
	rm -rf build/ee && mkdir -p build/ee/meta
	cp meta/execution-environment.yml build/ee/
	cp meta/ee-requirements.txt meta/bindep.txt meta/ee-collections.yml build/ee/meta/
	cd build/ee && $(BIN)/ansible-builder create -c context

ee-image: ee-context ## ansible-builder build: the EE image, tagged as options.tags says (needs podman or docker)
	cd build/ee && $(BIN)/ansible-builder build -c context --container-runtime $(EE_RUNTIME)

EXTRA_TEST_TARGETS += test-awx
