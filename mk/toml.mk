# TOML editor (plugins/module_utils/_toml.py) conformance: the official toml-test suite,
# published as a Go module, fetched with the Go client into $(GPUOPS_CACHE)/go/mod.
# `make test-unit` runs the same conformance test; these targets run it alone.

TOML_TEST_VERSION ?= v2.2.0
TOML_TESTS := tests/unit/plugins/module_utils/test_toml.py tests/unit/plugins/module_utils/test_toml_edits.py \
              tests/unit/plugins/module_utils/test_toml_conformance.py

.PHONY: toml-test-fetch test-toml

toml-test-fetch: ## fetch the toml-test suite (Go module) into the cache and print where it is
	TOML_TEST_VERSION=$(TOML_TEST_VERSION) bash tests/toml_test/fetch.sh

test-toml: install ## TOML editor: unit tests + toml-test conformance (counts printed)
	GPUOPS_COLLECTIONS=$(COLLECTIONS) TOML_TEST_VERSION=$(TOML_TEST_VERSION) $(BIN)/pytest -q -rs -p no:cacheprovider $(TOML_TESTS)
