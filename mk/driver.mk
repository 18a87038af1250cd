# Driver lanes.
#   make test-driver-replay     tests/lab/h200/driver_check.yml (check mode) against the replayed H200 capture (~15 s)
#   make test-driver            roles/driver natively against a debootstrap'd Debian bookworm root (chroot): Debian's
#                               non-free driver 535, DKMS building the module for the root's kernel and signing it,
#                               pin + hold, blacklist in the initramfs, persistenced; bad input refused first; rerun
#                               and check mode changed=0; then the VM lane boots that root (modprobe nvidia: "No such
#                               device", our signer in modinfo); state=absent restores the root's package set and
#                               /etc.  Caches .debs and ccache under GPUOPS_CACHE/driver (timings in
#                               .lab/driver-native/timings.txt; DRIVER_NATIVE_KEEP=1 keeps root and guest)
.PHONY: test-driver test-driver-replay

test-driver-replay: install ## driver: H200 check-mode playbook against the replayed capture (580 satisfied, 570 changes)
	BIN=$(BIN) tests/lab/driver/run-h200-replay.sh

test-driver: install ## driver lane: native chroot install with a real DKMS build, the built root booted in qemu, absent
	BIN=$(BIN) GPUOPS_CACHE=$(GPUOPS_CACHE) tests/lab/driver/native.sh

EXTRA_TEST_TARGETS += test-driver-replay
BESIDE_TEST_TARGETS += test-driver
