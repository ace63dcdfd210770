/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * The API's resource handlers, independent of HTTP plumbing (http.c does
 * routing, authentication, bodies and the error envelope). Each handler
 * returns 0 and fills a struct api_reply, or a negative errno with a
 * message for the client in ctx->err (empty: the table's default message).
 * Handlers that stream (session events, file downloads) return a ready
 * libmicrohttpd response whose content callback blocks on the node socket.
 */

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "api-reply.h"
#include "apierror.h"
#include "config.h"
#include "credstore.h"
#include "nodeclient.h"
#include "secretreq.h"
#include "store.h"

#define API_SSE_KEEPALIVE_S 15 /* comment line on an idle event stream */

/* 0 when sb runs; a suspended one is woken first (sb is read again);
 * -EBUSY with a message otherwise (lifecycle-api.c, beside the wake). */
int api_sandbox_require_running(struct api_ctx *ctx, struct store_sandbox *sb);
/* A response whose body is the NODE_DATA frames of *c up to NODE_END
 * (size bytes, or MHD_SIZE_UNKNOWN); it takes *c. NULL when out of memory
 * (*c stays the caller's). */
struct MHD_Response *api_stream_response(struct node_conn **c, uint64_t size, const char *log_ctx);

int api_health(struct api_ctx *ctx, struct api_reply *ret);
int api_templates_list(struct api_ctx *ctx, struct api_reply *ret);

/* Templates built from specs (api-templates.c). create: body {"spec"} or
 * {"dockerfile","name",sizes}; context_path (NULL: none) a build context
 * tar with its SHA-256 in hex. 202 while it builds, 200 when it is built
 * already. */
#define API_TEMPLATE_CONTEXT_MAX (256ull << 20)
int api_template_create(struct api_ctx *ctx, const json_t *body, const char *context_path, const char *context_sha,
                        struct api_reply *ret);
int api_template_get(struct api_ctx *ctx, const char *name, struct api_reply *ret);
int api_template_delete(struct api_ctx *ctx, const char *name, struct api_reply *ret);
/* GET .../builds/{id}/logs: Server-Sent Events "log" {text}, "progress"
 * {step,steps,step_text,elapsed_ms} and a last "end" {state,error?}. */
int api_template_logs(struct api_ctx *ctx, const char *name, const char *build_id, struct api_reply *ret);
/* Appends the caller's built templates to arr. */
int api_template_list_own(struct api_ctx *ctx, json_t *arr);
/* name as owner's template: 1 with its node's template name (and the node
 * it is on, NULL: the local one) when it is one and ready; 0 when it is
 * not one of theirs (a built-in name); -EBUSY (message set) while it
 * builds or after it failed. */
int api_template_resolve(struct api_ctx *ctx, const char *owner, const char *name, char **ret_node_template,
                         char **ret_node);
/* GET /v1/pools: the node's warm pools, {"pools":[...]}. */
int api_pools_list(struct api_ctx *ctx, struct api_reply *ret);

/* How long a create through the E2B door or MCP waits for a template that
 * is still being built (their SDKs' requests time out at 60 s): then a
 * 503 template_building with the build's progress, the build going on. */
#define API_SDK_TEMPLATE_WAIT_S 40

/* Create and delete run in the request's thread and record an operation
 * ("create"/"delete"); idempotency_key (may be NULL) makes a repeated
 * request answer with the first one's outcome instead of running again. */
int api_sandbox_create(struct api_ctx *ctx, const json_t *body, const char *idempotency_key, struct api_reply *ret);
/* agent (NULL: any): only the sandboxes running that guest agent version. */
int api_sandbox_list(struct api_ctx *ctx, const char *agent, struct api_reply *ret);
/* POST /v1/sandboxes/{id}/agent/upgrade: its guest agent replaced by its
 * node's, in place; the sandbox with its "agent". */
int api_sandbox_agent_upgrade(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_sandbox_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);
/* Sets sandbox id's lifetime to timeout_s from now (0: none), deleted or
 * suspended at its end as on_expiry says ("delete", "suspend"; NULL: as it
 * was); the idle watcher enforces it (idle.c). A store failure is logged. */
int api_sandbox_set_lifetime(struct api_ctx *ctx, const char *id, int64_t timeout_s, const char *on_expiry);
/* keep_snapshots: the sandbox is archived instead (VM and disk gone, row
 * and snapshots kept; a rollback makes it again). */
int api_sandbox_delete(struct api_ctx *ctx, const char *id, const char *idempotency_key, bool keep_snapshots,
                       struct api_reply *ret);
int api_exec(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);

int api_session_create(struct api_ctx *ctx, const char *sandbox_id, const json_t *body, struct api_reply *ret);
int api_session_get(struct api_ctx *ctx, const char *sid, struct api_reply *ret);
int api_session_events(struct api_ctx *ctx, const char *sid, struct api_reply *ret);
int api_session_stdin(struct api_ctx *ctx, const char *sid, const json_t *body, struct api_reply *ret);
int api_session_signal(struct api_ctx *ctx, const char *sid, const json_t *body, struct api_reply *ret);
/* {"rows","cols"}: a PTY session's terminal size (the node's
 * session.resize; 409 for one without a PTY). */
int api_session_resize(struct api_ctx *ctx, const char *sid, const json_t *body, struct api_reply *ret);

/* Files; path was checked with apireq_check_path() by the caller. A read
 * runs as the guest's user (NULL or "": root). */
int api_file_read(struct api_ctx *ctx, const char *id, const char *path, const char *user, struct api_reply *ret);
/* A whole file of at most max bytes into memory (*ret NUL-terminated after
 * its *ret_len bytes); -EFBIG with a message when it is larger. */
int api_file_read_bytes(struct api_ctx *ctx, const char *id, const char *path, size_t max, uint8_t **ret,
                        size_t *ret_len);
int api_file_remove(struct api_ctx *ctx, const char *id, const char *path, bool recursive, struct api_reply *ret);
int api_file_list(struct api_ctx *ctx, const char *id, const char *path, struct api_reply *ret);
/* Uploads in three steps, so the body streams to the node as it arrives:
 * begin opens the node transfer, chunk forwards bytes, finish ends it and
 * reads the node's verdict. */
int api_upload_begin(struct api_ctx *ctx, const char *id, const char *path, uint32_t mode, struct node_conn **ret);
int api_upload_chunk(struct node_conn *c, const void *data, size_t len);
int api_upload_finish(struct api_ctx *ctx, struct node_conn *c, const char *path, uint64_t size, struct api_reply *ret);

/* Service ports (api-ports.c): one HTTP request to a server in the guest,
 * streamed like an upload. begin sends the request head (method, target:
 * the path and query the server gets, headers: [[name, value], ...] to
 * forward, length: the body's size or -1), chunks go with
 * api_upload_chunk(), finish ends the body and turns the node's reply into
 * the response, streamed. */
int api_port_begin(struct api_ctx *ctx, const char *id, unsigned port, const char *method, const char *target,
                   json_t *headers, int64_t length, struct node_conn **ret);
int api_port_finish(struct api_ctx *ctx, struct node_conn **c, struct api_reply *ret);
/* The same end without a response: the server's status, and the node's
 * reply (may be NULL: not wanted; its "headers" and "length"); the body
 * follows as NODE_DATA frames on c. */
int api_port_reply(struct api_ctx *ctx, struct node_conn *c, unsigned *ret_status, json_t **ret_rep);
/* Whether a request is for a service port: the path
 * /v1/sandboxes/ID/ports/PORT[/REST] of raw_uri (as the client sent it:
 * escapes and query kept), or a Host "PORT-ID.DOMAIN". Then the sandbox id
 * (at most id_size - 1 chars), the port and the target the server gets
 * ("/REST?QUERY", or raw_uri itself with a Host) are set. -EINVAL for a
 * port that is no number in 1..65535 (with a message in err). */
int api_port_target(const char *raw_uri, const char *host, char *id, size_t id_size, unsigned *ret_port,
                    const char **ret_target, char *err, size_t err_size);

/*
 * Formats one Server-Sent Event: "event: NAME\ndata: JSON\n\n" with data
 * as compact one-line JSON. *ret is a new NUL-terminated string.
 */
int api_sse_format(const char *event, const json_t *data, char **ret, size_t *ret_len);
/* What an event stream's content callback has still to send (every SSE
 * response has one): set takes text; take copies pending bytes into buf
 * and returns their count (0: none pending); keepalive queues a comment
 * line once the stream was idle API_SSE_KEEPALIVE_S (1 queued, 0 not
 * yet, -ENOMEM); fail queues an error event {code, message} and ends it. */
struct api_sse_out {
        char *pend;
        size_t len, off;
        uint64_t last_ns; /* when bytes last went out (monotonic) */
        bool done;        /* nothing after what is pending */
};
void api_sse_out_set(struct api_sse_out *o, char *text, size_t len);
size_t api_sse_out_take(struct api_sse_out *o, char *buf, size_t max);
int api_sse_out_keepalive(struct api_sse_out *o);
void api_sse_out_fail(struct api_sse_out *o, int r, const char *msg);
/* The 200 reply of an event stream: reader (MHD's content callback) gives
 * its bytes, free_cb frees cls once the stream ends, or here when the
 * reply cannot be made (-ENOMEM). */
int api_sse_reply(MHD_ContentReaderCallback reader, void *cls, MHD_ContentReaderFreeCallback free_cb,
                  struct api_reply *ret);
/* The content callback of an event stream that looks for news: pending
 * text first, the end once o->done, an error event at the server's stop;
 * otherwise poll(cls), which queues what is new in o (then > 0; o->done
 * when nothing follows it), returns 0 when there is nothing, or < 0 to cut
 * the stream; a keepalive when idle, and poll_ms between looks. Runs on
 * the connection's own thread (libmicrohttpd, a thread per connection). */
ssize_t api_sse_poll_read(struct api_sse_out *o, const atomic_bool *stopping, int (*poll)(void *cls), void *cls,
                          unsigned poll_ms, char *buf, size_t max);
/*
 * Translates one node session event ({"type":"stdout","data":b64}, ...)
 * into its SSE text. Returns 1 with *ret set, 0 for events the API does
 * not forward, or a negative errno. *ret_last is set for the exit event.
 */
int api_sse_from_node_event(const json_t *ev, char **ret, size_t *ret_len, bool *ret_last);

/* Lifecycle verbs (lifecycle-api.c): verb is "pause", "resume", "stop",
 * "start" or "rollback" (body {"snapshot":"ID"}; the others read no field
 * and http.c refuses any, body may be NULL); idempotency_key may be NULL.
 * 202 with the operation, or with wait 200 once it finished. */
/* The object-store name of a sandbox's suspended image: one per sandbox (a
 * new suspend replaces the old one, which a wake made stale). */
void api_suspended_snapshot_id(const char *sandbox_id, char *ret, size_t n);
/* Wakes suspended sandbox id and waits for it (an exec, file or session
 * request on a suspended sandbox does this first). 0 once it runs. */
int api_sandbox_wake(struct api_ctx *ctx, const char *id);
int api_sandbox_verb(struct api_ctx *ctx, const char *id, const char *verb, const json_t *body,
                     const char *idempotency_key, bool wait, struct api_reply *ret);
/* Disk snapshots (api.c): POST {"kind":"disk"} -> 201, GET -> 200 list. */
int api_snapshot_create(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);
int api_snapshot_list(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_operation_get(struct api_ctx *ctx, const char *op_id, struct api_reply *ret);
/* {"id","sandbox_id","verb","state","progress","stage"?,"created_at","finished_at"?,"error"?,"result"?} */
json_t *api_operation_json(const struct store_operation *op);

#define API_IDEMPOTENCY_KEY_MAX 128
/* The operation an Idempotency-Key names: 0 when the key is unused, 1 with
 * *ret (release it) when the caller may see it; -EEXIST (ctx->err says so,
 * nothing more) for another tenant's key. */
int api_operation_by_key(struct api_ctx *ctx, const char *key, struct store_operation *ret);
/* An Idempotency-Key header value: 1..API_IDEMPOTENCY_KEY_MAX printable
 * ASCII characters, no spaces. check: 0 for none or a valid one, else
 * -EINVAL with the message. */
bool api_idempotency_key_is_valid(const char *key);
int api_idempotency_key_check(struct api_ctx *ctx, const char *key);
/* Inserts op (create, delete, a verb) as carried by this replica
 * (replica_op_lease()); a failure is logged, except -EEXIST for a taken
 * Idempotency-Key, which the caller answers by replaying. */
int api_operation_insert(struct api_ctx *ctx, struct store_operation *op);
/* Reads operation op_id, first waiting up to max_ms for it to finish (0:
 * no wait; shutdown ends the wait early). *ret may still be unfinished. */
int api_operation_wait(struct api_ctx *ctx, const char *op_id, uint64_t max_ms, struct store_operation *ret);
/* Records that an operation's node call starts: progress 10, stage (the
 * verb's transitional state, "creating"). Failures are only logged. */
void api_operation_node_called(struct store *store, const char *op_id, const char *stage);
/* Writes an operation's outcome (r < 0: failed with message, or the
 * default message of r; else succeeded with result, JSON text or NULL)
 * and wakes the requests waiting for it. Failures are only logged. */
void api_operation_finish(struct store *store, const char *op_id, int r, const char *message, const char *result);
/* Marks the start of a shutdown: from here on a verb whose node call the
 * node's exit cuts off is left unfinished for the next start to settle
 * (it may have happened), and nobody waits for a node to come back. */
void api_lifecycle_shutdown_begin(void);
/* Waits up to timeout_s for running verb workers (shutdown: they use the
 * store and the config); begins the shutdown if that was not done. */
void api_lifecycle_drain(unsigned timeout_s);
/* Start-up repair: unfinished operations fail, sandboxes left in a
 * transitional state take the node's view. */
void api_lifecycle_reconcile(const struct daemon_config *config, struct store *store);
/* Settles an operation whose replica stopped carrying it (its lease ran
 * out; this replica took it over): a create the node finished is adopted,
 * one it did not is undone; a verb's sandbox takes the state its node
 * reports, and the operation succeeded if that is where the verb was going,
 * else failed. Several replicas on one store (replica.c's beat). */
void api_operation_settle_orphan(const struct daemon_config *config, struct store *store,
                                 const struct store_operation *op);

/*
 * Images (api-images.c; docs/api.md): full snapshots of a sandbox in the
 * object store that outlive it; POST /v1/sandboxes {"image"} makes a new
 * sandbox from one. Scoped like sandboxes.
 *
 * POST /v1/sandboxes/{id}/images {"name"?} -> 201 the image (a running or
 * paused sandbox; a suspended one is woken); GET /v1/images[?sandbox_id=]
 * -> {"images":[...]}, newest first; GET /v1/images/{id}; DELETE -> 204.
 */
json_t *api_image_json(const struct store_image *img);
/* The image row id as the caller may see it (another tenant's is a 404). */
int api_image_lookup(struct api_ctx *ctx, const char *id, struct store_image *ret);
/* The caller's image named name (404 when it has none). */
int api_image_find(struct api_ctx *ctx, const char *name, struct store_image *ret);
/* Whether a sandbox of owner (NULL: admin) may be made from img by ctx. */
bool api_image_usable_by(const struct store_image *img, const struct api_ctx *ctx, const char *owner);
int api_image_create(struct api_ctx *ctx, const char *sandbox_id, const json_t *body, struct api_reply *ret);
/* The rows GET /v1/images lists (free with store_image_array_free()). */
int api_image_list_rows(struct api_ctx *ctx, const char *sandbox_id, struct store_image **ret, size_t *ret_n);
int api_image_list(struct api_ctx *ctx, const char *sandbox_id, struct api_reply *ret);
int api_image_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_image_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret);

/*
 * Egress policies (api-network.c; docs/network.md). Policies are kept as the
 * canonical text of lib/netpolicy.
 *
 * api_network_parse(): j (NULL: absent) parsed strictly as a policy, its
 * messages naming field; *ret the canonical text, or NULL when j is absent
 * or {} (it specifies nothing: the defaults apply). With required, {} and
 * absent are 400 too (a PUT says what it wants). 400 with netpolicy's
 * message, 413 over NETPOLICY_JSON_MAX.
 */
int api_network_parse(struct api_ctx *ctx, const json_t *j, const char *field, bool required, char **ret);
/* The policy of a new sandbox that gave none: its tenant's default
 * (tenant_id NULL: admin-owned, none), else the node default
 * (config->network_default). */
int api_network_default(struct api_ctx *ctx, const char *tenant_id, char **ret);
/* The stored policy of sandbox id (the node default for a row made before
 * policies existed). 404 when there is no row; no tenant check. */
int api_network_of_sandbox(struct api_ctx *ctx, const char *id, char **ret);
/* Canonical policy text as a JSON object; -EBADMSG when it is not one. */
int api_network_json(const char *text, json_t **ret);
/* GET /v1/sandboxes/{id}/network: 200 with the policy object. */
int api_sandbox_network_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);
/* PUT /v1/sandboxes/{id}/network, body a policy: stored, and sent to the
 * node when one holds the sandbox (the gateway applies it to new
 * connections); 200 with the canonical policy. 409 while the sandbox is
 * being made, deleted or a verb runs on it. */
int api_sandbox_network_put(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);
/* GET /v1/sandboxes/{id}/network/log?limit=N (limit_s NULL: 100; at most
 * 1000): {"entries":[...]} from the node's gateway; 409 without a VM. */
int api_sandbox_network_log(struct api_ctx *ctx, const char *id, const char *limit_s, struct api_reply *ret);

/* Tenants and keys (api-tenants.c), admin only (http.c checks the scope).
 * POST /v1/tenants {"name","network"?} -> 201; GET -> {"tenants":[...]};
 * GET /v1/tenants/{id} -> the tenant ("network": its default policy, when
 * it has one); DELETE /v1/tenants/{id} -> 204 (409 while it owns
 * sandboxes); PUT /v1/tenants/{id}/network, body a policy -> 200 with it:
 * the default of sandboxes the tenant creates from then on (existing ones
 * keep theirs); GET of it -> the default (404 when it has none); DELETE of
 * it -> 204, back to the node default. */
#define API_TENANTS_MAX 1000
#define API_KEYS_PER_TENANT_MAX 100
int api_tenant_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret);
int api_tenant_list(struct api_ctx *ctx, struct api_reply *ret);
/* The nodes of a cluster (api-nodes.c), admin only. */
int api_node_list(struct api_ctx *ctx, struct api_reply *ret);
int api_node_get(struct api_ctx *ctx, const char *name, struct api_reply *ret);
int api_node_delete(struct api_ctx *ctx, const char *name, struct api_reply *ret);
int api_node_drain(struct api_ctx *ctx, const char *name, bool drain, struct api_reply *ret);
int api_node_token_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret);
int api_tenant_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_tenant_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_tenant_network_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_tenant_network_put(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);
int api_tenant_network_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret);
/* POST /v1/tenants/{id}/keys {"name"?} -> 201 {id, key, tenant_id,
 * created_at}: the only time the key is shown. GET lists without keys;
 * DELETE /v1/keys/{id} -> 204, the key fails from the next request on. */
int api_key_create(struct api_ctx *ctx, const char *tenant_id, const json_t *body, struct api_reply *ret);
int api_key_list(struct api_ctx *ctx, const char *tenant_id, struct api_reply *ret);
int api_key_delete(struct api_ctx *ctx, const char *key_id, struct api_reply *ret);

/* GET /v1/capability-keys: {"current": kid}. POST: a new signing key, 201
 * {"current","previous"}; the previous one still verifies until the next
 * rotation. Admin only. */
/* Puts key into a node request: "data_key" (base64) and "wrapped_key". */
struct datakey;
int api_request_add_datakey(json_t *req, const struct datakey *key);
/* Adds to a create-from-image request for the node at addr the image's
 * data key: the node says how it is wrapped (the manifest's key), the
 * image owner's KEK opens it. Nothing for an image in the clear. */
struct store_image;
int api_image_key_add(struct api_ctx *ctx, const char *addr, const struct store_image *image, json_t *req);

/* ---- Volumes (api-volumes.c) ---- */

/* The metadata key of a sandbox made to reach a volume's files (E2B's
 * volume content API, e2b-volume-content.c): the volume's id. Such a
 * sandbox lives for the requests in flight; a create or delete that finds
 * the volume held by one waits for it to go. */
#define API_VOLUME_HELPER_METADATA "airlock.volume_content"
bool api_volume_helper_of(const struct store_sandbox *sb, const char *volume_id);

json_t *api_volume_json(const struct store_volume *v, const struct store_volume_hold *holds, size_t n_holds);
/* By id ("vol-...") or by the key's (the admin's) name; 404 for one the key may not see. */
int api_volume_lookup(struct api_ctx *ctx, const char *name, struct store_volume *ret);
int api_volume_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret);
int api_volume_list(struct api_ctx *ctx, struct api_reply *ret);
int api_volume_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_volume_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_volume_snapshot(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);
/* A create's volumes: resolved and checked (the owner's, on one node,
 * not held in a way this use excludes) before anything exists; then the
 * holds recorded once the sandbox row is. */
struct api_volume_attach {
        struct store_volume volumes[4]; /* APIREQ_VOLUMES_MAX */
        size_t n;
        json_t *node_request; /* [{"id","path","read_only"}] for sandbox.create */
        const char *node;     /* the node holding them (volumes[0]'s; NULL: the local node) */
};
int api_volume_attach_prepare(struct api_ctx *ctx, const char *owner, const json_t *list,
                              struct api_volume_attach *ret);
int api_volume_attach_record(struct api_ctx *ctx, const char *sandbox_id, const struct api_volume_attach *a);
void api_volume_attach_release(struct api_volume_attach *a);
/* -EBUSY (409) with why, when sandbox id holds volumes: what `doing`
 * (publish, a full snapshot's export, an archive) does not carry. */
int api_volume_refuse(struct api_ctx *ctx, const char *sandbox_id, const char *doing);
/* Where sandbox_id now runs on another node than the volumes it holds
 * read-write (a wake elsewhere): they follow it, since its copies go back
 * into that node's store; the old node's stale images are deleted where
 * it answers. Logs what fails. */
void api_volumes_follow(const struct daemon_config *config, struct store *store, const char *sandbox_id,
                        const char *log_ctx);
/* A fork's volumes: -EBUSY (409) with why when parent_id holds one
 * read-write (one writer at a time); otherwise child_id (when not NULL:
 * its row inserted) holds the parent's read-only volumes too, at the same
 * slots and paths (the memory it resumes has them mounted). */
int api_volume_fork_holds(struct api_ctx *ctx, const char *parent_id, const char *child_id);
/* Sets o's "volumes" [{"id","path","read_only"}] to what sandbox id holds
 * (nothing when none, or when the store cannot say). */
void api_volume_holds_add(struct api_ctx *ctx, const char *sandbox_id, json_t *o);
/* A node that restarted during the sealed upload of sandbox id's
 * suspended image lost its data key (it holds keys in memory only): when
 * the node says it waits, opens the wrapped key again and gives it back
 * (suspended.upload). 0 when nothing waited. */
int api_suspended_upload_key(const struct daemon_config *config, struct store *store, const char *id,
                             const char *log_ctx);
/* A tenant's key-encryption key (datakey.h): its state; a new version; its
 * revocation (every image sealed for the tenant unreadable from then on). */
int api_tenant_kms_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);
/* Chooses where the tenant's KEK is: {"kind":"local"}, or {"kind":"pkcs11",
 * "label":L,"generate":bool} (an AES key on the configured token). */
int api_tenant_kms_put(struct api_ctx *ctx, const char *id, const json_t *body, struct api_reply *ret);
int api_tenant_kms_rotate(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_tenant_kms_revoke(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_capability_keys_get(struct api_ctx *ctx, struct api_reply *ret);
int api_capability_keys_rotate(struct api_ctx *ctx, struct api_reply *ret);

/*
 * Start-up repair: a row left in state "creating" by a crash is removed,
 * after asking the node to delete whatever it may have started for it.
 */
void api_reconcile_startup(const struct daemon_config *config, struct store *store);

/*
 * Credentials (api-secrets.c; docs/api.md, "Credentials"). The values are
 * sealed in the store (lib/credstore, key DATA_DIR/control/secrets.key) and
 * leave airlockd only over the node socket; replies and logs show metadata.
 *
 * api_secrets_init(): opens the credential store (makes the key on first
 * use). Until it succeeds every secrets handler answers 500.
 */
int api_secrets_init(const struct daemon_config *config, struct store *store);
void api_secrets_shutdown(void);
/* POST /v1/secrets -> 201 metadata; GET /v1/secrets[?tenant=] -> {"secrets"};
 * GET/DELETE /v1/secrets/{name}[?tenant=] (?tenant= and the body's
 * "tenant": an admin's choice of scope). A DELETE takes the secret from the
 * running sandboxes that have it at once. */
int api_secret_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret);

/* ---- api-webhooks.c: /v1/webhooks (docs/webhooks.md) ---- */

/* POST /v1/webhooks {url, events?, secret?, tenant?}: 201 with the secret,
 * shown this once; a URL whose host is in the platform deny set is 400. */
int api_webhook_create(struct api_ctx *ctx, const json_t *body, struct api_reply *ret);
int api_webhook_list(struct api_ctx *ctx, const char *tenant_q, struct api_reply *ret);
int api_webhook_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);
int api_webhook_delete(struct api_ctx *ctx, const char *id, struct api_reply *ret);
/* GET /v1/webhooks/{id}/deliveries[?limit=N][&before=ID]: newest first. */
int api_webhook_deliveries(struct api_ctx *ctx, const char *id, const char *limit_s, const char *before_s,
                           struct api_reply *ret);
int api_secret_list(struct api_ctx *ctx, const char *tenant_q, struct api_reply *ret);
int api_secret_get(struct api_ctx *ctx, const char *name, const char *tenant_q, struct api_reply *ret);
int api_secret_delete(struct api_ctx *ctx, const char *name, const char *tenant_q, struct api_reply *ret);
/* GET /v1/sandboxes/{id}/secrets: {"secrets":[{name, env, placeholder}],
 * "node": the names the node holds in memory now, or null}. */
int api_sandbox_secrets_get(struct api_ctx *ctx, const char *id, struct api_reply *ret);

/* The secrets a create names, before the sandbox exists. */
struct api_secret_attach {
        size_t n;
        char *names[STORE_SANDBOX_SECRETS_MAX];
        char env[STORE_SANDBOX_SECRETS_MAX][CREDSTORE_ENV_NAME_SIZE];
        char placeholder[STORE_SANDBOX_SECRETS_MAX][SECRETREQ_PLACEHOLDER_LEN + 1];
};
void api_secret_attach_release(struct api_secret_attach *at);
/* Checks a create's `secrets` (NULL: none) in scope tenant_id: each must
 * exist, not be expired nor narrowed to a sandbox (400 naming it), its env
 * variable not set by `env`. Draws the placeholders and adds them to env. */
int api_secrets_prepare(struct api_ctx *ctx, const char *tenant_id, const json_t *names, json_t *env,
                        struct api_secret_attach *ret);
/* Stores the attachments once the sandbox row exists (its deletion drops them). */
int api_secrets_record(struct api_ctx *ctx, const char *tenant_id, const char *sandbox_id,
                       const struct api_secret_attach *at);
/* After the node made the sandbox: audit events and the first push. */
void api_secrets_attached(struct api_ctx *ctx, const char *tenant_id, const char *sandbox_id,
                          const struct api_secret_attach *at);
/* Sends the node sandbox_id's decrypted set (sandbox.secrets.set): with
 * always, also when it has none (to clear what the node holds). */
int api_secrets_push(const struct daemon_config *config, struct store *store, const char *sandbox_id, bool always,
                     const char *log_ctx);
/* The same for every sandbox with a VM on node (NULL: the local node), which
 * restarted. */
void api_secrets_push_running(const struct daemon_config *config, struct store *store, const char *node,
                              const char *log_ctx);
/* A fork child asked for its parent's secrets: the same attachments. */
int api_secrets_fork(struct api_ctx *ctx, const char *parent_id, const char *child_id);

/*
 * The audit log (api-audit.c): the control plane's own events, and the
 * gateway's, read from the node every API_AUDIT_POLL_MS by a thread and
 * before each GET /v1/audit.
 */
#define API_AUDIT_POLL_MS 2000
/* Records one of airlockd's own events (actor: ctx->key_id). */
void api_audit_record(struct api_ctx *ctx, const char *action, const char *tenant_id, const char *sandbox_id,
                      const char *secret);
/* GET /v1/audit?sandbox=&secret=&limit= (100; at most 1000): newest first,
 * {"events":[...]}; a tenant key sees its tenant's. */
/* Metrics (api-metrics.c, docs/metrics.md): set up (the families, the
 * scrape token CONTROL_DIR/metrics.token); whether a bearer token is the
 * scrape token; an API request answered (route: its pattern); a lifecycle
 * operation finished; GET /metrics. */
int api_metrics_init(const struct daemon_config *config);
bool api_metrics_token_ok(const char *token);
void api_metrics_http(const char *route, const char *method, unsigned status, double seconds);
void api_metrics_operation(const char *verb, bool ok, double seconds);
int api_metrics_get(struct api_ctx *ctx, bool per_sandbox, struct api_reply *ret);
/* GET /v1/sandboxes/{id}/metrics: its VMM's CPU and memory and its disk,
 * now and over the last hour (its node's samples), and the guest's view. */
int api_sandbox_metrics(struct api_ctx *ctx, const char *id, struct api_reply *ret);

/* GET /v1/events (api-events.c): the caller's sandboxes' lifecycle events
 * as Server-Sent Events, after Last-Event-ID or ?after= (else from now). */
int api_events(struct api_ctx *ctx, const char *sandbox_id, const char *after, const char *last_event_id,
               struct api_reply *ret);

int api_audit_get(struct api_ctx *ctx, const char *sandbox, const char *secret, const char *limit_s,
                  struct api_reply *ret);
struct api_audit_poller;
int api_audit_poller_start(const struct daemon_config *config, struct store *store, struct api_audit_poller **ret);
void api_audit_poller_stop(struct api_audit_poller *p);
