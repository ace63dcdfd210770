/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzzes what a control-plane replica reads from the network on its
 * cluster port (lib/cluster): the bytes as a JSON request, parsed as a
 * join and as a heartbeat, and as a join token. What is accepted is
 * bounded: a valid name and address, at most CLUSTER_LABELS_MAX labels and
 * CLUSTER_TEMPLATES_MAX template names, each valid; a refusal says why.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct cluster_node_info *n) {
        if (!n->name[0] || strlen(n->name) > 63 || !cluster_address_valid(n->address) || !n->boot_id[0])
                abort();
        if (n->n_labels > CLUSTER_LABELS_MAX || n->n_templates > CLUSTER_TEMPLATES_MAX)
                abort();
        for (size_t i = 0; i < n->n_labels; i++)
                if (!n->labels[i].key[0] || !n->labels[i].value[0])
                        abort();
        for (size_t i = 0; i < n->n_templates; i++)
                if (!n->templates[i] || !n->templates[i][0] || strlen(n->templates[i]) > 63)
                        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size > CLUSTER_REQUEST_MAX)
                return 0;
        char *s = malloc(size + 1);
        if (!s)
                return 0;
        memcpy(s, data, size);
        s[size] = 0;
        struct cluster_token t;
        if (cluster_token_parse(s, &t) == 0 && (strlen(t.ca_digest) != 64 || strlen(t.secret) != 32))
                abort();
        json_t *req = json_loadb((const char *) data, size, JSON_REJECT_DUPLICATES, NULL);
        free(s);
        if (!req)
                return 0;
        char err[256];
        struct cluster_node_info n;
        const char *token, *csr;
        err[0] = 0;
        if (cluster_join_parse(req, &token, &csr, &n, err) == 0) {
                check(&n);
                if (!token || !csr)
                        abort();
                cluster_node_info_release(&n);
        } else if (!err[0] && errno != ENOMEM)
                abort();
        err[0] = 0;
        if (cluster_heartbeat_parse(req, &n, err) == 0) {
                check(&n);
                cluster_node_info_release(&n);
        } else if (!err[0] && errno != ENOMEM)
                abort();
        json_decref(req);
        return 0;
}
