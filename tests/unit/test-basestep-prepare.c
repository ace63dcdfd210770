/* SPDX-License-Identifier: Apache-2.0 */
/* src/nodemgr/basestep.c's base_step_prepare() for a Debian base: every
 * package argument (each a comma-separated list) checked and joined into
 * one PACKAGES list for the script. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "basestep.h"
#include "macros.h"

static const char *env_get(char **env, const char *name) {
        size_t n = strlen(name);
        for (size_t i = 0; env && env[i]; i++)
                if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
                        return env[i] + n + 1;
        return NULL;
}

static int prepare(char *const *argv, char ***ret_env, char *msg, size_t n) {
        _cleanup_free_ char *script = NULL;
        return base_step_prepare(argv, "/images", false, &script, ret_env, msg, n);
}

static void test_packages_joined(void **state) {
        char *const argv[] = { "debian", "0", "bookworm", "curl,git", "python3", "jq,,make", NULL };
        char **env = NULL;
        char msg[256] = "";
        assert_int_equal(prepare(argv, &env, msg, sizeof msg), 0);
        assert_string_equal(env_get(env, "PACKAGES"), "curl,git,python3,jq,make");
        base_step_env_free(env);
}

static void test_no_packages(void **state) {
        char *const argv[] = { "debian", "0", "bookworm", NULL };
        char **env = NULL;
        char msg[256] = "";
        assert_int_equal(prepare(argv, &env, msg, sizeof msg), 0);
        const char *p = env_get(env, "PACKAGES");
        assert_true(!p || !*p);
        base_step_env_free(env);
}

static void test_bad_package(void **state) {
        char *const argv[] = { "debian", "0", "bookworm", "curl", "rm -rf", NULL };
        char **env = NULL;
        char msg[256] = "";
        assert_int_equal(prepare(argv, &env, msg, sizeof msg), -EINVAL);
        assert_non_null(strstr(msg, "is no package name"));
        assert_null(env);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_packages_joined),
                cmocka_unit_test(test_no_packages),
                cmocka_unit_test(test_bad_package),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
