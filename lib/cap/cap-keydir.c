/* SPDX-License-Identifier: Apache-2.0 */
#include "cap-keydir.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "macros.h"
#include "util.h"

#define KEY_FILE_MAX 256 /* a hex key, a newline, some slack */

static bool kid_is_valid(const char *kid) {
        size_t n = strlen(kid);
        if (n == 0 || n > CAP_KID_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((kid[i] >= 'a' && kid[i] <= 'z') || (kid[i] >= 'A' && kid[i] <= 'Z') ||
                      (kid[i] >= '0' && kid[i] <= '9') || kid[i] == '.' || kid[i] == '_' || kid[i] == '-'))
                        return false;
        return kid[0] != '.';
}

/* "KID.pub" -> KID in out; false for any other name. */
static bool kid_from_name(const char *name, const char *suffix, char out[CAP_KID_MAX + 1]) {
        size_t n = strlen(name), sl = strlen(suffix);
        if (n <= sl || n - sl > CAP_KID_MAX || strcmp(name + n - sl, suffix) != 0)
                return false;
        memcpy(out, name, n - sl);
        out[n - sl] = 0;
        return kid_is_valid(out);
}

static int read_key(const char *path, uint8_t *key, size_t n) {
        _cleanup_free_ char *text = NULL;
        int r = file_read_all(path, KEY_FILE_MAX, &text, NULL);
        if (r < 0)
                return r;
        r = cap_key_from_hex(text, key, n);
        sodium_memzero(text, strlen(text));
        return r;
}

int cap_keydir_load_public(const char *dir, struct cap_keyring **ret, unsigned *ret_skipped) {
        _cleanup_free_ char *pub = strdup_printf("%s/public", dir);
        if (!pub)
                return -ENOMEM;
        _cleanup_(cap_keyring_freep) struct cap_keyring *kr = NULL;
        int r = cap_keyring_new(&kr);
        if (r < 0)
                return r;
        unsigned skipped = 0;
        DIR *d = opendir(pub);
        if (!d && errno != ENOENT)
                return negative_errno();
        for (struct dirent *e; d && (e = readdir(d));) {
                char kid[CAP_KID_MAX + 1];
                if (e->d_name[0] == '.')
                        continue;
                uint8_t pk[CAP_PUBLIC_KEY_SIZE];
                _cleanup_free_ char *path = strdup_printf("%s/%s", pub, e->d_name);
                if (!path) {
                        closedir(d);
                        return -ENOMEM;
                }
                if (!kid_from_name(e->d_name, ".pub", kid) || read_key(path, pk, sizeof pk) < 0 ||
                    cap_keyring_add_public(kr, kid, pk) < 0)
                        skipped++; /* a stray file, a half-written key, a ninth key */
        }
        if (d)
                closedir(d);
        if (ret_skipped)
                *ret_skipped = skipped;
        *ret = TAKE_PTR(kr);
        return 0;
}

static int read_current(const char *dir, char kid[CAP_KID_MAX + 1]) {
        _cleanup_free_ char *path = strdup_printf("%s/signing/current", dir), *text = NULL;
        if (!path)
                return -ENOMEM;
        int r = file_read_all(path, CAP_KID_MAX + 2, &text, NULL);
        if (r < 0)
                return r;
        text[strcspn(text, "\n")] = 0;
        if (!kid_is_valid(text))
                return -EBADMSG;
        snprintf(kid, CAP_KID_MAX + 1, "%s", text);
        return 0;
}

/* Removes the keys in DIR/SUB (files KID SUFFIX) except the kids keep1 and keep2 (may be ""). */
static void retire(const char *dir, const char *sub, const char *suffix, const char *keep1, const char *keep2) {
        _cleanup_free_ char *path = strdup_printf("%s/%s", dir, sub);
        DIR *d = path ? opendir(path) : NULL;
        for (struct dirent *e; d && (e = readdir(d));) {
                char kid[CAP_KID_MAX + 1];
                if (!kid_from_name(e->d_name, suffix, kid) || strcmp(kid, keep1) == 0 || strcmp(kid, keep2) == 0)
                        continue;
                (void) unlinkat(dirfd(d), e->d_name, 0);
        }
        if (d)
                closedir(d);
}

int cap_keydir_rotate(const char *dir, char ret_kid[CAP_KID_MAX + 1], char ret_previous[CAP_KID_MAX + 1]) {
        char previous[CAP_KID_MAX + 1] = "";
        int r = read_current(dir, previous);
        if (r < 0 && r != -ENOENT)
                return r;

        /* kids sort by creation: k + UTC time + a random tag */
        char kid[CAP_KID_MAX + 1], tag[8], stamp[16];
        time_t now = time(NULL);
        struct tm tm;
        if (!gmtime_r(&now, &tm) || strftime(stamp, sizeof stamp, "%Y%m%d%H%M%S", &tm) == 0)
                return -EINVAL;
        if ((r = random_id("", 2, tag, sizeof tag)) < 0)
                return r;
        if ((size_t) snprintf(kid, sizeof kid, "k%.14s-%.4s", stamp, tag) >= sizeof kid)
                return -EINVAL;

        uint8_t pk[CAP_PUBLIC_KEY_SIZE], sk[CAP_SECRET_KEY_SIZE];
        char pk_hex[CAP_PUBLIC_KEY_HEX + 1], sk_hex[CAP_SECRET_KEY_HEX + 1];
        _cleanup_free_ char *pub = strdup_printf("%s/public", dir), *sig = strdup_printf("%s/signing", dir);
        _cleanup_free_ char *pub_path = strdup_printf("%s/public/%s.pub", dir, kid);
        _cleanup_free_ char *key_path = strdup_printf("%s/signing/%s.key", dir, kid);
        _cleanup_free_ char *cur_path = strdup_printf("%s/signing/current", dir);
        if (!pub || !sig || !pub_path || !key_path || !cur_path)
                return -ENOMEM;
        /* explicit modes: whatever the umask, public is public (and the
         * dir above it traversable: a node of another user reads it) */
        if ((r = mkdir_p(pub, 0755)) < 0 || (r = mkdir_p(sig, 0700)) < 0 || chmod(sig, 0700) < 0 ||
            chmod(pub, 0755) < 0 || chmod(dir, 0711) < 0)
                return r < 0 ? r : negative_errno();
        if ((r = cap_keygen(pk, sk)) < 0)
                return r;
        r = cap_key_to_hex(pk, sizeof pk, pk_hex, sizeof pk_hex - 1);
        if (r >= 0)
                r = cap_key_to_hex(sk, sizeof sk, sk_hex, sizeof sk_hex - 1);
        sodium_memzero(sk, sizeof sk);
        if (r < 0)
                goto out;
        /* cap_key_to_hex() left room for the newline */
        size_t pk_len = strlen(pk_hex), sk_len = strlen(sk_hex);
        memcpy(pk_hex + pk_len, "\n", 2);
        memcpy(sk_hex + sk_len, "\n", 2);
        /* public first: no node may see a token it has no key for */
        if ((r = file_write_atomic(pub_path, pk_hex, strlen(pk_hex), 0644)) < 0 ||
            (chmod(pub_path, 0644) < 0 && (r = negative_errno()) < 0) ||
            (r = file_write_atomic(key_path, sk_hex, strlen(sk_hex), 0600)) < 0)
                goto out;
        char line[CAP_KID_MAX + 2];
        snprintf(line, sizeof line, "%s\n", kid);
        if ((r = file_write_atomic(cur_path, line, strlen(line), 0600)) < 0)
                goto out;
        /* the previous public key verifies what was signed just before;
         * no secret but the current one is kept */
        retire(dir, "public", ".pub", kid, previous);
        retire(dir, "signing", ".key", kid, "");
        snprintf(ret_kid, CAP_KID_MAX + 1, "%s", kid);
        if (ret_previous)
                snprintf(ret_previous, CAP_KID_MAX + 1, "%s", previous);
out:
        sodium_memzero(sk_hex, sizeof sk_hex);
        return r;
}

int cap_keydir_load_signer(const char *dir, struct cap_keyring **ret, char ret_kid[CAP_KID_MAX + 1]) {
        char kid[CAP_KID_MAX + 1];
        int r = read_current(dir, kid);
        if (r == -ENOENT)
                r = cap_keydir_rotate(dir, kid, NULL);
        if (r < 0)
                return r;
        _cleanup_free_ char *path = strdup_printf("%s/signing/%s.key", dir, kid);
        if (!path)
                return -ENOMEM;
        uint8_t sk[CAP_SECRET_KEY_SIZE];
        if ((r = read_key(path, sk, sizeof sk)) < 0)
                return r;
        _cleanup_(cap_keyring_freep) struct cap_keyring *kr = NULL;
        r = cap_keyring_new(&kr);
        if (r >= 0)
                r = cap_keyring_add_secret(kr, kid, sk);
        sodium_memzero(sk, sizeof sk);
        if (r < 0)
                return r;
        snprintf(ret_kid, CAP_KID_MAX + 1, "%s", kid);
        *ret = TAKE_PTR(kr);
        return 0;
}

uint64_t cap_keydir_public_stamp(const char *dir) {
        _cleanup_free_ char *pub = strdup_printf("%s/public", dir);
        struct stat st;
        if (!pub || stat(pub, &st) < 0)
                return 0;
        return (uint64_t) st.st_mtim.tv_sec * 1000000000ULL + (uint64_t) st.st_mtim.tv_nsec;
}
