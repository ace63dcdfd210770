/* SPDX-License-Identifier: Apache-2.0 */
/* lib/mgr: the node manager's request parser (what it accepts and what it
 * refuses), path rules, the format/parse round trip, frames with fds, and
 * the no-symlink open. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "mgr.h"
#include "proto.h"

static const struct mgr_policy policy = {
        .vm_uid_base = 2000000,
        .vm_uid_count = 65536,
        .roots = { "/var/lib/airlock/vol", "/var/lib/airlock" },
        .n_roots = 2,
};

static int parse(const char *json, struct mgr_request *r) {
        char err[256];
        return mgr_request_parse(json, strlen(json), &policy, r, err, sizeof err);
}

static void test_accepts(void **state) {
        (void) state;
        struct mgr_request r;
        assert_int_equal(parse("{\"op\":\"ping\"}", &r), 0);
        assert_int_equal(r.op, MGR_OP_PING);
        assert_int_equal(parse("{\"op\":\"vmm.signal\",\"pid\":1234,\"start_time\":99,\"uid\":2000001,\"signal\":\"kill\"}",
                               &r),
                         0);
        assert_int_equal(r.op, MGR_OP_VMM_SIGNAL);
        assert_int_equal(r.pid, 1234);
        assert_int_equal(r.start_time, 99);
        assert_int_equal(r.uid, 2000001);
        assert_int_equal(r.signal, SIGKILL);
        assert_int_equal(parse("{\"op\":\"vmm.verify\",\"pid\":7,\"start_time\":1,\"uid\":2065535}", &r), 0);
        assert_int_equal(parse("{\"op\":\"cgroup.remove\",\"uid\":2000000}", &r), 0);
        assert_int_equal(
                parse("{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/vol/sandboxes/sbx-1/disk.img\",\"uid\":2000002,"
                      "\"mode\":432}",
                      &r),
                0);
        assert_int_equal(r.root, 0); /* the longest root comes first in the policy */
        assert_int_equal(r.mode, 0660);
        assert_string_equal(r.path, "/var/lib/airlock/vol/sandboxes/sbx-1/disk.img");
        assert_int_equal(parse("{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/pool/x/vm\",\"uid\":2000002,"
                               "\"mode\":1528}",
                               &r),
                         0);
        assert_int_equal(r.root, 1);
        assert_int_equal(r.mode, 02770);
}

static void test_refuses(void **state) {
        (void) state;
        static const char *const bad[] = {
                "",
                "[]",
                "\"ping\"",
                "{}",
                "{\"op\":1}",
                "{\"op\":\"shell\",\"cmd\":\"rm -rf /\"}",
                "{\"op\":\"ping\",\"x\":1}",
                "{\"op\":\"ping\",\"op\":\"ping\"}",
                /* missing keys */
                "{\"op\":\"vmm.signal\",\"pid\":1234,\"uid\":2000001,\"signal\":\"kill\"}",
                /* pid 1, 0, negative, huge, not a number */
                "{\"op\":\"vmm.signal\",\"pid\":1,\"start_time\":9,\"uid\":2000001,\"signal\":\"kill\"}",
                "{\"op\":\"vmm.signal\",\"pid\":0,\"start_time\":9,\"uid\":2000001,\"signal\":\"kill\"}",
                "{\"op\":\"vmm.signal\",\"pid\":-5,\"start_time\":9,\"uid\":2000001,\"signal\":\"kill\"}",
                "{\"op\":\"vmm.signal\",\"pid\":99999999,\"start_time\":9,\"uid\":2000001,\"signal\":\"kill\"}",
                "{\"op\":\"vmm.signal\",\"pid\":\"12\",\"start_time\":9,\"uid\":2000001,\"signal\":\"kill\"}",
                "{\"op\":\"vmm.signal\",\"pid\":12.5,\"start_time\":9,\"uid\":2000001,\"signal\":\"kill\"}",
                /* uids outside the VM range: root, a user, just past the end */
                "{\"op\":\"vmm.signal\",\"pid\":12,\"start_time\":9,\"uid\":0,\"signal\":\"kill\"}",
                "{\"op\":\"vmm.signal\",\"pid\":12,\"start_time\":9,\"uid\":1000,\"signal\":\"kill\"}",
                "{\"op\":\"vmm.signal\",\"pid\":12,\"start_time\":9,\"uid\":2065536,\"signal\":\"kill\"}",
                "{\"op\":\"cgroup.remove\",\"uid\":1999999}",
                /* other signals */
                "{\"op\":\"vmm.signal\",\"pid\":12,\"start_time\":9,\"uid\":2000001,\"signal\":\"stop\"}",
                "{\"op\":\"vmm.signal\",\"pid\":12,\"start_time\":9,\"uid\":2000001,\"signal\":9}",
                /* paths: outside the roots, the root itself, traversal, links' tricks, odd names */
                "{\"op\":\"file.give\",\"path\":\"/etc/shadow\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock\",\"uid\":2000002,\"mode\":448}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/\",\"uid\":2000002,\"mode\":448}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlockx/a\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/../../../etc/shadow\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/a/../b\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/./a\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock//a\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/a/\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/..\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/.\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/a/..\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/a b\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/a\\u0000b\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"var/lib/airlock/a\",\"uid\":2000002,\"mode\":384}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/1/2/3/4/5/6/7/8/9\",\"uid\":2000002,\"mode\":384}",
                /* modes: setuid, world-readable, executable files */
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/a\",\"uid\":2000002,\"mode\":2541}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/a\",\"uid\":2000002,\"mode\":420}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/a\",\"uid\":2000002,\"mode\":493}",
                "{\"op\":\"file.give\",\"path\":\"/var/lib/airlock/a\",\"uid\":0,\"mode\":384}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                struct mgr_request r;
                char err[256] = "";
                int k = mgr_request_parse(bad[i], strlen(bad[i]), &policy, &r, err, sizeof err);
                if (k != -EINVAL)
                        fail_msg("accepted: %s", bad[i]);
                assert_true(err[0] != 0);
        }
        /* a request beyond the limit is refused before it is parsed */
        size_t big = MGR_REQUEST_MAX + 1;
        char *s = malloc(big);
        assert_non_null(s);
        memset(s, ' ', big);
        struct mgr_request r;
        assert_int_equal(mgr_request_parse(s, big, &policy, &r, NULL, 0), -EINVAL);
        free(s);
}

#define SPAWN(extra)                                                                                        \
        "{\"op\":\"vmm.spawn\",\"uid\":2000005,\"run_dir\":\"/var/lib/airlock/run/vm/7\","                  \
        "\"kernel\":\"/var/lib/airlock/vol/templates/k/vmlinux\",\"initrd\":\"/var/lib/airlock/vol/templates/t/i\"," \
        "\"disk\":\"/var/lib/airlock/vol/sandboxes/s/rootfs.img\",\"disk_target\":\"/var/lib/airlock/run/vm/7/disk.img\"," \
        "\"memory_mib\":256,\"vcpus\":1,\"kvm\":false," extra "}"

static void test_spawn(void **state) {
        (void) state;
        struct mgr_request r;
        assert_int_equal(parse(SPAWN("\"mem\":\"\",\"template_ram\":true,\"argv\":[\"/usr/bin/qemu\",\"-m\",\"256\"]"), &r),
                         0);
        assert_int_equal(r.op, MGR_OP_VMM_SPAWN);
        assert_true(r.template_ram && !r.kvm);
        assert_string_equal(r.argv[0], "/usr/bin/qemu");
        assert_string_equal(r.argv[2], "256");
        assert_null(r.argv[3]);
        char *json = mgr_request_format(&r);
        struct mgr_request again;
        assert_non_null(json);
        assert_int_equal(parse(json, &again), 0);
        assert_string_equal(again.disk_target, r.disk_target);
        assert_string_equal(again.argv[1], "-m");
        free(json);
        mgr_request_release(&again);
        mgr_request_release(&r);
        static const char *const bad[] = {
                SPAWN("\"mem\":\"\",\"template_ram\":true,\"argv\":[]"),
                SPAWN("\"mem\":\"\",\"template_ram\":true,\"argv\":\"/usr/bin/qemu -m 256\""),
                SPAWN("\"mem\":\"\",\"template_ram\":true,\"argv\":[\"a\",1]"),
                SPAWN("\"mem\":\"/etc/passwd\",\"template_ram\":false,\"argv\":[\"a\"]"),
                SPAWN("\"mem\":\"/var/lib/airlock/m\",\"template_ram\":true,\"argv\":[\"a\"]"),
                SPAWN("\"mem\":\"\",\"template_ram\":1,\"argv\":[\"a\"]"),
                SPAWN("\"mem\":\"\",\"template_ram\":true"),
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                char err[256] = "";
                if (mgr_request_parse(bad[i], strlen(bad[i]), &policy, &r, err, sizeof err) != -EINVAL)
                        fail_msg("accepted: %s", bad[i]);
        }
        /* volumes: each image under a root bound at its own target, beside the disk */
#define VOL(i)                                                                                              \
        "{\"path\":\"/var/lib/airlock/vol/sandboxes/s/volumes/" #i                                          \
        ".img\",\"target\":\"/var/lib/airlock/run/vm/7/vol" #i ".img\"}"
#define SPAWN_VOLS(vols)                                                                                    \
        SPAWN("\"mem\":\"\",\"template_ram\":true,\"argv\":[\"/usr/bin/qemu\"],\"volumes\":" vols)
        assert_int_equal(parse(SPAWN_VOLS("[" VOL(0) "," VOL(3) "]"), &r), 0);
        assert_int_equal(r.n_volumes, 2);
        assert_string_equal(r.volume_targets[1], "/var/lib/airlock/run/vm/7/vol3.img");
        json = mgr_request_format(&r);
        assert_non_null(json);
        assert_int_equal(parse(json, &again), 0);
        assert_int_equal(again.n_volumes, 2);
        assert_string_equal(again.volumes[0], r.volumes[0]);
        free(json);
        mgr_request_release(&again);
        mgr_request_release(&r);
        assert_int_equal(parse(SPAWN_VOLS("[]"), &r), 0);
        assert_int_equal(r.n_volumes, 0);
        mgr_request_release(&r);
        static const char *const bad_volumes[] = {
                SPAWN_VOLS("[" VOL(0) "," VOL(1) "," VOL(2) "," VOL(3) "," VOL(
                        4) "]"),                       /* more than the slots */
                SPAWN_VOLS("[" VOL(0) "," VOL(0) "]"), /* one target twice */
                SPAWN_VOLS("[{\"path\":\"/etc/shadow\",\"target\":\"/var/lib/airlock/run/vm/7/vol0.img\"}]"),
                SPAWN_VOLS("[{\"path\":\"/var/lib/airlock/vol/x\",\"target\":\"/var/lib/airlock/run/vm/7/"
                           "disk.img\"}]"),
                SPAWN_VOLS("[{\"path\":\"/var/lib/airlock/vol/x\"}]"),
                SPAWN_VOLS("[{\"path\":\"/var/lib/airlock/vol/x\",\"target\":\"/var/lib/airlock/"
                           "y\",\"ro\":true}]"),
                SPAWN_VOLS("{}"),
        };
        for (size_t i = 0; i < sizeof bad_volumes / sizeof bad_volumes[0]; i++) {
                char err[256] = "";
                if (mgr_request_parse(bad_volumes[i], strlen(bad_volumes[i]), &policy, &r, err,
                                      sizeof err) != -EINVAL)
                        fail_msg("accepted: %s", bad_volumes[i]);
        }
        /* argv: at most MGR_ARGV_MAX entries */
        char big[8192] = "";
        strcat(big, "\"mem\":\"\",\"template_ram\":false,\"argv\":[");
        for (int i = 0; i <= MGR_ARGV_MAX; i++)
                strcat(big, i ? ",\"x\"" : "\"x\"");
        strcat(big, "]");
        char *req = NULL;
        assert_true(asprintf(&req, SPAWN("%s"), big) > 0);
        assert_int_equal(mgr_request_parse(req, strlen(req), &policy, &r, NULL, 0), -EINVAL);
        free(req);
}

static void test_template_step_and_reclaim(void **state) {
        (void) state;
        struct mgr_request r;
        assert_int_equal(parse("{\"op\":\"template.step\",\"step\":\"rootfs\",\"name\":\"python\",\"dir\":"
                               "\"/var/lib/airlock/vol/templates/.tmp-python-1\",\"out\":\"rootfs.img\",\"kernel_dir\":\"\"}",
                               &r),
                         0);
        assert_string_equal(r.name, "python");
        assert_string_equal(r.out, "rootfs.img");
        /* the dir may be a root itself */
        assert_int_equal(parse("{\"op\":\"template.step\",\"step\":\"kernel\",\"name\":\"\",\"dir\":\"/var/lib/airlock\","
                               "\"out\":\"kernel-abc\",\"kernel_dir\":\"\"}",
                               &r),
                         0);
        assert_int_equal(parse("{\"op\":\"file.reclaim\",\"path\":\"/var/lib/airlock/t/mem\",\"mode\":384}", &r), 0);
        static const char *const bad[] = {
                /* a name that is a path, a shell word, upper case; a name for kernel; no name for rootfs */
                "{\"op\":\"template.step\",\"step\":\"rootfs\",\"name\":\"../../bin/sh\",\"dir\":\"/var/lib/airlock\",\"out\":\"r\",\"kernel_dir\":\"\"}",
                "{\"op\":\"template.step\",\"step\":\"rootfs\",\"name\":\"a;rm -rf /\",\"dir\":\"/var/lib/airlock\",\"out\":\"r\",\"kernel_dir\":\"\"}",
                "{\"op\":\"template.step\",\"step\":\"rootfs\",\"name\":\"Python\",\"dir\":\"/var/lib/airlock\",\"out\":\"r\",\"kernel_dir\":\"\"}",
                "{\"op\":\"template.step\",\"step\":\"kernel\",\"name\":\"x\",\"dir\":\"/var/lib/airlock\",\"out\":\"k\",\"kernel_dir\":\"\"}",
                "{\"op\":\"template.step\",\"step\":\"rootfs\",\"name\":\"\",\"dir\":\"/var/lib/airlock\",\"out\":\"r\",\"kernel_dir\":\"\"}",
                /* an unknown step, out that is a path, an initramfs without its kernel, a dir outside */
                "{\"op\":\"template.step\",\"step\":\"shell\",\"name\":\"\",\"dir\":\"/var/lib/airlock\",\"out\":\"k\",\"kernel_dir\":\"\"}",
                "{\"op\":\"template.step\",\"step\":\"kernel\",\"name\":\"\",\"dir\":\"/var/lib/airlock\",\"out\":\"../k\",\"kernel_dir\":\"\"}",
                "{\"op\":\"template.step\",\"step\":\"initramfs\",\"name\":\"\",\"dir\":\"/var/lib/airlock\",\"out\":\"i\",\"kernel_dir\":\"\"}",
                "{\"op\":\"template.step\",\"step\":\"kernel\",\"name\":\"\",\"dir\":\"/etc\",\"out\":\"k\",\"kernel_dir\":\"\"}",
                /* reclaim: outside, group-writable, executable */
                "{\"op\":\"file.reclaim\",\"path\":\"/etc/shadow\",\"mode\":384}",
                "{\"op\":\"file.reclaim\",\"path\":\"/var/lib/airlock/t/mem\",\"mode\":432}",
                "{\"op\":\"file.reclaim\",\"path\":\"/var/lib/airlock/t/mem\",\"mode\":493}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                char err[256] = "";
                if (mgr_request_parse(bad[i], strlen(bad[i]), &policy, &r, err, sizeof err) != -EINVAL)
                        fail_msg("accepted: %s", bad[i]);
        }
}

static void test_round_trip(void **state) {
        (void) state;
        struct mgr_request in = { .op = MGR_OP_FILE_GIVE, .uid = 2000003, .mode = 0700 };
        strcpy(in.path, "/var/lib/airlock/vol/sandboxes/s/executions/1/vm");
        char *json = mgr_request_format(&in);
        assert_non_null(json);
        struct mgr_request out;
        assert_int_equal(parse(json, &out), 0);
        assert_int_equal(out.op, in.op);
        assert_int_equal(out.uid, in.uid);
        assert_int_equal(out.mode, in.mode);
        assert_string_equal(out.path, in.path);
        free(json);
        in = (struct mgr_request){ .op = MGR_OP_VMM_SIGNAL, .pid = 4321, .start_time = 123456789, .uid = 2000100,
                                   .signal = SIGTERM };
        json = mgr_request_format(&in);
        assert_non_null(json);
        assert_int_equal(parse(json, &out), 0);
        assert_int_equal(out.pid, 4321);
        assert_int_equal(out.start_time, 123456789);
        assert_int_equal(out.signal, SIGTERM);
        free(json);
        assert_null(mgr_request_format(&(struct mgr_request){ .op = MGR_OP_MAX }));
}

static void test_frames_with_fds(void **state) {
        (void) state;
        int sp[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        assert_true(null >= 0);
        assert_int_equal(mgr_send(sp[0], PROTO_MGR_REQUEST, "{\"op\":\"ping\"}", 13, &null, 1), 0);
        char *p = NULL;
        size_t len = 0, n = 0;
        int fds[MGR_FDS_MAX];
        assert_int_equal(mgr_recv(sp[1], PROTO_MGR_REQUEST, 1024, &p, &len, fds, &n), 0);
        assert_int_equal(len, 13);
        assert_string_equal(p, "{\"op\":\"ping\"}");
        assert_int_equal(n, 1);
        struct stat a, b;
        assert_int_equal(fstat(null, &a), 0);
        assert_int_equal(fstat(fds[0], &b), 0);
        assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
        assert_true(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
        close(fds[0]);
        free(p);
        /* the wrong frame type, and (a connection is one request) a frame
         * beyond the caller's limit */
        assert_int_equal(mgr_send(sp[0], PROTO_MGR_REPLY, "{}", 2, NULL, 0), 0);
        assert_int_equal(mgr_recv(sp[1], PROTO_MGR_REQUEST, 1024, &p, &len, fds, &n), -EBADMSG);
        close(sp[0]);
        close(sp[1]);
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
        assert_int_equal(mgr_send(sp[0], PROTO_MGR_REQUEST, "{\"op\":\"ping\"}", 13, NULL, 0), 0);
        assert_int_equal(mgr_recv(sp[1], PROTO_MGR_REQUEST, 4, &p, &len, fds, &n), -EMSGSIZE);
        /* garbage instead of a header */
        int sq[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sq), 0);
        assert_int_equal(write(sq[0], "0123456789abcdefXYZ", 19), 19);
        assert_int_equal(mgr_recv(sq[1], PROTO_MGR_REQUEST, 1024, &p, &len, fds, &n), -EBADMSG);
        close(sq[0]);
        close(sq[1]);
        /* a peer that hangs up: before a frame, and in the middle of one */
        close(sp[0]);
        close(sp[1]);
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
        assert_int_equal(write(sp[0], "ALK1", 4), 4);
        close(sp[0]);
        assert_int_equal(mgr_recv(sp[1], PROTO_MGR_REQUEST, 1024, &p, &len, fds, &n), -ECONNRESET);
        close(sp[1]);
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
        close(sp[0]);
        assert_int_equal(mgr_recv(sp[1], PROTO_MGR_REQUEST, 1024, &p, &len, fds, &n), -ECONNRESET);
        close(sp[1]);
        close(null);
}

static void test_open_beneath(void **state) {
        (void) state;
        char dir[] = "/tmp/test-mgr-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char p[256], q[256];
        snprintf(p, sizeof p, "%s/sub", dir);
        assert_int_equal(mkdir(p, 0700), 0);
        snprintf(p, sizeof p, "%s/sub/file", dir);
        int f = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        assert_true(f >= 0);
        close(f);
        snprintf(q, sizeof q, "%s/link", dir);
        assert_int_equal(symlink("/etc", q), 0);
        snprintf(q, sizeof q, "%s/sub/inner", dir);
        assert_int_equal(symlink("file", q), 0);
        int root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        assert_true(root >= 0);

        int fd = mgr_open_beneath(root, dir, p, 0);
        assert_true(fd >= 0);
        close(fd);
        snprintf(q, sizeof q, "%s/link/shadow", dir);
        assert_int_equal(mgr_open_beneath(root, dir, q, 0), -ELOOP);
        snprintf(q, sizeof q, "%s/link", dir);
        assert_int_equal(mgr_open_beneath(root, dir, q, 0), -ELOOP);
        snprintf(q, sizeof q, "%s/sub/inner", dir);
        assert_int_equal(mgr_open_beneath(root, dir, q, 0), -ELOOP); /* even one that stays inside */
        assert_int_equal(mgr_open_beneath(root, dir, "/etc/passwd", 0), -EINVAL);
        close(root);

        unlink(q);
        snprintf(q, sizeof q, "%s/link", dir);
        unlink(q);
        unlink(p);
        snprintf(p, sizeof p, "%s/sub", dir);
        rmdir(p);
        rmdir(dir);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_accepts),
                cmocka_unit_test(test_refuses),
                cmocka_unit_test(test_round_trip),
                cmocka_unit_test(test_spawn),
                cmocka_unit_test(test_template_step_and_reclaim),
                cmocka_unit_test(test_frames_with_fds),
                cmocka_unit_test(test_open_beneath),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
