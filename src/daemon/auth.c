/* SPDX-License-Identifier: Apache-2.0 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "log.h"
#include "macros.h"
#include "util.h"

void auth_hash_token(const char *token, uint8_t ret[STORE_HASH_SIZE]) {
        crypto_hash_sha256(ret, (const unsigned char *) token, strlen(token));
}

int auth_parse_bearer(const char *header, const char **ret) {
        if (!header || strncasecmp(header, "Bearer ", 7) != 0)
                return -EACCES;
        const char *t = header + 7;
        while (*t == ' ')
                t++;
        size_t n = strlen(t);
        if (n == 0 || n > AUTH_TOKEN_MAX)
                return -EACCES;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) t[i] <= 0x20 || (unsigned char) t[i] >= 0x7f)
                        return -EACCES;
        *ret = t;
        return 0;
}

bool auth_token_matches(const char *token, const uint8_t hash[STORE_HASH_SIZE]) {
        uint8_t h[STORE_HASH_SIZE];
        auth_hash_token(token, h);
        return sodium_memcmp(h, hash, STORE_HASH_SIZE) == 0;
}

int auth_new_attach_token(char *out, size_t n) {
        return random_id("", AUTH_ATTACH_TOKEN_LEN / 2, out, n);
}

int auth_new_api_key(char *out, size_t n) {
        return random_id("alk_", 32, out, n);
}

/* Reads an existing token file: one line, "alk_" + hex. */
static int read_token_file(const char *path, char *token, size_t n) {
        _cleanup_free_ char *buf = NULL;
        size_t len;
        int r = file_read_all(path, AUTH_TOKEN_MAX + 2, &buf, &len);
        if (r < 0)
                return r;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
                buf[--len] = 0;
        if (len == 0 || len >= n || strlen(buf) != len)
                return -EBADMSG;
        for (size_t i = 0; i < len; i++)
                if ((unsigned char) buf[i] <= 0x20 || (unsigned char) buf[i] >= 0x7f)
                        return -EBADMSG;
        memcpy(token, buf, len + 1);
        return 0;
}

/* DIR/NAME holding a token: made (O_EXCL, 0600, a fresh "alk_" token)
 * when absent, else read (warned about when others may read it). */
static int token_file(const char *dir, const char *name, char token[AUTH_TOKEN_MAX + 1], bool *ret_created) {
        char path[PATH_MAX];
        bool created = false;
        int r;

        if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int) sizeof path)
                return -ENAMETOOLONG;
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0) {
                r = random_id("alk_", 32, token, AUTH_TOKEN_MAX + 1);
                if (r >= 0) {
                        size_t len = strlen(token);
                        token[len] = '\n';
                        r = fd_write_all(fd, token, len + 1);
                        token[len] = 0;
                }
                if (r >= 0 && fsync(fd) < 0)
                        r = negative_errno();
                if (r < 0) {
                        unlink(path);
                        return r;
                }
                created = true;
        } else if (errno == EEXIST) {
                struct stat st;
                if (lstat(path, &st) < 0)
                        return negative_errno();
                if (!S_ISREG(st.st_mode))
                        return -EBADMSG;
                if (st.st_mode & 0077)
                        log_warn("token file %s is readable by group or others (mode %03o); "
                                 "consider chmod 600", path, (unsigned) (st.st_mode & 0777));
                r = read_token_file(path, token, AUTH_TOKEN_MAX + 1);
                if (r < 0)
                        return r;
        } else
                return negative_errno();
        if (ret_created)
                *ret_created = created;
        return 0;
}

int auth_metrics_token_init(const char *data_dir, uint8_t ret_hash[STORE_HASH_SIZE]) {
        char token[AUTH_TOKEN_MAX + 1];
        int r = token_file(data_dir, AUTH_METRICS_TOKEN_FILE, token, NULL);
        if (r < 0)
                return r;
        auth_hash_token(token, ret_hash);
        sodium_memzero(token, sizeof token);
        return 0;
}

int auth_admin_token_init(struct store *s, const char *data_dir, bool shared, bool *ret_created) {
        char token[AUTH_TOKEN_MAX + 1];
        bool created = false;
        int r = token_file(data_dir, AUTH_ADMIN_TOKEN_FILE, token, &created);
        if (r < 0)
                return r;

        uint8_t hash[STORE_HASH_SIZE];
        auth_hash_token(token, hash);
        sodium_memzero(token, sizeof token);
        /* one machine: the admin key, replaced with a new token file; a
         * shared store: one admin key per replica's token (named by its
         * hash), so that starting a replica does not revoke another's */
        char name[32] = "admin";
        if (shared)
                snprintf(name, sizeof name, "admin-%02x%02x%02x%02x%02x%02x", hash[0], hash[1], hash[2], hash[3],
                         hash[4], hash[5]);
        r = store_api_key_insert(s, name, hash);
        if (r < 0)
                return r;
        if (ret_created)
                *ret_created = created;
        return 0;
}
