// SPDX-License-Identifier: GPL-2.0
/*
 * A guest kernel module for the KVM tier's test of a vCPU that dies: its
 * init reads an unassigned MMIO address (no memory, no device there) with
 * POPCNT, an instruction KVM's emulator does not decode. At CPL 0 KVM then
 * gives up on the vCPU ("KVM internal error. Suberror: 1", emulation
 * failure) and QEMU stops the VM in run state internal-error, its process
 * alive: what a driver doing something KVM cannot emulate does in
 * production. Built against the guest kernel's own headers
 * (tests/kvm/l1-kit.sh); never loaded anywhere but a test's sandbox.
 */
#include <linux/io.h>
#include <linux/module.h>

#define UNASSIGNED_MMIO 0xd0000000UL /* microvm: between RAM and the virtio-mmio devices */

static int __init vcpu_fault_init(void)
{
	void __iomem *p = ioremap(UNASSIGNED_MMIO, PAGE_SIZE);
	unsigned long v = 0;

	if (!p)
		return -ENOMEM;
	asm volatile("popcntq (%1), %0" : "=r"(v) : "r"(p) : "memory");
	iounmap(p);
	return v ? 0 : -EIO; /* not reached under KVM */
}

static void __exit vcpu_fault_exit(void)
{
}

module_init(vcpu_fault_init);
module_exit(vcpu_fault_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Airlock's KVM tier: a vCPU KVM cannot emulate");
