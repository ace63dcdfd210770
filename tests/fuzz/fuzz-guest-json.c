/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes every parser the guest agent runs on host-supplied JSON (and the
 * path check and env merge behind them). The first byte picks the parser,
 * the rest is the payload, exactly as it would come off the channel.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_exec(const uint8_t *p, size_t n) {
        struct guest_exec_request *req = NULL;
        if (guest_exec_request_parse(p, n, &req) < 0) {
                assert(!req);
                return;
        }
        assert(req->argv && req->argv[0] && req->env && req->cwd);
        assert(guest_strv_length(req->argv) <= GUEST_MAX_ARGV);
        assert(guest_strv_length(req->env) <= GUEST_MAX_ENV);
        assert(guest_path_validate(req->cwd) == 0);
        assert(!req->user || guest_user_name_is_valid(req->user));
        assert(!req->user || (!req->has_uid && !req->has_gid));
        assert(!req->tag || strlen(req->tag) <= GUEST_MAX_TAG);
        /* what PROCESSES reports of it fits what it is given */
        json_t *info = guest_process_info(req, req->cwd);
        if (info) {
                static const size_t maxes[] = { GUEST_MAX_PROCESS_INFO, 4096 };
                for (size_t i = 0; i < 2; i++) {
                        json_t *fit = guest_process_info_fit(info, maxes[i]);
                        if (!fit)
                                continue;
                        assert(json_dumpb(fit, NULL, 0, JSON_COMPACT) <= maxes[i]);
                        assert(json_array_size(json_object_get(fit, "argv")) >= 1);
                        assert(guest_path_validate(json_string_value(json_object_get(fit, "cwd"))) == 0);
                        json_decref(fit);
                }
                json_decref(info);
        }
        char *base[] = { "A=1", "PATH=/x", NULL };
        char **env = NULL;
        if (guest_env_merge(base, req->env, "/root", &env) == 0) {
                bool path = false, home = false;
                for (char **e = env; *e; e++) {
                        assert(strchr(*e, '='));
                        path |= strncmp(*e, "PATH=", 5) == 0;
                        home |= strncmp(*e, "HOME=", 5) == 0;
                }
                assert(path && home);
                guest_strv_free(env);
        }
        guest_exec_request_free(req);
}

static void check_identity(const uint8_t *p, size_t n) {
        struct guest_identity *id = NULL;
        if (guest_identity_parse(p, n, &id) < 0)
                return;
        assert(!id->hostname || strlen(id->hostname) <= GUEST_MAX_HOSTNAME);
        guest_identity_free(id);
}

static void check_path_request(uint8_t type, const uint8_t *p, size_t n) {
        struct guest_path_request req;
        if (guest_path_request_parse(type, p, n, &req) < 0)
                return;
        assert(guest_path_validate(req.path) == 0);
        assert(type != PROTO_RENAME || guest_path_validate(req.to) == 0);
        assert(req.mode <= 07777);
        assert(!req.root || (type != PROTO_WATCH && guest_path_validate(req.root) == 0));
        assert(req.uid >= -1 && req.uid < UINT32_MAX && req.gid >= -1 && req.gid < UINT32_MAX);
        guest_path_request_release(&req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const uint8_t path_types[] = {PROTO_FILE_READ, PROTO_FILE_WRITE, PROTO_LIST,
                                             PROTO_STAT,      PROTO_RENAME,     PROTO_REMOVE,
                                             PROTO_MKDIR,     PROTO_WATCH,      PROTO_SETATTR};
        if (size == 0)
                return 0;
        uint8_t sel = data[0];
        const uint8_t *p = data + 1;
        size_t n = size - 1;

        switch (sel % 9) {
        case 0: {
                char *nonce = NULL;
                if (guest_hello_parse(p, n, &nonce) == 0) {
                        assert(strlen(nonce) <= GUEST_MAX_NONCE);
                        free(nonce);
                }
                break;
        }
        case 1: check_identity(p, n); break;
        case 2: check_exec(p, n); break;
        case 3: {
                int sig;
                if (guest_signal_parse(p, n, &sig) == 0)
                        assert(sig >= 1 && sig <= 64);
                uint16_t rows, cols;
                if (guest_resize_parse(p, n, &rows, &cols) == 0)
                        assert(rows > 0 && cols > 0);
                bool abort_;
                (void) guest_file_end_parse(p, n, &abort_);
                int32_t pid;
                if (guest_adopt_parse(p, n, &pid) == 0)
                        assert(pid >= 1);
                char *path = NULL;
                int64_t idle;
                if (guest_upgrade_parse(p, n, &path, &idle) == 0) {
                        assert(guest_path_validate(path) == 0 && idle >= -1);
                        free(path);
                }
                struct guest_volume_mount vm = { 0 };
                if (guest_volume_mount_parse(p, n, &vm) == 0) {
                        assert(vm.slot < GUEST_VOLUME_SLOTS && vm.wait_ms <= GUEST_VOLUME_WAIT_MS_MAX);
                        assert(proto_volume_path_is_allowed(vm.path));
                        free(vm.path);
                }
                /* an upgrade state's blob reference, against 64 bytes */
                json_t *ref = json_loadb((const char *) p, n, 0, NULL);
                static const uint8_t area[64];
                const uint8_t *b;
                size_t blen;
                if (ref && guest_blob_get(area, sizeof area, ref, 48, &b, &blen) == 0)
                        assert(b >= area && blen <= 48 && b + blen <= area + sizeof area);
                json_decref(ref);
                break;
        }
        case 4: {
                /* raw bytes as a path and as a file name */
                char *s = malloc(n + 1), *clean = NULL;
                assert(s);
                memcpy(s, p, n);
                s[n] = 0;
                (void) guest_path_validate(s);
                if (guest_utf8_sanitize((const char *) p, n, &clean) == 0) {
                        json_t *j = json_string(clean);
                        assert(j); /* always valid UTF-8 */
                        json_decref(j);
                        free(clean);
                }
                free(s);
                break;
        }
        default: check_path_request(path_types[(sel / 9) % sizeof path_types], p, n); break;
        }
        return 0;
}
