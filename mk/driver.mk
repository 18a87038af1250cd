# Driver lanes.
#   make test-driver-replay     tests/lab/h200/driver_check.yml (check mode) against the replayed H200 capture (~15 s)
#   make test-driver            roles/driver in the VM lane's Debian bookworm guest (qemu TCG, no GPU): Debian's
#                               non-free nvidia-driver 535 with a real DKMS build, rerun changed=0, check mode
#                               changed=0, state=absent twice (timings in .lab/driver/timings.txt)
#   DRIVER_VM_KEEP=1            leave the guest running afterwards (tests/lab/vm/stop.sh drvvm)
#   make test-nightly           the lanes too slow for every CI run: test-driver (docs/driver.md, measured
#                               there); run it nightly and on changes under roles/driver or _driver.py
# test-driver is not in EXTRA_TEST_TARGETS: the DKMS build under TCG is too slow for every CI run (docs/driver.md).
.PHONY: test-driver test-driver-replay test-nightly

test-driver-replay: install ## driver: H200 check-mode playbook against the replayed capture (580 satisfied, 570 changes)
	BIN=$(BIN) tests/lab/driver/run-h200-replay.sh

test-driver: install ## driver lane: real DKMS install of nvidia-driver 535 in the VM, rerun changed=0, absent
	BIN=$(BIN) GPUOPS_CACHE=$(GPUOPS_CACHE) tests/lab/driver/run.sh

test-nightly: test-driver ## lanes too slow for every CI run (the driver VM lane's real DKMS build under TCG)

EXTRA_TEST_TARGETS += test-driver-replay
