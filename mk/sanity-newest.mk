# Sanity on the newest ansible-core (issue 16: requires_ansible is what sanity passes on, the lowest and
# the newest). ansible-core 2.20+ needs Python >= 3.12, this machine's Debian 12 has 3.11: the run happens in
# a cached Debian 13 chroot (Python 3.13) with the installed collection; tests/lab/sanity-newest/run.sh.
# The lowest, 2.19 (requires_ansible >=2.19.0), is test-sanity.
# the version is tests/lab/sanity-newest/requirements.txt's; its lock (hashes) is what the chroot's venv installs
ANSIBLE_CORE_NEWEST := $(shell sed -n 's/^ansible-core==//p' tests/lab/sanity-newest/requirements.txt)

.PHONY: test-sanity-newest
test-sanity-newest: install ## ansible-test sanity on the newest ansible-core (Debian 13 chroot, Python 3.13)
	ANSIBLE_CORE_NEWEST=$(ANSIBLE_CORE_NEWEST) bash tests/lab/sanity-newest/run.sh $(SANITY_ARGS)

EXTRA_TEST_TARGETS += test-sanity-newest
