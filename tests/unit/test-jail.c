/* SPDX-License-Identifier: Apache-2.0 */
/* jail_peer_verify (accept and refuse), jail_spec_validate, and one real
 * jail_spawn when run as root. */
#include <errno.h>
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
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "jail.h"
#include "unit-skip.h"

struct listener {
        char dir[64];
        char path[128];
        pid_t pid;
        int pidfd;
};

/* A child process that listens on a Unix socket and waits to be killed. */
static void listener_start(struct listener *l) {
        snprintf(l->dir, sizeof l->dir, "/tmp/test-jail-XXXXXX");
        assert_non_null(mkdtemp(l->dir));
        snprintf(l->path, sizeof l->path, "%s/s.sock", l->dir);
        int ready[2];
        assert_int_equal(pipe(ready), 0);
        l->pid = fork();
        assert_true(l->pid >= 0);
        if (l->pid == 0) {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                strcpy(sa.sun_path, l->path);
                int fd = socket(AF_UNIX, SOCK_STREAM, 0);
                if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 8) < 0)
                        _exit(1);
                (void) !write(ready[1], "x", 1);
                for (;;)
                        pause();
        }
        char c;
        close(ready[1]);
        assert_int_equal(read(ready[0], &c, 1), 1);
        close(ready[0]);
        l->pidfd = (int) syscall(SYS_pidfd_open, l->pid, 0);
        assert_true(l->pidfd >= 0);
}

static void listener_stop(struct listener *l) {
        kill(l->pid, SIGKILL);
        waitpid(l->pid, NULL, 0);
        close(l->pidfd);
        unlink(l->path);
        rmdir(l->dir);
}

static int connect_to(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strcpy(sa.sun_path, path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        assert_int_equal(connect(fd, (struct sockaddr *) &sa, sizeof sa), 0);
        return fd;
}

static struct jail_peer peer_of(const struct listener *l) {
        struct jail_peer p = { .pid = l->pid, .pidfd = l->pidfd, .uid = getuid() };
        assert_int_equal(jail_process_start_time(l->pid, &p.start_time), 0);
        struct stat st;
        assert_int_equal(stat("/proc/self/exe", &st), 0); /* the child is a fork of us */
        p.exe_dev = st.st_dev;
        p.exe_ino = st.st_ino;
        return p;
}

static void test_peer_accept_and_refuse(void **state) {
        struct listener l;
        listener_start(&l);
        const struct jail_peer good = peer_of(&l);
        int fd = connect_to(l.path);

        assert_int_equal(jail_peer_verify(fd, &good), 0);
        /* and again: a check has no memory */
        assert_int_equal(jail_peer_verify(fd, &good), 0);

        struct jail_peer p = good;
        p.pid = getpid(); /* another process */
        assert_int_equal(jail_peer_verify(fd, &p), -EPERM);
        p = good;
        p.start_time++; /* same pid, another incarnation */
        assert_int_equal(jail_peer_verify(fd, &p), -EPERM);
        p = good;
        p.uid = good.uid + 1;
        assert_int_equal(jail_peer_verify(fd, &p), -EPERM);
        p = good;
        struct stat st;
        assert_int_equal(stat("/bin/sh", &st), 0); /* another binary */
        p.exe_dev = st.st_dev;
        p.exe_ino = st.st_ino;
        assert_int_equal(jail_peer_verify(fd, &p), -EPERM);

        /* a pidfd that says the process is gone */
        pid_t dead = fork();
        if (dead == 0)
                _exit(0);
        int dead_fd = (int) syscall(SYS_pidfd_open, dead, 0);
        assert_true(dead_fd >= 0);
        waitpid(dead, NULL, 0);
        p = good;
        p.pidfd = dead_fd;
        assert_int_equal(jail_peer_verify(fd, &p), -EPERM);
        close(dead_fd);
        close(fd);

        /* an impostor: the same path now served by another listener
         * (ourselves, through a socketpair's peer credentials) */
        int sp[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
        assert_int_equal(jail_peer_verify(sp[0], &good), -EPERM);
        close(sp[0]);
        close(sp[1]);

        /* the listener dies: its old credentials do not pass any more */
        fd = connect_to(l.path);
        kill(l.pid, SIGKILL);
        waitpid(l.pid, NULL, 0);
        assert_int_equal(jail_peer_verify(fd, &good), -EPERM);
        close(fd);
        close(l.pidfd);
        unlink(l.path);
        rmdir(l.dir);
        (void) listener_stop;
}

static void test_spec_validate(void **state) {
        char *argv[] = { "/usr/bin/true", NULL };
        struct jail_mount m[2] = { { JAIL_BIND_RO, "/usr", "/usr", -1 }, { JAIL_BIND_DEV, "/dev/null", "/dev/null", -1 } };
        struct jail_spec s = { .binary = "/usr/bin/true", .argv = argv, .uid = 2999999, .gid = 2999999,
                               .root_dir = "/tmp", .mounts = m, .n_mounts = 2, .stdin_fd = 0, .stdout_fd = 1,
                               .nofile = 1024, .nproc = 64 };
        assert_int_equal(jail_spec_validate(&s), 0);
        struct jail_spec b = s;
        b.uid = 0;
        assert_int_equal(jail_spec_validate(&b), -EINVAL);
        b = s;
        b.binary = "true";
        assert_int_equal(jail_spec_validate(&b), -EINVAL);
        b = s;
        b.root_dir = "/tmp/../etc";
        assert_int_equal(jail_spec_validate(&b), -EINVAL);
        struct jail_mount nested[2] = { { JAIL_BIND_RW, "/tmp", "/data", -1 }, { JAIL_BIND_RO, "/usr", "/data/usr", -1 } };
        b = s;
        b.mounts = nested;
        assert_int_equal(jail_spec_validate(&b), -EINVAL);
        struct jail_mount rel[1] = { { JAIL_BIND_RO, "usr", "/usr", -1 } };
        b = s;
        b.mounts = rel;
        b.n_mounts = 1;
        assert_int_equal(jail_spec_validate(&b), -EINVAL);
        b = s;
        b.n_mounts = JAIL_MOUNTS_MAX + 1;
        assert_int_equal(jail_spec_validate(&b), -EINVAL);
        /* a node of the jail's own needs the host node to copy */
        struct jail_mount node[1] = { { JAIL_DEV_NODE, NULL, "/dev/kvm", -1 } };
        b = s;
        b.mounts = node;
        b.n_mounts = 1;
        assert_int_equal(jail_spec_validate(&b), -EINVAL);
        node[0].source = "/dev/null";
        assert_int_equal(jail_spec_validate(&b), 0);
}

/* A real jail: its own uid, no /etc/shadow, only loopback, its own pid 1. */
static void test_spawn(void **state) {
        if (geteuid() != 0)
                unit_skip("not root: a real jail needs root (./test.sh runs as root)");
        char dir[] = "/tmp/test-jail-root-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char *argv[] = { "/usr/bin/sh", "-c",
                         "test \"$(id -u):$(id -g):$(id -G)\" = 2999999:2999999:2999999 && test $$ = 1 && "
                         "test ! -e /etc/shadow && test ! -e /root && test \"$(ls /sys/class/net 2>/dev/null)\" = '' && "
                         "echo jailed",
                         NULL };
        struct jail_mount m[] = {
                { JAIL_BIND_RO, "/usr", "/usr", -1 },      { JAIL_SYMLINK, "usr/lib", "/lib", -1 },
                { JAIL_SYMLINK, "usr/lib64", "/lib64", -1 }, { JAIL_SYMLINK, "usr/bin", "/bin", -1 },
                { JAIL_BIND_DEV, "/dev/null", "/dev/null", -1 },
        };
        int out[2];
        assert_int_equal(pipe(out), 0);
        struct jail_spec s = { .binary = "/usr/bin/sh", .argv = argv, .uid = 2999999, .gid = 2999999,
                               .root_dir = dir, .mounts = m, .n_mounts = sizeof m / sizeof m[0],
                               .stdin_fd = out[0], .stdout_fd = out[1], .nofile = 1024, .nproc = 64 };
        pid_t pid;
        int pidfd;
        assert_int_equal(jail_spawn(&s, &pid, &pidfd), 0);
        close(out[1]);
        char buf[256] = "";
        ssize_t n = 0, k;
        while ((k = read(out[0], buf + n, sizeof buf - 1 - (size_t) n)) > 0)
                n += k;
        buf[n] = 0;
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        close(pidfd);
        close(out[0]);
        rmdir(dir);
        assert_string_equal(buf, "jailed\n");
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A device node the host keeps 0600 root:root (as /dev/kvm is where no udev
 * rule set its mode): a bind of it is closed to the jail's uid, a node of
 * the jail's own (JAIL_DEV_NODE) opens, and the jail holds no extra group. */
static void test_spawn_dev_node(void **state) {
        if (geteuid() != 0)
                unit_skip("not root: a real jail needs root (./test.sh runs as root)");
        char dir[] = "/tmp/test-jail-root-XXXXXX", host[] = "/tmp/test-jail-dev-XXXXXX";
        assert_non_null(mkdtemp(dir));
        assert_non_null(mkdtemp(host));
        char node[64];
        snprintf(node, sizeof node, "%s/zero", host);
        assert_int_equal(mknod(node, S_IFCHR | 0600, makedev(1, 5)), 0); /* /dev/zero's numbers */
        assert_int_equal(chown(node, 0, 0), 0);
        char *argv[] = { "/usr/bin/sh", "-c",
                         "test \"$(id -G)\" = 2999999 && test -O /dev/own && test \"$(stat -c %a /dev/own)\" = 600 && "
                         "test \"$(head -c 3 /dev/own | od -An -tx1 | tr -d ' ')\" = 000000 && "
                         "! head -c 1 /dev/bound 2>/dev/null && echo opened",
                         NULL };
        struct jail_mount m[] = {
                { JAIL_BIND_RO, "/usr", "/usr", -1 },       { JAIL_SYMLINK, "usr/lib", "/lib", -1 },
                { JAIL_SYMLINK, "usr/lib64", "/lib64", -1 }, { JAIL_SYMLINK, "usr/bin", "/bin", -1 },
                { JAIL_BIND_DEV, "/dev/null", "/dev/null", -1 }, { JAIL_BIND_DEV, node, "/dev/bound", -1 },
                { JAIL_DEV_NODE, node, "/dev/own", -1 },
        };
        int out[2];
        assert_int_equal(pipe(out), 0);
        struct jail_spec s = { .binary = "/usr/bin/sh", .argv = argv, .uid = 2999999, .gid = 2999999,
                               .root_dir = dir, .mounts = m, .n_mounts = sizeof m / sizeof m[0],
                               .stdin_fd = out[0], .stdout_fd = out[1], .nofile = 1024, .nproc = 64 };
        pid_t pid;
        int pidfd;
        assert_int_equal(jail_spawn(&s, &pid, &pidfd), 0);
        close(out[1]);
        char buf[256] = "";
        ssize_t n = 0, k;
        while ((k = read(out[0], buf + n, sizeof buf - 1 - (size_t) n)) > 0)
                n += k;
        buf[n] = 0;
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        close(pidfd);
        close(out[0]);
        unlink(node);
        rmdir(host);
        rmdir(dir);
        assert_string_equal(buf, "opened\n");
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Two nodes on one host share the VM uid range: a cgroup another node made
 * a moment ago (its QEMU not in it yet) is its claim, neither taken over
 * by a create nor removed by a sweep, which says it left it (to look
 * again once it is not fresh); the control: once removed, the uid's
 * cgroup is made again. */
static void test_cgroup_fresh_claims_are_kept(void **state) {
        (void) state;
        if (geteuid() != 0)
                unit_skip("not root: cannot make cgroups");
        if (!jail_cgroup_available())
                unit_skip("no usable cgroup controllers here");
        const uid_t uid = 3999990001u; /* far above the VM uids any node uses */
        struct jail_cgroup_limits l = { .memory_bytes = 64 << 20, .pids = 16, .cpus = 1 };
        char *procs[JAIL_CGROUPS_MAX];
        size_t n = 0;
        (void) jail_cgroup_remove(uid);
        assert_int_equal(jail_cgroup_create(uid, &l, procs, &n), 0);
        assert_true(n > 0);
        char first[4096];
        snprintf(first, sizeof first, "%s", procs[0]);
        jail_cgroup_procs_free(procs, n);
        /* another node's create of the same uid now: its claim is kept */
        size_t n2 = 0;
        assert_int_equal(jail_cgroup_create(uid, &l, procs, &n2), -EBUSY);
        unsigned fresh = 0;
        assert_int_equal(jail_cgroup_sweep(uid, 1, &fresh), 0);
        assert_int_equal(fresh, n);               /* one per hierarchy: the caller sweeps again later */
        assert_int_equal(access(first, F_OK), 0); /* still there */
        assert_int_equal(jail_cgroup_remove(uid), 0);
        assert_int_equal(jail_cgroup_create(uid, &l, procs, &n), 0); /* the control */
        jail_cgroup_procs_free(procs, n);
        assert_int_equal(jail_cgroup_remove(uid), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_peer_accept_and_refuse),
                cmocka_unit_test(test_spec_validate),
                cmocka_unit_test(test_spawn),
                cmocka_unit_test(test_spawn_dev_node),
                cmocka_unit_test(test_cgroup_fresh_claims_are_kept),
        };
        return unit_exit(cmocka_run_group_tests(tests, NULL, NULL));
}
