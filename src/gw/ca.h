/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The egress CA and the leaf certificates it mints (ca.c). */

#include <openssl/x509.h>

/* Loads dir/ca.key and dir/ca.crt, or makes them on the first start. */
int gw_ca_open(const char *dir);

/* A certificate for exactly name (cached; the caller takes no reference:
 * valid until the next call), its key and the CA's certificate. */
int gw_ca_leaf(const char *name, X509 **ret_cert, EVP_PKEY **ret_key, X509 **ret_ca);
