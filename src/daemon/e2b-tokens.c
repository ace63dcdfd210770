/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The E2B front door's tokens: a sandbox's envdAccessToken and a volume's
 * token for the volume content API, each an HMAC of its id under one key
 * (CONTROL_DIR/e2b.key, made on first start), so that none is stored and
 * the same one is handed out again.
 */
#include "e2b-api.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "macros.h"
#include "util.h"

#define E2B_KEY_FILE "e2b.key"

static uint8_t token_key[crypto_auth_hmacsha256_KEYBYTES];
static bool token_key_loaded;

int e2b_init(const struct daemon_config *config) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        if (asprintf(&path, "%s/" E2B_KEY_FILE, config->control_dir) < 0)
                return -ENOMEM;
        size_t len = 0;
        int r = file_read_all(path, sizeof token_key, &text, &len);
        if (r == -ENOENT) {
                randombytes_buf(token_key, sizeof token_key);
                r = file_write_atomic(path, token_key, sizeof token_key, 0600);
                if (r < 0)
                        return log_error_errno(r, "Failed to write %s: %m", path);
        } else if (r < 0 || len != sizeof token_key) {
                return log_error_errno(r < 0 ? r : -EBADMSG, "Failed to read the E2B token key %s: %m", path);
        } else
                memcpy(token_key, text, sizeof token_key);
        if (text)
                sodium_memzero(text, len);
        token_key_loaded = true;
        return 0;
}

/* HMAC-SHA256 of "PURPOSE:ID" under the key, in hex. */
static int token_of(const char *purpose, const char *id, char out[65]) {
        if (!token_key_loaded)
                return -EIO; /* e2b_init() failed, and airlockd would not have started */
        uint8_t mac[crypto_auth_hmacsha256_BYTES];
        char msg[128];
        int n = snprintf(msg, sizeof msg, "%s:%s", purpose, id);
        if (n < 0 || (size_t) n >= sizeof msg)
                return -EINVAL;
        crypto_auth_hmacsha256(mac, (const unsigned char *) msg, (unsigned long long) n, token_key);
        sodium_bin2hex(out, 65, mac, sizeof mac);
        sodium_memzero(mac, sizeof mac);
        return 0;
}

int e2b_access_token(const char *sandbox_id, char out[65]) {
        return token_of("e2b-envd-access", sandbox_id, out);
}

int e2b_volume_token(const char *volume_id, char out[65]) {
        return token_of("e2b-volume-content", volume_id, out);
}

bool e2b_volume_token_ok(const char *volume_id, const char *token) {
        char want[65];
        bool ok = token && strlen(token) == 64 && e2b_volume_token(volume_id, want) >= 0 &&
                  sodium_memcmp(token, want, 64) == 0;
        sodium_memzero(want, sizeof want);
        return ok;
}
