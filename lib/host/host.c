/* SPDX-License-Identifier: Apache-2.0 */
#include "host.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "macros.h"
#include "util.h"

/* /proc/cpuinfo grows with the cpu count: 64 MiB is thousands of cpus. */
#define CPUINFO_MAX (64u << 20)

bool host_word_in(const char *line, size_t len, const char *word) {
        size_t wl = strlen(word);
        for (size_t i = 0; i < len;) {
                while (i < len && isspace((unsigned char) line[i]))
                        i++;
                size_t j = i;
                while (j < len && !isspace((unsigned char) line[j]))
                        j++;
                if (j - i == wl && wl > 0 && memcmp(line + i, word, wl) == 0)
                        return true;
                i = j;
        }
        return false;
}

bool host_cpuinfo_field(const char *text, const char *key, const char **ret_val, size_t *ret_len) {
        size_t kl = strlen(key);
        for (const char *p = text; p && *p;) {
                const char *eol = strchrnul(p, '\n');
                if (strncmp(p, key, kl) == 0 && (p[kl] == ' ' || p[kl] == '\t' || p[kl] == ':')) {
                        /* the key alone before the colon: "model" is not "model name" */
                        const char *colon = p + kl;
                        while (colon < eol && (*colon == ' ' || *colon == '\t'))
                                colon++;
                        if (colon < eol && *colon == ':') {
                                const char *v = colon + 1;
                                while (*v == ' ' || *v == '\t')
                                        v++;
                                *ret_val = v;
                                *ret_len = (size_t) (eol - v);
                                return true;
                        }
                }
                p = *eol ? eol + 1 : NULL;
        }
        return false;
}

bool host_cpu_has_virt(const char *cpuinfo) {
        const char *flags;
        size_t len;
        return host_cpuinfo_field(cpuinfo, "flags", &flags, &len) &&
               (host_word_in(flags, len, "vmx") || host_word_in(flags, len, "svm"));
}

int host_cpu_signature(char *buf, size_t n) {
        _cleanup_free_ char *info = NULL;
        int r = file_read_all("/proc/cpuinfo", CPUINFO_MAX, &info, NULL);
        if (r < 0)
                return r;
        static const char *const keys[] = { "vendor_id", "cpu family", "model", "stepping" };
        size_t at = 0;
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                const char *v;
                size_t len;
                if (!host_cpuinfo_field(info, keys[i], &v, &len) || len == 0 || len > 32)
                        return -ENODATA;
                int k = snprintf(buf + at, n - at, "%s%.*s", i ? "-" : "", (int) len, v);
                if (k < 0 || (size_t) k >= n - at)
                        return -ENAMETOOLONG;
                at += (size_t) k;
        }
        for (char *p = buf; *p; p++)
                if (!isalnum((unsigned char) *p) && *p != '-' && *p != '_' && *p != '.')
                        *p = '_';
        return 0;
}

bool host_kvm_usable(char *reason, size_t n) {
        _cleanup_free_ char *info = NULL;
        int r = file_read_all("/proc/cpuinfo", CPUINFO_MAX, &info, NULL);
        if (r < 0) {
                snprintf(reason, n, "cannot read /proc/cpuinfo: %s", strerror(-r));
                return false;
        }
        if (!host_cpu_has_virt(info)) {
                snprintf(reason, n, "cpu has no vmx/svm flag (PVM host or nested virtualisation off?)");
                return false;
        }
        int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
        if (fd < 0) {
                snprintf(reason, n, "cpu has vmx/svm but /dev/kvm does not open read-write: %s", strerror(errno));
                return false;
        }
        close(fd);
        snprintf(reason, n, "cpu has vmx/svm and /dev/kvm opens");
        return true;
}
