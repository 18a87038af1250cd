# VM lane (issue 3): a Debian bookworm guest under qemu (TCG) with an emulated Intel IOMMU,
# GRUB, and PCI stand-ins for a GPU + companion.  Scripts: tests/lab/vm/.  Scenario: molecule/vfio/.
VM_LANE   := $(ROOT)/tests/lab/vm
VM_CACHE  := $(GPUOPS_CACHE)/vm
export VM_CACHE

.PHONY: vm-deps vm-image vm-up vm-down test-vm

vm-deps: ## host packages for the VM lane (qemu, debootstrap, grub-pc-bin) -- no-op when present
	$(VM_LANE)/deps.sh

vm-image: vm-deps ## build (or reuse from $(GPUOPS_CACHE)/vm) the lane's bookworm disk image
	$(VM_LANE)/build-image.sh

vm-up: vm-image ## boot the lab VM "gpuvm" and write .lab/vm/hosts.yml (group vm_passthrough)
	$(VM_LANE)/start.sh gpuvm
	$(VM_LANE)/wait-ssh.sh gpuvm 900
	$(VM_LANE)/inventory.sh gpuvm > $(ROOT)/.lab/vm/hosts.yml
	@echo "inventory: $(ROOT)/.lab/vm/hosts.yml"

vm-down: ## stop the lab VM "gpuvm" (logs stay under .lab/vm/)
	$(VM_LANE)/stop.sh gpuvm

# molecule's prerun is off (molecule/vfio/molecule.yml): it would install the collection under test into
# ~/.ansible/collections, where a copy shadows .collections for tools of lanes running beside this one;
# the scenario reads the installed tarball from ANSIBLE_COLLECTIONS_PATH (.collections) instead

test-vm: install vm-image ## VM lane: molecule scenario vfio (real kernel, IOMMU, GRUB, vfio-pci)
	@start=$$(date +%s); \
	export VM_RUN_ID=test-vm-$$$$; \
	trap '$(VM_LANE)/stop.sh --all' EXIT INT TERM; \
	$(BIN)/molecule test -s vfio; \
	echo "test-vm: $$(( $$(date +%s) - start )) s"

BESIDE_TEST_TARGETS += test-vm
