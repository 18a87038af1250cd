# AWX / Automation Platform lane (issue 16, part 3), offline:
#   make test-awx   awx/gpuops-nvidia.yml checked against the AWX CLI import format (awxkit's loader,
#                   resources, natural keys; fields, references, playbooks, surveys, workflow);
#                   `ansible-builder create` on meta/execution-environment.yml (build context, no image
#                   build) and ansible-builder's introspection of the collection; the repository as an
#                   AWX project: collections/requirements.yml installed from the project, then
#                   ansible-runner runs playbooks/report.yml on the lab's node-root hosts in two slices
#                   and playbooks/report_merge.yml on their set_stats (rc 0, job events, typed artifacts)
#   make ee-context build context of the execution environment under build/ee (then
#                   `podman build build/ee/context` where a container engine exists)

.PHONY: test-awx ee-context

test-awx: install ## AWX: import definitions, EE build context, ansible-runner project run with typed artifacts
	GPUOPS_COLLECTIONS=$(COLLECTIONS) $(BIN)/pytest -q -p no:cacheprovider tests/awx

ee-context: $(VENV)/.stamp ## ansible-builder create for meta/execution-environment.yml into build/ee/context
	rm -rf build/ee && mkdir -p build/ee/meta
	cp meta/execution-environment.yml build/ee/
	cp meta/ee-requirements.txt meta/bindep.txt meta/ee-collections.yml build/ee/meta/
	cd build/ee && $(BIN)/ansible-builder create -f execution-environment.yml -c context --output-filename Containerfile

EXTRA_TEST_TARGETS += test-awx
