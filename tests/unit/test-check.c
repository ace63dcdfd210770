/* SPDX-License-Identifier: Apache-2.0 */
/* The host checks' pure parts (src/daemon/check.c), the data dir format
 * file, the listen probe against a real socket, and the report. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <setjmp.h>
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

#include "check.h"
#include "host.h"
#include "config.h"
#include "util.h"

static void test_qemu_version(void **state) {
        unsigned a, b, c;
        assert_int_equal(
                check_qemu_version_parse("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)",
                                         &a, &b, &c),
                0);
        assert_int_equal(a, 7);
        assert_int_equal(b, 2);
        assert_int_equal(c, 22);
        assert_int_equal(check_qemu_version_parse("QEMU emulator version 9.1.0", &a, &b, &c), 0);
        assert_int_equal(a, 9);
        assert_int_equal(b, 1);
        assert_int_equal(c, 0);
        /* no micro: 0 */
        assert_int_equal(check_qemu_version_parse("QEMU emulator version 8.0 (x)", &a, &b, &c), 0);
        assert_int_equal(a, 8);
        assert_int_equal(b, 0);
        assert_int_equal(c, 0);
        static const char *const bad[] = {
                "",
                "qemu-system-x86_64 7.2.0",
                "QEMU emulator version ",
                "QEMU emulator version 7",
                "QEMU emulator version 7.",
                "QEMU emulator version x.y.z",
                "QEMU emulator version 7000000.1.1",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                assert_int_equal(check_qemu_version_parse(bad[i], &a, &b, &c), -EINVAL);
        assert_int_equal(check_qemu_version_parse(NULL, &a, &b, &c), -EINVAL);
}

static void test_cpuinfo(void **state) {
        assert_true(host_cpu_has_virt("processor\t: 0\nflags\t\t: fpu vme vmx sse\nbugs\t\t: x\n"));
        assert_true(host_cpu_has_virt("flags: fpu svm\n"));
        /* a word, not a substring */
        assert_false(host_cpu_has_virt("flags\t\t: fpu vmxx svm_lock\n"));
        /* only the flags line counts */
        assert_false(host_cpu_has_virt("model name\t: vmx svm\nflags\t\t: fpu sse\n"));
        assert_false(host_cpu_has_virt("flagsy\t: vmx\n"));
        assert_false(host_cpu_has_virt(""));
        /* a key is the whole key: "model" is not "model name" */
        const char *v;
        size_t len;
        const char *info = "cpu family\t: 25\nmodel name\t: AMD EPYC 7B13\nmodel\t\t: 1\n";
        assert_true(host_cpuinfo_field(info, "model", &v, &len));
        assert_int_equal(len, 1);
        assert_memory_equal(v, "1", 1);
        assert_true(host_cpuinfo_field(info, "model name", &v, &len));
        assert_int_equal(len, 13);
        assert_false(host_cpuinfo_field(info, "stepping", &v, &len));
}

static void test_words(void **state) {
        assert_true(check_words_have("cpuset cpu io memory hugetlb pids rdma misc\n", "cpu memory pids"));
        assert_false(check_words_have("cpuset io memory pids", "cpu memory pids"));
        assert_false(check_words_have("hugetlb", "cpu"));
        assert_true(check_words_have("cpu", ""));
        assert_false(check_words_have(NULL, "cpu"));
}

static void test_cgroup_v2_path(void **state) {
        char buf[64];
        assert_int_equal(
                check_cgroup_v2_path("12:pids:/\n0::/system.slice/airlock.service\n", buf, sizeof buf), 0);
        assert_string_equal(buf, "/system.slice/airlock.service");
        assert_int_equal(check_cgroup_v2_path("0::/\n", buf, sizeof buf), 0);
        assert_string_equal(buf, "/");
        assert_int_equal(check_cgroup_v2_path("4:memory:/x\n1:cpu:/\n", buf, sizeof buf), -ENOENT);
        assert_int_equal(check_cgroup_v2_path("0::\n", buf, sizeof buf), -ENOENT);
        char small[4];
        assert_int_equal(check_cgroup_v2_path("0::/toolong\n", small, sizeof small), -ENOENT);
}

static void test_fs_type(void **state) {
        char name[64];
        assert_true(check_fs_type(BTRFS_SUPER_MAGIC, name, sizeof name));
        assert_string_equal(name, "btrfs");
        assert_true(check_fs_type(0x58465342, name, sizeof name));
        assert_string_equal(name, "xfs");
        assert_false(check_fs_type(0xEF53, name, sizeof name));
        assert_string_equal(name, "ext4");
        assert_false(check_fs_type(TMPFS_MAGIC, name, sizeof name));
        assert_string_equal(name, "tmpfs");
        assert_false(check_fs_type(0x12345678, name, sizeof name));
        assert_string_equal(name, "unknown (0x12345678)");
}

static void test_space(void **state) {
        assert_int_equal(check_space_status(0), CHECK_ERROR);
        assert_int_equal(check_space_status(CHECK_SPACE_ERROR_BYTES - 1), CHECK_ERROR);
        assert_int_equal(check_space_status(CHECK_SPACE_ERROR_BYTES), CHECK_WARN);
        assert_int_equal(check_space_status(CHECK_SPACE_WARN_BYTES - 1), CHECK_WARN);
        assert_int_equal(check_space_status(CHECK_SPACE_WARN_BYTES), CHECK_OK);
        char b[32];
        check_format_bytes(3ULL << 29, b, sizeof b);
        assert_string_equal(b, "1.5 GiB");
        check_format_bytes(300ULL << 20, b, sizeof b);
        assert_string_equal(b, "300 MiB");
        check_format_bytes(2048, b, sizeof b);
        assert_string_equal(b, "2 KiB");
}

static void write_file(const char *dir, const char *name, const char *text) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, name);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static void test_format_file(void **state) {
        char dir[] = "/tmp/test-check-XXXXXX";
        assert_non_null(mkdtemp(dir));
        unsigned v = 0;
        /* a data dir without the file, or without control/ at all, is the
         * current format */
        assert_int_equal(check_format_read(dir, &v), 0);
        assert_int_equal(v, CHECK_DATA_FORMAT);
        char missing[600];
        snprintf(missing, sizeof missing, "%s/nosuch", dir);
        assert_int_equal(check_format_read(missing, &v), 0);
        assert_int_equal(v, CHECK_DATA_FORMAT);

        assert_int_equal(check_format_write(dir), 0);
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, CHECK_FORMAT_FILE);
        char *text = NULL;
        assert_int_equal(file_read_all(path, 64, &text, NULL), 0);
        char want[16];
        snprintf(want, sizeof want, "%u\n", CHECK_DATA_FORMAT);
        assert_string_equal(text, want);
        free(text);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);

        /* a newer one is read as it is, and never overwritten */
        write_file(dir, CHECK_FORMAT_FILE, "7\n");
        assert_int_equal(check_format_write(dir), 0);
        assert_int_equal(check_format_read(dir, &v), 0);
        assert_int_equal(v, 7);
        write_file(dir, CHECK_FORMAT_FILE, "3");
        assert_int_equal(check_format_read(dir, &v), 0);
        assert_int_equal(v, 3);

        static const char *const bad[] = { "",      "\n",   "0\n",           "one\n", "1 \n",
                                           "1\n\n", "-1\n", "99999999999\n", "1\n2\n" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                write_file(dir, CHECK_FORMAT_FILE, bad[i]);
                assert_int_equal(check_format_read(dir, &v), -EBADMSG);
        }
        char big[200];
        memset(big, '1', sizeof big - 1);
        big[sizeof big - 1] = 0;
        write_file(dir, CHECK_FORMAT_FILE, big);
        assert_int_equal(check_format_read(dir, &v), -EBADMSG);
        assert_int_equal(rm_rf(dir), 0);
}

static void loopback(uint16_t port, struct sockaddr_storage *ss, socklen_t *len) {
        memset(ss, 0, sizeof *ss);
        struct sockaddr_in *a = (struct sockaddr_in *) ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        *len = sizeof *a;
}

static void test_listen_probe(void **state) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        struct sockaddr_storage ss;
        socklen_t len;
        loopback(0, &ss, &len);
        assert_int_equal(bind(fd, (struct sockaddr *) &ss, len), 0);
        assert_int_equal(listen(fd, 1), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *) &ss, &len), 0);
        uint16_t port = ntohs(((struct sockaddr_in *) &ss)->sin_port);

        assert_int_equal(check_listen_probe(&ss, len), -EADDRINUSE);
        close(fd);
        /* free again once the listener is gone (SO_REUSEADDR as the server) */
        assert_int_equal(check_listen_probe(&ss, len), 0);
        /* port 0: any free port, nothing to probe */
        loopback(0, &ss, &len);
        assert_int_equal(check_listen_probe(&ss, len), 0);
        /* an address this machine does not have */
        struct sockaddr_in *a = (struct sockaddr_in *) &ss;
        a->sin_port = htons(port);
        inet_pton(AF_INET, "192.0.2.1", &a->sin_addr);
        assert_int_equal(check_listen_probe(&ss, len), -EADDRNOTAVAIL);

        char m[512];
        check_listen_message("127.0.0.1:7420", -EADDRINUSE, m, sizeof m);
        assert_string_equal(
                m, "cannot listen on 127.0.0.1:7420: address in use (another airlockd?); stop it or use "
                   "--listen HOST:PORT");
        check_listen_message("192.0.2.1:7420", -EADDRNOTAVAIL, m, sizeof m);
        assert_non_null(strstr(m, "no such address"));
        check_listen_message("1.2.3.4:80", -EACCES, m, sizeof m);
        assert_non_null(strstr(m, "below 1024"));
}

static void test_report(void **state) {
        struct check_report rep = { .n = 2 };
        rep.r[0] = (struct check_result){ .item = "qemu", .status = CHECK_OK, .detail = "QEMU 7.2.22" };
        rep.r[1] = (struct check_result){
                .item = "space", .status = CHECK_WARN, .detail = "3.0 GiB free", .fix = "free space"
        };
        assert_false(check_report_has_error(&rep));
        json_t *j = check_report_json(&rep);
        assert_non_null(j);
        assert_int_equal(json_array_size(j), 2);
        json_t *e = json_array_get(j, 0);
        assert_string_equal(json_string_value(json_object_get(e, "item")), "qemu");
        assert_string_equal(json_string_value(json_object_get(e, "status")), "ok");
        assert_true(json_is_null(json_object_get(e, "fix")));
        e = json_array_get(j, 1);
        assert_string_equal(json_string_value(json_object_get(e, "status")), "warn");
        assert_string_equal(json_string_value(json_object_get(e, "fix")), "free space");
        json_decref(j);

        char *buf = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&buf, &size);
        assert_non_null(f);
        check_report_print(&rep, f);
        fclose(f);
        assert_string_equal(buf, "ok     qemu       QEMU 7.2.22\n"
                                 "warn   space      3.0 GiB free; fix: free space\n");
        free(buf);
        rep.r[1].status = CHECK_ERROR;
        assert_true(check_report_has_error(&rep));
        assert_string_equal(check_status_name(CHECK_ERROR), "error");
}

/* The real checks on this machine: every item there once, with a status
 * and a fix wherever it is not ok. */
static void test_host(void **state) {
        char dir[] = "/tmp/test-check-XXXXXX";
        assert_non_null(mkdtemp(dir));
        struct daemon_config c;
        char err[256];
        char *argv[] = { (char *) "airlockd", (char *) "--data-dir",  dir,
                         (char *) "--listen", (char *) "127.0.0.1:0", NULL };
        assert_int_equal(config_load(5, argv, &c, err, sizeof err), 0);
        struct check_report rep;
        check_host(&c, &rep);
        static const char *const items[] = { "user",       "accel", "cpu",   "storage",  "cgroups",
                                             "namespaces", "qemu",  "space", "format",   "binaries", "api" };
        assert_int_equal(rep.n, sizeof items / sizeof items[0]);
        for (size_t i = 0; i < rep.n; i++) {
                assert_string_equal(rep.r[i].item, items[i]);
                assert_true(rep.r[i].detail[0]);
                if (rep.r[i].status != CHECK_OK)
                        assert_true(rep.r[i].fix[0]);
        }
        /* the report is JSON even for a path that is not UTF-8 */
        char odd[] = "/tmp/test-check-\xff-XXXXXX";
        assert_non_null(mkdtemp(odd));
        char *argv2[] = { (char *) "airlockd", (char *) "--data-dir",  odd,
                          (char *) "--listen", (char *) "127.0.0.1:0", NULL };
        struct daemon_config c2;
        assert_int_equal(config_load(5, argv2, &c2, err, sizeof err), 0);
        struct check_report rep2;
        check_host(&c2, &rep2);
        json_t *j = check_report_json(&rep2);
        assert_non_null(j);
        assert_non_null(
                strstr(json_string_value(json_object_get(json_array_get(j, 8), "detail")), "test-check-?-"));
        json_decref(j);
        assert_int_equal(rmdir(odd), 0);

        /* nothing was made in the data dir */
        char p[600];
        snprintf(p, sizeof p, "%s/control", dir);
        assert_int_equal(access(p, F_OK), -1);
        assert_int_equal(rmdir(dir), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_qemu_version), cmocka_unit_test(test_cpuinfo),
                cmocka_unit_test(test_words),        cmocka_unit_test(test_cgroup_v2_path),
                cmocka_unit_test(test_fs_type),      cmocka_unit_test(test_space),
                cmocka_unit_test(test_format_file),  cmocka_unit_test(test_listen_probe),
                cmocka_unit_test(test_report),       cmocka_unit_test(test_host),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
