# Fault-injection suite (issue 15): for every module that edits a file (container_runtime: containerd v2/v3
# main + drop-in, CRI-O drop-in, docker daemon.json; cdi_spec; kernel_cmdline: GRUB drop-in and
# /etc/kernel/cmdline; vfio_pci: state and persistence files), under a fake root:
#   disk full (small tmpfs), read-only file/dir/mount, a validator or restart that fails, SIGKILL at every
#   kill point of the write path (several hundred), runs at once.
# Needs root (tmpfs/bind mounts, chattr). Uses Debian's containerd 1.6 (runtime-apt) as the validator of
# version-2 configs; stand-in scripts for everything else. Prints its counts at the end (docs/reliability.md).
# Known defects of the modules are strict xfails: the suite fails when one is fixed, so the mark goes too.

.PHONY: test-faults

test-faults: install runtime-apt ## fault injection: disk full, read-only, failing validator/restart, SIGKILL at every kill point, runs at once
	$(BIN)/pytest -q -p no:cacheprovider tests/faults $(FAULTS_ARGS)

EXTRA_TEST_TARGETS += test-faults
