/* SPDX-License-Identifier: Apache-2.0 */
#include "mgr.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "macros.h"
#include "unixsock.h"
#include "proto.h"
#include "util.h"

static const char *const op_names[MGR_OP_MAX] = {
        [MGR_OP_PING] = "ping",
        [MGR_OP_VMM_VERIFY] = "vmm.verify",
        [MGR_OP_VMM_SIGNAL] = "vmm.signal",
        [MGR_OP_CGROUP_REMOVE] = "cgroup.remove",
        [MGR_OP_FILE_GIVE] = "file.give",
        [MGR_OP_FILE_RECLAIM] = "file.reclaim",
        [MGR_OP_TEMPLATE_STEP] = "template.step",
        [MGR_OP_VMM_SPAWN] = "vmm.spawn",
        [MGR_OP_NET_LISTEN] = "net.listen",
        [MGR_OP_NET_CONNECT] = "net.connect",
};

/* The keys each op takes besides "op": all required, nothing else allowed. */
#define K_PID (1u << 0)
#define K_START (1u << 1)
#define K_UID (1u << 2)
#define K_SIGNAL (1u << 3)
#define K_PATH (1u << 4)
#define K_MODE (1u << 5)
#define K_RUN_DIR (1u << 6)
#define K_KERNEL (1u << 7)
#define K_INITRD (1u << 8)
#define K_DISK (1u << 9)
#define K_DISK_TARGET (1u << 10)
#define K_MEM (1u << 11)
#define K_TEMPLATE_RAM (1u << 12)
#define K_KVM (1u << 13)
#define K_MEMORY (1u << 14)
#define K_VCPUS (1u << 15)
#define K_ARGV (1u << 16)
#define K_STEP (1u << 17)
#define K_NAME (1u << 18)
#define K_DIR (1u << 19)
#define K_OUT (1u << 20)
#define K_KERNEL_DIR (1u << 21)
#define K_PORT (1u << 22)
#define K_VOLUMES (1u << 23)
static const unsigned op_keys[MGR_OP_MAX] = {
        [MGR_OP_PING] = 0,
        [MGR_OP_VMM_VERIFY] = K_PID | K_START | K_UID,
        [MGR_OP_VMM_SIGNAL] = K_PID | K_START | K_UID | K_SIGNAL,
        [MGR_OP_CGROUP_REMOVE] = K_UID,
        [MGR_OP_FILE_GIVE] = K_PATH | K_UID | K_MODE,
        [MGR_OP_FILE_RECLAIM] = K_PATH | K_MODE,
        [MGR_OP_TEMPLATE_STEP] = K_STEP | K_NAME | K_DIR | K_OUT | K_KERNEL_DIR | K_ARGV,
        [MGR_OP_VMM_SPAWN] = K_UID | K_RUN_DIR | K_KERNEL | K_INITRD | K_DISK | K_DISK_TARGET | K_MEM |
                             K_TEMPLATE_RAM | K_KVM | K_MEMORY | K_VCPUS | K_ARGV | K_VOLUMES,
        [MGR_OP_NET_LISTEN] = K_PID | K_START | K_UID,
        [MGR_OP_NET_CONNECT] = K_PID | K_START | K_UID | K_PORT,
};
static const char *const key_names[] = { "pid",  "start_time",  "uid", "signal",       "path", "mode",
                                          "run_dir", "kernel",  "initrd", "disk", "disk_target", "mem",
                                          "template_ram", "kvm", "memory_mib", "vcpus", "argv",
                                          "step", "name", "dir", "out", "kernel_dir", "port", "volumes" };

const char *mgr_op_name(enum mgr_op op) {
        return (unsigned) op < MGR_OP_MAX ? op_names[op] : NULL;
}

bool mgr_policy_vm_uid(const struct mgr_policy *p, uid_t uid) {
        return p && p->vm_uid_base > 0 && uid >= p->vm_uid_base && uid - p->vm_uid_base < p->vm_uid_count;
}

static bool name_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-';
}

int mgr_path_check(const struct mgr_policy *p, const char *path) {
        if (!p || !path || strlen(path) >= sizeof ((struct mgr_request *) NULL)->path)
                return -EINVAL;
        for (size_t i = 0; i < p->n_roots; i++) {
                const char *root = p->roots[i];
                size_t rl = root ? strlen(root) : 0;
                if (rl < 2 || strncmp(path, root, rl) != 0 || path[rl] != '/')
                        continue;
                /* below the root: plain names only */
                const char *s = path + rl + 1;
                unsigned depth = 0;
                for (;;) {
                        size_t n = 0;
                        if (*s == '/' || *s == 0 || (s[0] == '.' && (s[1] == '/' || s[1] == 0)) ||
                            (s[0] == '.' && s[1] == '.' && (s[2] == '/' || s[2] == 0)))
                                return -EINVAL; /* ".", "..", empty component, trailing '/' */
                        while (s[n] && s[n] != '/') {
                                if (!name_char(s[n]))
                                        return -EINVAL;
                                n++;
                        }
                        if (++depth > MGR_PATH_DEPTH_MAX)
                                return -EINVAL;
                        if (!s[n])
                                return (int) i;
                        s += n + 1;
                }
        }
        return -EINVAL;
}

_printf_(3, 4) static int fail(char *err, size_t n, const char *fmt, ...) {
        if (err && n) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, n, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

/* A JSON integer in [min, max]. */
static bool get_int(json_t *v, json_int_t min, json_int_t max, json_int_t *ret) {
        if (!json_is_integer(v))
                return false;
        json_int_t x = json_integer_value(v);
        if (x < min || x > max)
                return false;
        *ret = x;
        return true;
}

/* A path under one of p's roots into out (MGR_PATH_MAX); "" only when
 * may_be_empty. */
static bool get_path(json_t *v, const struct mgr_policy *p, bool may_be_empty, char *out) {
        const char *s = json_string_value(v);
        if (!s || strlen(s) != json_string_length(v))
                return false;
        if (!*s && may_be_empty) {
                out[0] = 0;
                return true;
        }
        if (mgr_path_check(p, s) < 0)
                return false;
        memcpy(out, s, strlen(s) + 1);
        return true;
}

/* VMM_SPAWN's volumes: [{"path","target"}...], at most MGR_VOLUMES_MAX,
 * both paths under a root, no target twice. */
static bool get_volumes(json_t *v, const struct mgr_policy *p, struct mgr_request *r) {
        if (!json_is_array(v) || json_array_size(v) > MGR_VOLUMES_MAX)
                return false;
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
                if (!json_is_object(e) || json_object_size(e) != 2 ||
                    !get_path(json_object_get(e, "path"), p, false, r->volumes[i]) ||
                    !get_path(json_object_get(e, "target"), p, false, r->volume_targets[i]))
                        return false;
                for (size_t j = 0; j < i; j++)
                        if (strcmp(r->volume_targets[j], r->volume_targets[i]) == 0)
                                return false;
        }
        r->n_volumes = json_array_size(v);
        return true;
}

/* A plain name: [a-z0-9][a-z0-9_-]* (templates) or, with dots, a file
 * name not starting with '.'; < max bytes. "" only when may_be_empty. */
static bool get_name(json_t *v, bool dots, bool may_be_empty, char *out, size_t max) {
        const char *s = json_string_value(v);
        if (!s || strlen(s) != json_string_length(v) || strlen(s) >= max)
                return false;
        if (!*s) {
                out[0] = 0;
                return may_be_empty;
        }
        for (const char *c = s; *c; c++) {
                bool ok = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
                          (c != s && (*c == '-' || *c == '_' || (dots && *c == '.')));
                if (!ok)
                        return false;
        }
        memcpy(out, s, strlen(s) + 1);
        return true;
}

/* Exactly one of p's roots into out. */
static bool get_root(json_t *v, const struct mgr_policy *p, char *out) {
        const char *s = json_string_value(v);
        if (!s || strlen(s) != json_string_length(v))
                return false;
        for (size_t i = 0; i < p->n_roots; i++)
                if (p->roots[i] && strcmp(s, p->roots[i]) == 0) {
                        memcpy(out, s, strlen(s) + 1);
                        return true;
                }
        return false;
}

/* argv: 1..MGR_ARGV_MAX strings of < MGR_ARG_MAX bytes, no NUL inside. */
static bool get_argv(json_t *v, char **out) {
        size_t n = json_array_size(v);
        if (!json_is_array(v) || n == 0 || n > MGR_ARGV_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                json_t *a = json_array_get(v, i);
                const char *s = json_string_value(a);
                if (!s || strlen(s) != json_string_length(a) || strlen(s) >= MGR_ARG_MAX)
                        return false;
                if (!(out[i] = strdup(s)))
                        return false;
        }
        out[n] = NULL;
        return true;
}

void mgr_request_release(struct mgr_request *r) {
        if (!r)
                return;
        for (size_t i = 0; i < MGR_ARGV_MAX && r->argv[i]; i++) {
                free(r->argv[i]);
                r->argv[i] = NULL;
        }
}

int mgr_request_parse(const void *json, size_t len, const struct mgr_policy *p, struct mgr_request *ret,
                      char *err, size_t n) {
        if (!json || !p || !ret)
                return -EINVAL;
        if (len > MGR_REQUEST_MAX)
                return fail(err, n, "request too large");
        json_error_t je;
        json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
        if (!root)
                return fail(err, n, "not JSON: %s", je.text);
        static const struct mgr_request empty = { .op = MGR_OP_MAX };
        struct mgr_request *rp = malloc(sizeof *rp);
        if (!rp) {
                json_decref(root);
                return -ENOMEM;
        }
        *rp = empty;
#define r (*rp)
        int res = -EINVAL;
        if (!json_is_object(root)) {
                res = fail(err, n, "request is not an object");
                goto out;
        }
        json_t *opv = json_object_get(root, "op");
        if (!json_is_string(opv)) {
                res = fail(err, n, "no op");
                goto out;
        }
        for (unsigned i = 0; i < MGR_OP_MAX; i++)
                if (strcmp(json_string_value(opv), op_names[i]) == 0)
                        r.op = (enum mgr_op) i;
        if (r.op == MGR_OP_MAX) {
                res = fail(err, n, "unknown op");
                goto out;
        }
        unsigned want = op_keys[r.op], seen = 0;
        const char *key;
        json_t *v;
        json_object_foreach(root, key, v) {
                if (strcmp(key, "op") == 0)
                        continue;
                unsigned k = 0;
                while (k < ARRAY_SIZE(key_names) && strcmp(key, key_names[k]) != 0)
                        k++;
                if (k == ARRAY_SIZE(key_names) || !(want & (1u << k))) {
                        res = fail(err, n, "unexpected key \"%.64s\"", key);
                        goto out;
                }
                seen |= 1u << k;
                json_int_t x = 0;
                bool ok = true;
                switch (1u << k) {
                case K_PID:
                        /* pid 1 is init: never a VM of ours */
                        ok = get_int(v, 2, (1 << 22), &x);
                        r.pid = (pid_t) x;
                        break;
                case K_START:
                        ok = get_int(v, 1, INT64_MAX, &x);
                        r.start_time = (uint64_t) x;
                        break;
                case K_UID:
                        ok = get_int(v, 1, UINT32_MAX - 1, &x) && mgr_policy_vm_uid(p, (uid_t) x);
                        r.uid = (uid_t) x;
                        break;
                case K_SIGNAL: {
                        const char *s = json_string_value(v);
                        ok = s && (strcmp(s, "kill") == 0 || strcmp(s, "term") == 0);
                        r.signal = ok && s[0] == 'k' ? SIGKILL : SIGTERM;
                        break;
                }
                case K_MODE:
                        ok = get_int(v, 0, 07777, &x) &&
                             (r.op == MGR_OP_FILE_RECLAIM ? x == 0600 || x == 0640 || x == 0644
                                                          : x == 0600 || x == 0660 || x == 0700 || x == 02770);
                        r.mode = (unsigned) x;
                        break;
                case K_PATH: {
                        const char *s = json_string_value(v);
                        int ri = s && strlen(s) == json_string_length(v) ? mgr_path_check(p, s) : -EINVAL;
                        ok = ri >= 0;
                        if (ok) {
                                r.root = (size_t) ri;
                                memcpy(r.path, s, strlen(s) + 1);
                        }
                        break;
                }
                case K_RUN_DIR:
                        ok = get_path(v, p, false, r.run_dir);
                        break;
                case K_KERNEL:
                        ok = get_path(v, p, false, r.kernel);
                        break;
                case K_INITRD:
                        ok = get_path(v, p, false, r.initrd);
                        break;
                case K_DISK:
                        ok = get_path(v, p, false, r.disk);
                        break;
                case K_DISK_TARGET:
                        ok = get_path(v, p, false, r.disk_target);
                        break;
                case K_MEM:
                        ok = get_path(v, p, true, r.mem);
                        break;
                case K_TEMPLATE_RAM:
                        ok = json_is_boolean(v);
                        r.template_ram = json_is_true(v);
                        break;
                case K_KVM:
                        ok = json_is_boolean(v);
                        r.kvm = json_is_true(v);
                        break;
                case K_MEMORY:
                        ok = get_int(v, 16, 1 << 20, &x);
                        r.memory_mib = (unsigned) x;
                        break;
                case K_VCPUS:
                        ok = get_int(v, 1, 256, &x);
                        r.vcpus = (unsigned) x;
                        break;
                case K_PORT:
                        ok = get_int(v, 1, UINT16_MAX, &x);
                        r.port = (uint16_t) x;
                        break;
                case K_ARGV:
                        ok = !r.argv[0] && get_argv(v, r.argv);
                        break;
                case K_VOLUMES:
                        ok = get_volumes(v, p, &r);
                        break;
                case K_STEP: {
                        const char *st = json_string_value(v);
                        ok = st && (strcmp(st, "kernel") == 0 || strcmp(st, "initramfs") == 0 ||
                                    strcmp(st, "rootfs") == 0 || strcmp(st, "base") == 0);
                        if (ok)
                                memcpy(r.step, st, strlen(st) + 1);
                        break;
                }
                case K_NAME:
                        ok = get_name(v, false, true, r.name, sizeof r.name);
                        break;
                case K_DIR: /* a root itself, or under one */
                        ok = get_path(v, p, false, r.dir) || get_root(v, p, r.dir);
                        break;
                case K_OUT:
                        ok = get_name(v, true, false, r.out, sizeof r.out);
                        break;
                case K_KERNEL_DIR:
                        ok = get_path(v, p, true, r.kernel_dir);
                        break;
                }
                if (!ok) {
                        res = fail(err, n, "bad %s", key_names[k]);
                        goto out;
                }
        }
        /* a template step's argv is its base's parameters: that step's
         * only; a VM's volumes, where it has any */
        unsigned optional = r.op == MGR_OP_TEMPLATE_STEP ? K_ARGV : r.op == MGR_OP_VMM_SPAWN ? K_VOLUMES : 0;
        if ((seen | optional) != want) {
                for (unsigned k = 0; k < ARRAY_SIZE(key_names); k++)
                        if ((want & ~(seen | optional)) & (1u << k)) {
                                res = fail(err, n, "missing %s", key_names[k]);
                                goto out;
                        }
        }
        /* a template step: a name for rootfs and base only, a kernel dir
         * (initramfs: the kernel's, always; rootfs: the kernel's, whose
         * container modules a recipe may copy; base: an OCI archive's) for
         * those only, the base's parameters (argv) for base only and always */
        bool base = r.op == MGR_OP_TEMPLATE_STEP && strcmp(r.step, "base") == 0;
        bool rootfs = r.op == MGR_OP_TEMPLATE_STEP && strcmp(r.step, "rootfs") == 0;
        if (r.op == MGR_OP_TEMPLATE_STEP &&
            (!!r.name[0] != (rootfs || base) ||
             (r.kernel_dir[0] && strcmp(r.step, "initramfs") != 0 && !base && !rootfs) ||
             (!r.kernel_dir[0] && strcmp(r.step, "initramfs") == 0) || !!r.argv[0] != base)) {
                res = fail(err, n, "step arguments");
                goto out;
        }
        /* a RAM file to share, or the template's sealed copy: not both */
        if (r.op == MGR_OP_VMM_SPAWN && r.template_ram && r.mem[0]) {
                res = fail(err, n, "mem and template_ram");
                goto out;
        }
        /* a volume is bound beside the disk, never over it */
        for (size_t i = 0; r.op == MGR_OP_VMM_SPAWN && i < r.n_volumes; i++)
                if (strcmp(r.volume_targets[i], r.disk_target) == 0 || strcmp(r.volumes[i], r.disk) == 0) {
                        res = fail(err, n, "a volume is the disk");
                        goto out;
                }
        *ret = r;
        res = 0;
out:
        if (res < 0)
                mgr_request_release(rp);
        free(rp);
#undef r
        json_decref(root);
        return res;
}

char *mgr_request_format(const struct mgr_request *r) {
        if (!r || (unsigned) r->op >= MGR_OP_MAX)
                return NULL;
        json_t *o = json_pack("{ss}", "op", op_names[r->op]);
        if (!o)
                return NULL;
        unsigned keys = op_keys[r->op];
        int k = 0;
        if (keys & K_PID)
                k |= json_object_set_new(o, "pid", json_integer(r->pid));
        if (keys & K_START)
                k |= json_object_set_new(o, "start_time", json_integer((json_int_t) r->start_time));
        if (keys & K_UID)
                k |= json_object_set_new(o, "uid", json_integer(r->uid));
        if (keys & K_SIGNAL)
                k |= json_object_set_new(o, "signal", json_string(r->signal == SIGKILL ? "kill" : "term"));
        if (keys & K_PATH)
                k |= json_object_set_new(o, "path", json_string(r->path));
        if (keys & K_MODE)
                k |= json_object_set_new(o, "mode", json_integer(r->mode));
        if (keys & K_PORT)
                k |= json_object_set_new(o, "port", json_integer(r->port));
        if (r->op == MGR_OP_TEMPLATE_STEP) {
                k |= json_object_set_new(o, "step", json_string(r->step));
                k |= json_object_set_new(o, "name", json_string(r->name));
                k |= json_object_set_new(o, "dir", json_string(r->dir));
                k |= json_object_set_new(o, "out", json_string(r->out));
                k |= json_object_set_new(o, "kernel_dir", json_string(r->kernel_dir));
                if (r->argv[0]) {
                        json_t *a = json_array();
                        for (size_t i = 0; a && i < MGR_ARGV_MAX && r->argv[i]; i++)
                                k |= json_array_append_new(a, json_string(r->argv[i]));
                        k |= a ? json_object_set_new(o, "argv", a) : -1;
                }
        }
        if (r->op == MGR_OP_VMM_SPAWN) {
                k |= json_object_set_new(o, "run_dir", json_string(r->run_dir));
                k |= json_object_set_new(o, "kernel", json_string(r->kernel));
                k |= json_object_set_new(o, "initrd", json_string(r->initrd));
                k |= json_object_set_new(o, "disk", json_string(r->disk));
                k |= json_object_set_new(o, "disk_target", json_string(r->disk_target));
                k |= json_object_set_new(o, "mem", json_string(r->mem));
                k |= json_object_set_new(o, "template_ram", json_boolean(r->template_ram));
                k |= json_object_set_new(o, "kvm", json_boolean(r->kvm));
                k |= json_object_set_new(o, "memory_mib", json_integer(r->memory_mib));
                k |= json_object_set_new(o, "vcpus", json_integer(r->vcpus));
                if (r->n_volumes > 0) {
                        json_t *vols = json_array();
                        for (size_t i = 0; vols && i < r->n_volumes && i < MGR_VOLUMES_MAX; i++)
                                k |= json_array_append_new(vols, json_pack("{s:s,s:s}", "path", r->volumes[i],
                                                                           "target", r->volume_targets[i]));
                        k |= vols ? json_object_set_new(o, "volumes", vols) : -1;
                }
                json_t *a = json_array();
                for (size_t i = 0; a && i < MGR_ARGV_MAX && r->argv[i]; i++)
                        k |= json_array_append_new(a, json_string(r->argv[i]));
                k |= a ? json_object_set_new(o, "argv", a) : -1;
        }
        char *s = k == 0 ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        return s;
}

/* ---- framing with fds ---- */

int mgr_send(int fd, uint8_t type, const void *payload, size_t len, const int *fds, size_t n_fds) {
        /* each receiver bounds what it takes (mgr_recv's max): the node's
         * requests to airlock-gw carry credential sets larger than these */
        if (len > PROTO_MAX_PAYLOAD || n_fds > MGR_FDS_MAX || (n_fds && !fds))
                return -EINVAL;
        uint8_t hdr[PROTO_HEADER_SIZE];
        proto_header_encode(&(struct proto_header){ .version = PROTO_VERSION, .type = type, .length = (uint32_t) len },
                            hdr);
        struct iovec iov[2] = { { hdr, sizeof hdr }, { (void *) payload, len } };
        union {
                char buf[CMSG_SPACE(sizeof(int) * MGR_FDS_MAX)];
                struct cmsghdr align;
        } u;
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };
        if (n_fds) {
                memset(&u, 0, sizeof u);
                mh.msg_control = u.buf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
        }
        ssize_t k;
        do
                k = sendmsg(fd, &mh, MSG_NOSIGNAL);
        while (k < 0 && errno == EINTR);
        if (k < 0)
                return negative_errno();
        /* the fds went with the first byte; the rest is plain data */
        size_t sent = (size_t) k, total = sizeof hdr + len;
        if (sent < sizeof hdr) {
                int r = fd_write_all(fd, hdr + sent, sizeof hdr - sent);
                if (r < 0)
                        return r;
                sent = sizeof hdr;
        }
        return sent < total ? fd_write_all(fd, (const uint8_t *) payload + (sent - sizeof hdr), total - sent) : 0;
}

int mgr_recv(int fd, uint8_t type, size_t max, char **ret_payload, size_t *ret_len, int *ret_fds,
             size_t *ret_n_fds) {
        uint8_t hdr[PROTO_HEADER_SIZE];
        union {
                char buf[CMSG_SPACE(sizeof(int) * MGR_FDS_MAX)];
                struct cmsghdr align;
        } u;
        struct iovec iov = { hdr, sizeof hdr };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
        size_t n_fds = 0;
        int fds[MGR_FDS_MAX];
        ssize_t k;
        do
                k = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        while (k < 0 && errno == EINTR);
        if (k < 0)
                return negative_errno();
        int r = k == 0 ? -ECONNRESET : 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                size_t m = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < m; i++) {
                        int f;
                        memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
                        if (n_fds < MGR_FDS_MAX && ret_fds && ret_n_fds)
                                fds[n_fds++] = f;
                        else {
                                close(f);
                                r = -EBADMSG;
                        }
                }
        }
        if (mh.msg_flags & MSG_CTRUNC)
                r = -EBADMSG;
        if (r == 0 && (size_t) k < sizeof hdr)
                r = fd_read_exact(fd, hdr + k, sizeof hdr - (size_t) k);
        struct proto_header h;
        if (r == 0)
                r = proto_header_decode(hdr, &h) < 0 || h.type != type ? -EBADMSG : 0;
        if (r == 0 && h.length > max)
                r = -EMSGSIZE;
        char *p = NULL;
        if (r == 0 && !(p = malloc((size_t) h.length + 1)))
                r = -ENOMEM;
        if (r == 0 && h.length > 0)
                r = fd_read_exact(fd, p, h.length);
        if (r < 0) {
                free(p);
                for (size_t i = 0; i < n_fds; i++)
                        close(fds[i]);
                return r == -EPIPE ? -ECONNRESET : r;
        }
        p[h.length] = 0;
        *ret_payload = p;
        if (ret_len)
                *ret_len = h.length;
        if (ret_fds && ret_n_fds) {
                memcpy(ret_fds, fds, n_fds * sizeof(int));
                *ret_n_fds = n_fds;
        }
        return 0;
}

int mgr_open_beneath(int root_fd, const char *root_path, const char *path, int extra_flags) {
        size_t rl = root_path ? strlen(root_path) : 0;
        if (root_fd < 0 || rl == 0 || !path || strncmp(path, root_path, rl) != 0 || path[rl] != '/')
                return -EINVAL;
        struct open_how how = {
                /* no O_NOFOLLOW: with it, a trailing symlink would be opened
                 * itself; without, RESOLVE_NO_SYMLINKS refuses it (ELOOP) */
                .flags = (uint64_t) (O_PATH | O_CLOEXEC | extra_flags),
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
        };
        long fd = syscall(SYS_openat2, root_fd, path + rl + 1, &how, sizeof how);
        return fd < 0 ? negative_errno() : (int) fd;
}

/* ---- the node's side ---- */

int mgr_call_send(const char *socket_path, const struct mgr_request *r, const int *fds, size_t n_fds,
                  int *ret_conn) {
        if (!socket_path)
                return -ENAMETOOLONG;
        _cleanup_free_ char *req = mgr_request_format(r);
        if (!req)
                return -ENOMEM;
        _cleanup_close_ int fd = -EBADF;
        int k = unix_connect(socket_path, 0, &fd);
        if (k < 0)
                return k;
        k = mgr_send(fd, PROTO_MGR_REQUEST, req, strlen(req), fds, n_fds);
        if (k < 0)
                return k;
        *ret_conn = TAKE_FD(fd);
        return 0;
}

int mgr_call(const char *socket_path, const struct mgr_request *r, const int *fds, size_t n_fds, char **ret_reply,
             int *ret_fds, size_t *ret_n_fds, char *err, size_t n) {
        if (err && n)
                err[0] = 0;
        _cleanup_close_ int fd = -EBADF;
        int k = mgr_call_send(socket_path, r, fds, n_fds, &fd);
        if (k < 0)
                return k;
        return mgr_call_recv(fd, ret_reply, ret_fds, ret_n_fds, err, n);
}

int mgr_call_recv(int fd, char **ret_reply, int *ret_fds, size_t *ret_n_fds, char *err, size_t n) {
        if (err && n)
                err[0] = 0;
        _cleanup_free_ char *reply = NULL;
        size_t len;
        int got[MGR_FDS_MAX];
        size_t n_got = 0;
        int k = mgr_recv(fd, PROTO_MGR_REPLY, MGR_REQUEST_MAX, &reply, &len, got, &n_got);
        if (k < 0)
                return k;
        json_t *o = json_loadb(reply, len, 0, NULL);
        bool ok = json_is_object(o) && !json_object_get(o, "error") && json_is_true(json_object_get(o, "ok")) &&
                  (n_got == 0 || ret_fds);
        if (!ok || !ret_fds)
                for (size_t i = 0; i < n_got; i++)
                        close(got[i]);
        if (!json_is_object(o)) {
                json_decref(o);
                return -EBADMSG;
        }
        json_t *e = json_object_get(o, "error");
        if (e) {
                json_int_t no = json_integer_value(json_object_get(e, "errno"));
                const char *msg = json_string_value(json_object_get(e, "message"));
                if (err && n)
                        snprintf(err, n, "%s", msg ? msg : "");
                json_decref(o);
                return no > 0 && no < 4096 ? (int) -no : -EPROTO;
        }
        json_decref(o);
        if (!ok)
                return -EBADMSG;
        if (ret_fds) {
                memcpy(ret_fds, got, n_got * sizeof(int));
                *ret_n_fds = n_got;
        }
        if (ret_reply)
                *ret_reply = TAKE_PTR(reply);
        return 0;
}
