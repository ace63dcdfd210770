/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes the parser airlock-nodemgr (root) runs on every request of the
 * node (lib/mgr). Invariants: whatever it accepts is within the policy
 * (a VM uid, a path under a root that mgr_path_check accepts, a mode of
 * the fixed set, SIGKILL or SIGTERM, a spawn's paths and argv), and formats back to a request that
 * parses to the same values. A template base's parameters go on to the
 * nodemgr's own check (src/nodemgr/basestep.c): what it accepts becomes
 * environment variables of the script's charset only.
 */
#include <assert.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "basestep.h"
#include "mgr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct mgr_policy policy = {
        .vm_uid_base = 2000000,
        .vm_uid_count = 65536,
        .roots = { "/d/vol", "/d", "/t" },
        .n_roots = 3,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct mgr_request r;
        char err[256];
        if (mgr_request_parse(data, size, &policy, &r, err, sizeof err) < 0)
                return 0;
        assert(r.op < MGR_OP_MAX);
        if (r.op == MGR_OP_PING)
                return 0;
        if (r.op == MGR_OP_VMM_SPAWN) {
                assert(r.argv[0] && mgr_path_check(&policy, r.run_dir) >= 0 && mgr_path_check(&policy, r.disk) >= 0);
                assert(!r.mem[0] || !r.template_ram);
        }
        if (r.op != MGR_OP_FILE_RECLAIM && r.op != MGR_OP_TEMPLATE_STEP)
                assert(mgr_policy_vm_uid(&policy, r.uid));
        if (r.op == MGR_OP_FILE_RECLAIM)
                assert(r.mode == 0600 || r.mode == 0640 || r.mode == 0644);
        if (r.op == MGR_OP_TEMPLATE_STEP)
                assert(!strchr(r.name, '/') && !strchr(r.out, '/') && r.out[0] != '.' && r.out[0]);
        if (r.op == MGR_OP_TEMPLATE_STEP && strcmp(r.step, "base") == 0) {
                char *script = NULL, **env = NULL, msg[256];
                assert(r.argv[0]);
                if (base_step_prepare(r.argv, "/images", r.kernel_dir[0] != 0, &script, &env, msg, sizeof msg) >= 0) {
                        assert(strcmp(script, "/images/debian.sh") == 0 || strcmp(script, "/images/oci.sh") == 0);
                        for (size_t i = 0; env[i]; i++) {
                                const char *eq = strchr(env[i], '=');
                                assert(eq && !strchr(env[i], '\n') && !strchr(env[i], '\'') && !strchr(env[i], ' '));
                                assert(strncmp(env[i], "SUITE=", 6) == 0 || strncmp(env[i], "PACKAGES=", 9) == 0 ||
                                       strncmp(env[i], "OCI_REF=", 8) == 0 || strncmp(env[i], "MIN_IMAGE_MB=", 13) == 0 ||
                                       /* nodemgr's own binary, never the node's word */
                                       strncmp(env[i], "OCI_CHECK=/proc/", 16) == 0);
                                if (strncmp(env[i], "OCI_REF=", 8) == 0 && r.kernel_dir[0])
                                        assert(!strstr(env[i], "/../") && strstr(env[i], ":/proc/self/fd/4/"));
                        }
                        free(script);
                        base_step_env_free(env);
                }
        }
        if (r.op == MGR_OP_VMM_SIGNAL)
                assert(r.signal == SIGKILL || r.signal == SIGTERM);
        if (r.op == MGR_OP_VMM_SIGNAL || r.op == MGR_OP_VMM_VERIFY)
                assert(r.pid > 1);
        if (r.op == MGR_OP_FILE_GIVE || r.op == MGR_OP_FILE_RECLAIM) {
                assert(r.op == MGR_OP_FILE_RECLAIM || r.mode == 0600 || r.mode == 0660 || r.mode == 0700 ||
                       r.mode == 02770);
                assert((size_t) mgr_path_check(&policy, r.path) == r.root);
                assert(!strstr(r.path, "/./") && !strstr(r.path, "/../") && !strstr(r.path, "//"));
        }
        char *json = mgr_request_format(&r);
        assert(json);
        struct mgr_request again;
        assert(mgr_request_parse(json, strlen(json), &policy, &again, err, sizeof err) == 0);
        assert(again.op == r.op && again.uid == r.uid && again.pid == r.pid && again.start_time == r.start_time &&
               again.signal == r.signal && again.mode == r.mode && strcmp(again.path, r.path) == 0 &&
               strcmp(again.dir, r.dir) == 0 && strcmp(again.name, r.name) == 0 && strcmp(again.out, r.out) == 0);
        for (size_t i = 0; r.argv[i]; i++)
                assert(again.argv[i] && strcmp(again.argv[i], r.argv[i]) == 0);
        free(json);
        mgr_request_release(&again);
        mgr_request_release(&r);
        return 0;
}
