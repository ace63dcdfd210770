/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The installation's egress CA (docs/network.md, "TLS"): the gateway mints
 * the certificate a guest sees when its TLS is terminated, for the exact
 * name it asked for, signed by this CA. The CA's key is made here on the
 * first start and read by the gateway alone (DATA_DIR/egress-ca/ca.key,
 * 0600, the gateway's user); its certificate (ca.crt, 0644) is what
 * templates put into the guest's trust store. Leaf certificates share one
 * key made at start, live 7 days and are cached by name.
 */
#include "ca.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macros.h"

#define CA_DAYS 3650
#define LEAF_SECONDS (7 * 24 * 3600)
#define LEAF_CACHE 256

static EVP_PKEY *ca_key, *leaf_key;
static X509 *ca_cert;

static struct leaf {
        char name[256];
        X509 *cert;
        time_t made;
        uint64_t used;
} cache[LEAF_CACHE];
static uint64_t use_clock;

static int random_serial(X509 *x) {
        unsigned char b[16];
        if (RAND_bytes(b, sizeof b) != 1)
                return -EIO;
        b[0] &= 0x7f; /* positive */
        BIGNUM *bn = BN_bin2bn(b, sizeof b, NULL);
        int ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
        BN_free(bn);
        return ok ? 0 : -EIO;
}

static bool add_ext(X509 *x, X509 *issuer, int nid, const char *value) {
        X509V3_CTX v3;
        X509V3_set_ctx_nodb(&v3);
        X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
        bool ok = e && X509_add_ext(x, e, -1) == 1;
        X509_EXTENSION_free(e);
        return ok;
}

static X509 *make_ca(EVP_PKEY *key) {
        X509 *x = X509_new();
        X509_NAME *n = x ? X509_get_subject_name(x) : NULL;
        char host[64] = "";
        (void) gethostname(host, sizeof host - 1);
        char cn[128];
        snprintf(cn, sizeof cn, "Airlock egress CA (%s)", host);
        bool ok = x && X509_set_version(x, 2) == 1 && random_serial(x) >= 0 &&
                  X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
                  X509_gmtime_adj(X509_getm_notAfter(x), (long) CA_DAYS * 86400) &&
                  X509_set_pubkey(x, key) == 1 &&
                  X509_NAME_add_entry_by_txt(n, "O", MBSTRING_UTF8, (const unsigned char *) "Airlock", -1,
                                             -1, 0) == 1 &&
                  X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *) cn, -1, -1,
                                             0) == 1 &&
                  X509_set_issuer_name(x, n) == 1 &&
                  add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
                  add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") &&
                  add_ext(x, x, NID_subject_key_identifier, "hash") && X509_sign(x, key, EVP_sha256()) > 0;
        if (!ok) {
                X509_free(x);
                return NULL;
        }
        return x;
}

/* Writes what pem() writes into dir/name atomically, with mode. */
static int write_pem(const char *dir, const char *name, mode_t mode, bool (*pem)(FILE *f, void *obj),
                     void *obj) {
        char tmp[4096], final[4096];
        snprintf(final, sizeof final, "%s/%s", dir, name);
        snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
        (void) unlink(tmp);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        if (fd < 0)
                return negative_errno();
        FILE *f = fdopen(fd, "w");
        if (!f) {
                close(fd);
                return -ENOMEM;
        }
        bool ok = pem(f, obj);
        ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
        fclose(f);
        if (!ok || rename(tmp, final) < 0) {
                (void) unlink(tmp);
                return -EIO;
        }
        return 0;
}

static bool pem_key(FILE *f, void *k) {
        return PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL) == 1;
}
static bool pem_cert(FILE *f, void *x) {
        return PEM_write_X509(f, x) == 1;
}

static int load(const char *dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/ca.key", dir);
        FILE *f = fopen(path, "re");
        if (!f)
                return negative_errno();
        ca_key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        fclose(f);
        snprintf(path, sizeof path, "%s/ca.crt", dir);
        f = fopen(path, "re");
        if (!f)
                return negative_errno();
        ca_cert = PEM_read_X509(f, NULL, NULL, NULL);
        fclose(f);
        if (!ca_key || !ca_cert || X509_check_private_key(ca_cert, ca_key) != 1)
                return log_error_errno(-EBADMSG, "%s: ca.key and ca.crt are unreadable or do not match",
                                       dir);
        return 0;
}

int gw_ca_open(const char *dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/ca.key", dir);
        int r;
        if (access(path, F_OK) == 0)
                r = load(dir);
        else {
                ca_key = EVP_EC_gen("P-256");
                ca_cert = ca_key ? make_ca(ca_key) : NULL;
                if (!ca_cert)
                        return log_error_errno(-EIO, "cannot make the egress CA");
                /* the certificate first: a key without one is made again */
                r = write_pem(dir, "ca.crt", 0644, pem_cert, ca_cert);
                if (r >= 0)
                        r = write_pem(dir, "ca.key", 0600, pem_key, ca_key);
                if (r < 0)
                        return log_error_errno(r, "cannot write the egress CA into %s: %m", dir);
                log_info("made the egress CA %s/ca.crt", dir);
        }
        if (r < 0)
                return r;
        leaf_key = EVP_EC_gen("P-256");
        return leaf_key ? 0 : -EIO;
}

static X509 *mint(const char *name) {
        X509 *x = X509_new();
        X509_NAME *n = x ? X509_get_subject_name(x) : NULL;
        char san[300];
        snprintf(san, sizeof san, "DNS:%s", name);
        bool ok = x && X509_set_version(x, 2) == 1 && random_serial(x) >= 0 &&
                  X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
                  X509_gmtime_adj(X509_getm_notAfter(x), LEAF_SECONDS) &&
                  X509_set_pubkey(x, leaf_key) == 1 &&
                  X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *) name, -1, -1,
                                             0) == 1 &&
                  X509_set_issuer_name(x, X509_get_subject_name(ca_cert)) == 1 &&
                  add_ext(x, ca_cert, NID_basic_constraints, "critical,CA:FALSE") &&
                  add_ext(x, ca_cert, NID_key_usage, "critical,digitalSignature") &&
                  add_ext(x, ca_cert, NID_ext_key_usage, "serverAuth") &&
                  add_ext(x, ca_cert, NID_subject_alt_name, san) &&
                  add_ext(x, ca_cert, NID_authority_key_identifier, "keyid:always") &&
                  X509_sign(x, ca_key, EVP_sha256()) > 0;
        if (!ok) {
                X509_free(x);
                return NULL;
        }
        return x;
}

int gw_ca_leaf(const char *name, X509 **ret_cert, EVP_PKEY **ret_key, X509 **ret_ca) {
        if (!ca_key || !leaf_key || strlen(name) >= sizeof cache[0].name)
                return -EINVAL;
        time_t now = time(NULL);
        struct leaf *slot = &cache[0];
        for (size_t i = 0; i < LEAF_CACHE; i++) {
                struct leaf *l = &cache[i];
                if (l->cert && strcmp(l->name, name) == 0 && now - l->made < LEAF_SECONDS / 2) {
                        l->used = ++use_clock;
                        *ret_cert = l->cert;
                        *ret_key = leaf_key;
                        *ret_ca = ca_cert;
                        return 0;
                }
                if (l->used < slot->used)
                        slot = l;
        }
        X509 *x = mint(name);
        if (!x)
                return -EIO;
        X509_free(slot->cert);
        *slot = (struct leaf){.cert = x, .made = now, .used = ++use_clock};
        snprintf(slot->name, sizeof slot->name, "%s", name);
        *ret_cert = x;
        *ret_key = leaf_key;
        *ret_ca = ca_cert;
        return 0;
}
