/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU the node's VMs get and the CPU tags of saved states (vmm.h). */
#include "vmm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>

#include "host.h"
#include "log.h"
#include "util.h"

#define CPU_XATTR "user.airlock.cpu"

/* Set once by vmm_cpu_setup() at start, before any VM. */
static char cpu_arg[80] = "max";                /* QEMU's -cpu under KVM */
static char cpu_id[VMM_CPU_ID_MAX] = "tcg:max"; /* what its saved states need */

int vmm_cpu_setup(enum vmm_accel accel, const char *model) {
        if (accel == VMM_ACCEL_TCG) {
                if (model && strcmp(model, "host") != 0 && strcmp(model, "max") != 0)
                        log_warn("AIRLOCK_CPU_MODEL=%s applies under KVM: TCG's VMs get QEMU's max", model);
                snprintf(cpu_arg, sizeof cpu_arg, "max");
                snprintf(cpu_id, sizeof cpu_id, "tcg:max");
        } else if (!model || strcmp(model, "host") == 0) {
                char sig[64];
                int r = host_cpu_signature(sig, sizeof sig);
                if (r < 0)
                        return log_error_errno(
                                r, "cannot read the host CPU's vendor, family, model and stepping: %m");
                snprintf(cpu_arg, sizeof cpu_arg, "host");
                snprintf(cpu_id, sizeof cpu_id, "kvm:host:%s", sig);
        } else {
                if (strlen(model) > 63 || strchr(model, ','))
                        return log_error_errno(-EINVAL, "AIRLOCK_CPU_MODEL=%s is not a QEMU CPU model",
                                               model);
                /* enforce: a host without every feature of the model is a
                 * start that fails, not a VM that differs */
                snprintf(cpu_arg, sizeof cpu_arg, "%s,enforce", model);
                snprintf(cpu_id, sizeof cpu_id, "kvm:%s", model);
        }
        log_info("VM CPU %s (%s)", cpu_id,
                 accel == VMM_ACCEL_TCG ? "TCG's max"
                 : strcmp(cpu_arg, "host") == 0
                         ? "the host's own: snapshots resume on hosts of this CPU"
                         : "a named model: snapshots resume on every host that has it");
        return 0;
}

const char *vmm_cpu_id(void) {
        return cpu_id;
}

const char *vmm_cpu_arg(void) {
        return cpu_arg;
}

int vmm_state_cpu_tag(int fd) {
        return fsetxattr(fd, CPU_XATTR, cpu_id, strlen(cpu_id), 0) < 0 ? negative_errno() : 0;
}

int vmm_state_cpu(const char *state_path, char *buf, size_t n) {
        if (n == 0)
                return -EINVAL;
        ssize_t k = getxattr(state_path, CPU_XATTR, buf, n - 1);
        if (k < 0)
                return errno == ENODATA || errno == ENOTSUP ? -ENODATA : negative_errno();
        buf[k] = 0;
        return 0;
}

int vmm_state_cpu_set(const char *state_path, const char *cpu) {
        return setxattr(state_path, CPU_XATTR, cpu, strlen(cpu), 0) < 0 ? negative_errno() : 0;
}

int vmm_state_cpu_check(const char *state_path, char **ret_error) {
        char saved[VMM_CPU_ID_MAX];
        int r = vmm_state_cpu(state_path, saved, sizeof saved);
        if (r == -ENODATA || (r >= 0 && strcmp(saved, cpu_id) == 0))
                return 0;
        if (r < 0)
                return r;
        if (ret_error)
                *ret_error = strdup_printf(
                        "its saved state is of a VM with CPU %s and this node's VMs have %s: a "
                        "VM's memory and CPU state resume only on the CPU they ran on (the same "
                        "AIRLOCK_ACCEL and AIRLOCK_CPU_MODEL, and under host the same CPU model)",
                        saved, cpu_id);
        return -EXDEV;
}
