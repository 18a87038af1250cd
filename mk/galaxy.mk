# Galaxy lane (issue 16, part 2): the built tarball as Galaxy and its users see it.
#   make test-galaxy   build the tarball; galaxy-importer on it (0 errors, 0 warnings, else fail and print
#                      them); install it with ansible-galaxy into an empty directory and run a play from
#                      it; ansible-doc for every filter/module/role; role READMEs vs argument specs;
#                      LICENSE/SPDX/changelog checks; prints the tarball size
#   make test-units-galaxy  ansible-test units on the tarball installed under $(AT_UNITS_COLLECTIONS), as Galaxy
#                      tests collections: tests/unit/requirements.txt in a virtualenv of ansible-test's own
#                      (--venv: the project's .venv is left alone); tests that need what the tarball leaves
#                      out (the lab inventory, tests/lab, requirements-dev.txt) skip and say so; not part
#                      of test-galaxy (3 min 18 s warm, 6 min 30 s cold on 2 shared cores)
#   make role-readmes  regenerate roles/*/README.md from meta/argument_specs.yml
#   make changelog-lint
#   make release       release galaxy.yml's version: tools/release.py check refuses (and nothing changes) when
#                      that version is already in changelogs/changelog.yaml while fragments wait, is no newer
#                      than the last release, is too small a step for the fragments, or there is nothing to
#                      release; then antsibull-changelog lint, antsibull-changelog release (changelog.yaml,
#                      CHANGELOG.rst, the fragments consumed), lint-changelog-yaml, tools/release.py verify, and
#                      the tarball $(RELEASE_DIR)/gpuops-nvidia-<version>.tar.gz (CONTRIBUTING.md, "Releasing")
# galaxy-importer runs without a container engine: tests/galaxy/galaxy-importer.cfg turns off its
# ansible-test run (ansible-test runs in test-sanity) and keeps ansible-doc and ansible-lint on.

GALAXY_IMPORTER_CONFIG := $(ROOT)/tests/galaxy/galaxy-importer.cfg

.PHONY: test-galaxy test-units-galaxy role-readmes changelog-lint sanity-ignores release

test-galaxy: build ## Galaxy: importer clean, tarball install + play, per-filter docs, role READMEs
	$(BIN)/antsibull-changelog lint
	GPUOPS_GALAXY_TARBALL=$(ROOT)/$(TARBALL) GALAXY_IMPORTER_CONFIG=$(GALAXY_IMPORTER_CONFIG) \
	  $(BIN)/pytest -q -p no:cacheprovider tests/galaxy
	@echo "tarball $(TARBALL): $$(stat -c %s $(TARBALL)) bytes ($$(du -h $(TARBALL) | cut -f1))"

# ansible-test units runs in a copy of its own, $(AT_UNITS_COLLECTIONS) ($(AT_COLLECTIONS)-units: AT_COLLECTIONS=<dir>
# moves both), never in the one test-sanity and test-integration use; ansible-test's venv there (tests/output/.tmp)
# lasts until the tarball changes.  kubernetes.core, the dependency, is linked in from the `ansible` package of the
# venv, as tests/galaxy gets it (no Galaxy server to reach).
AT_UNITS_COLLECTIONS ?= $(AT_COLLECTIONS)-units
AT_UNITS_DIR := $(AT_UNITS_COLLECTIONS)/ansible_collections/gpuops/nvidia

$(AT_UNITS_DIR)/MANIFEST.json: $(TARBALL)
	rm -rf $(AT_UNITS_DIR)
	$(BIN)/ansible-galaxy collection install --force --no-deps -p $(AT_UNITS_COLLECTIONS) $(TARBALL) >/dev/null
	mkdir -p $(AT_UNITS_COLLECTIONS)/ansible_collections/kubernetes
	ln -sfn "$$($(PY) -c 'import ansible_collections.kubernetes.core as m; print(list(m.__path__)[0])')" \
	  $(AT_UNITS_COLLECTIONS)/ansible_collections/kubernetes/core
	touch $@

test-units-galaxy: $(AT_UNITS_DIR)/MANIFEST.json ## ansible-test units on the installed tarball (Galaxy's way), own venv
	mkdir -p $(dir $(ANSIBLE_TEST_PIP)) && cp tests/sanity/get_pip_offline.py $(ANSIBLE_TEST_PIP)
	cd $(AT_UNITS_DIR) && $(BIN)/ansible-test units --venv --python 3.11 --requirements --color no $(UNITS_ARGS)

role-readmes: $(VENV)/.stamp ## regenerate roles/*/README.md from meta/argument_specs.yml
	$(PY) tests/galaxy/role_readmes.py

changelog-lint: $(VENV)/.stamp ## antsibull-changelog lint of changelogs/fragments
	$(BIN)/antsibull-changelog lint

# The release tarball goes to a directory of its own, so that `make build` (build/, the test lanes' tarball of the
# work tree) never overwrites what was released.  RELEASE_DATE=YYYY-MM-DD sets the changelog's date (default: today).
RELEASE_DIR ?= build/release
RELEASE_DATE ?=
release: $(VENV)/.stamp ## release galaxy.yml's version: CHANGELOG.rst, fragments consumed, tarball in build/release
	$(PY) tools/release.py check --version "$(VERSION)"
	$(BIN)/antsibull-changelog lint
	$(BIN)/antsibull-changelog release --version "$(VERSION)" $(if $(RELEASE_DATE),--date "$(RELEASE_DATE)")
	$(BIN)/antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml
	$(PY) tools/release.py verify
	mkdir -p $(RELEASE_DIR)
	$(BIN)/ansible-galaxy collection build --force --output-path $(RELEASE_DIR) >/dev/null
	@echo "released $(VERSION): CHANGELOG.rst, changelogs/changelog.yaml (fragments consumed), \
	  $(RELEASE_DIR)/gpuops-nvidia-$(VERSION).tar.gz sha256 $$(sha256sum $(RELEASE_DIR)/gpuops-nvidia-$(VERSION).tar.gz | cut -d' ' -f1)"
	@echo "next: review and commit the changelog, tag v$(VERSION), publish the tarball"

# The sanity ignore files stay out of the Galaxy tarball (galaxy-importer warns about any): put them
# next to the copy that ansible-test sanity runs in, after `install` has laid it down.
sanity-ignores: install
	mkdir -p $(AT_DIR)/tests/sanity
	cp tests/sanity/ignore-*.txt $(AT_DIR)/tests/sanity/
test-sanity: sanity-ignores

EXTRA_TEST_TARGETS += test-galaxy
