# Galaxy lane (issue 16, part 2): the built tarball as Galaxy and its users see it.
#   make test-galaxy   build the tarball; galaxy-importer on it (0 errors, 0 warnings, else fail and print
#                      them); install it with ansible-galaxy into an empty directory and run a play from
#                      it; ansible-doc for every filter/module/role; role READMEs vs argument specs;
#                      LICENSE/SPDX/changelog checks; prints the tarball size
#   make role-readmes  regenerate roles/*/README.md from meta/argument_specs.yml
#   make changelog-lint
# galaxy-importer runs without a container engine: tests/galaxy/galaxy-importer.cfg turns off its
# ansible-test run (ansible-test runs in test-sanity) and keeps ansible-doc and ansible-lint on.

GALAXY_IMPORTER_CONFIG := $(ROOT)/tests/galaxy/galaxy-importer.cfg

.PHONY: test-galaxy role-readmes changelog-lint sanity-ignores

test-galaxy: build ## Galaxy: importer clean, tarball install + play, per-filter docs, role READMEs
	$(BIN)/antsibull-changelog lint
	GPUOPS_GALAXY_TARBALL=$(ROOT)/$(TARBALL) GALAXY_IMPORTER_CONFIG=$(GALAXY_IMPORTER_CONFIG) \
	  $(BIN)/pytest -q -p no:cacheprovider tests/galaxy
	@echo "tarball $(TARBALL): $$(stat -c %s $(TARBALL)) bytes ($$(du -h $(TARBALL) | cut -f1))"

role-readmes: $(VENV)/.stamp ## regenerate roles/*/README.md from meta/argument_specs.yml
	$(PY) tests/galaxy/role_readmes.py

changelog-lint: $(VENV)/.stamp ## antsibull-changelog lint of changelogs/fragments
	$(BIN)/antsibull-changelog lint

# The sanity ignore files stay out of the Galaxy tarball (galaxy-importer warns about any): put them
# next to the copy that ansible-test sanity runs in, after `install` has laid it down.
sanity-ignores: install
	mkdir -p $(AT_DIR)/tests/sanity
	cp tests/sanity/ignore-*.txt $(AT_DIR)/tests/sanity/
test-sanity: sanity-ignores

EXTRA_TEST_TARGETS += test-galaxy
