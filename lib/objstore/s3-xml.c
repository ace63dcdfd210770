/* SPDX-License-Identifier: Apache-2.0 */
/* S3's XML replies (s3-xml.h). */
#include "s3-xml.h"

#include <errno.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S3_XML_TEXT_MAX 2048 /* one element's text */

static xmlDocPtr parse(const char *data, size_t len) {
        if (!data || len == 0 || len > S3_XML_MAX)
                return NULL;
        /* no network, no entity expansion, no DTD loading: a reply is data */
        return xmlReadMemory(data, (int) len, NULL, NULL,
                             XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_NOCDATA);
}

static bool is(xmlNodePtr n, const char *name) {
        return n && n->type == XML_ELEMENT_NODE && strcmp((const char *) n->name, name) == 0;
}

static xmlNodePtr child(xmlNodePtr n, const char *name) {
        for (xmlNodePtr c = n ? n->children : NULL; c; c = c->next)
                if (is(c, name))
                        return c;
        return NULL;
}

/* The text of n's child name into out (cut to size); "" when absent. */
static const char *text(xmlNodePtr n, const char *name, char *out, size_t size) {
        out[0] = 0;
        xmlNodePtr c = child(n, name);
        xmlChar *t = c ? xmlNodeGetContent(c) : NULL;
        if (t)
                snprintf(out, size, "%.*s", S3_XML_TEXT_MAX, (const char *) t);
        xmlFree(t);
        return out;
}

/* The root of a reply that should be document kind, or NULL. */
static xmlNodePtr root_of(xmlDocPtr d, const char *kind) {
        xmlNodePtr r = d ? xmlDocGetRootElement(d) : NULL;
        return is(r, kind) ? r : NULL;
}

static void page_read(xmlNodePtr root, const char *next, const char *next_id, struct s3_xml_page *p) {
        char t[16];
        p->truncated = strcmp(text(root, "IsTruncated", t, sizeof t), "true") == 0;
        p->next[0] = p->next_id[0] = 0;
        if (p->truncated && next)
                text(root, next, p->next, sizeof p->next);
        if (p->truncated && next_id)
                text(root, next_id, p->next_id, sizeof p->next_id);
}

void s3_xml_error(const char *data, size_t len, char *out, size_t n) {
        out[0] = 0;
        xmlDocPtr d = parse(data, len);
        xmlNodePtr root = root_of(d, "Error");
        if (root) {
                char code[64], msg[160];
                text(root, "Code", code, sizeof code);
                text(root, "Message", msg, sizeof msg);
                snprintf(out, n, "%s%s%s", code, *msg ? ": " : "", msg);
        }
        xmlFreeDoc(d);
}

int s3_xml_upload_id(const char *data, size_t len, char *out, size_t n) {
        xmlDocPtr d = parse(data, len);
        xmlNodePtr root = root_of(d, "InitiateMultipartUploadResult");
        int r = root && *text(root, "UploadId", out, n) ? 0 : -EBADMSG;
        xmlFreeDoc(d);
        return r;
}

bool s3_xml_is_complete(const char *data, size_t len) {
        xmlDocPtr d = parse(data, len);
        bool ok = root_of(d, "CompleteMultipartUploadResult") != NULL;
        xmlFreeDoc(d);
        return ok;
}

int s3_xml_list(const char *data, size_t len, int (*fn)(void *userdata, const char *key), void *userdata,
                struct s3_xml_page *ret_page) {
        xmlDocPtr d = parse(data, len);
        xmlNodePtr root = root_of(d, "ListBucketResult");
        int r = root ? 0 : -EBADMSG;
        for (xmlNodePtr c = root ? root->children : NULL; r >= 0 && c; c = c->next) {
                char key[1100];
                if (is(c, "Contents") && *text(c, "Key", key, sizeof key))
                        r = fn(userdata, key);
        }
        if (r >= 0) {
                page_read(root, "NextContinuationToken", NULL, ret_page);
                if (ret_page->truncated && !ret_page->next[0])
                        r = -EBADMSG; /* would list the first page again, forever */
        }
        xmlFreeDoc(d);
        return r;
}

static int64_t iso8601_seconds(const char *s) {
        struct tm tm = { 0 };
        const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
        return end ? (int64_t) timegm(&tm) : -1;
}

int s3_xml_uploads(const char *data, size_t len,
                   int (*fn)(void *userdata, const char *key, const char *upload_id, int64_t initiated),
                   void *userdata, struct s3_xml_page *ret_page) {
        xmlDocPtr d = parse(data, len);
        xmlNodePtr root = root_of(d, "ListMultipartUploadsResult");
        int r = root ? 0 : -EBADMSG;
        for (xmlNodePtr u = root ? root->children : NULL; r >= 0 && u; u = u->next) {
                char key[1100], id[256], when[40];
                if (!is(u, "Upload") || !*text(u, "Key", key, sizeof key) || !*text(u, "UploadId", id, sizeof id))
                        continue;
                r = fn(userdata, key, id, iso8601_seconds(text(u, "Initiated", when, sizeof when)));
        }
        if (r >= 0) {
                page_read(root, "NextKeyMarker", "NextUploadIdMarker", ret_page);
                if (ret_page->truncated && !ret_page->next[0])
                        r = -EBADMSG;
        }
        xmlFreeDoc(d);
        return r;
}

int s3_xml_parts(const char *data, size_t len,
                 int (*fn)(void *userdata, uint32_t number, const char *etag, uint64_t size), void *userdata,
                 struct s3_xml_page *ret_page) {
        xmlDocPtr d = parse(data, len);
        xmlNodePtr root = root_of(d, "ListPartsResult");
        int r = root ? 0 : -EBADMSG;
        for (xmlNodePtr p = root ? root->children : NULL; r >= 0 && p; p = p->next) {
                char num[24], size[24], etag[80];
                if (!is(p, "Part"))
                        continue;
                char *end;
                errno = 0;
                unsigned long n = strtoul(text(p, "PartNumber", num, sizeof num), &end, 10);
                if (errno || end == num || *end || n < 1 || n > 10000)
                        continue;
                unsigned long long sz = strtoull(text(p, "Size", size, sizeof size), &end, 10);
                if (errno || end == size || *end)
                        continue;
                text(p, "ETag", etag, sizeof etag);
                const char *e = etag;
                size_t elen = strlen(e);
                if (elen >= 2 && e[0] == '"' && e[elen - 1] == '"') {
                        e++;
                        elen -= 2;
                }
                char clean[80];
                snprintf(clean, sizeof clean, "%.*s", (int) elen, e);
                r = fn(userdata, (uint32_t) n, clean, (uint64_t) sz);
        }
        if (r >= 0) {
                page_read(root, "NextPartNumberMarker", NULL, ret_page);
                if (ret_page->truncated && !ret_page->next[0])
                        r = -EBADMSG;
        }
        xmlFreeDoc(d);
        return r;
}
