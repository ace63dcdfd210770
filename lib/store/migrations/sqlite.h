/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Schema migrations of the SQLite backend, in order. Version N is the entry
 * at index N-1. Never edit a migration that has shipped: append a new one.
 * Each runs inside one transaction together with its schema_migrations row.
 */

static const char *const store_sqlite_migrations[] = {
        /* 1: sandboxes, sessions, api keys */
        "CREATE TABLE sandboxes (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  template TEXT NOT NULL,\n"
        "  state TEXT NOT NULL,\n"
        "  error TEXT,\n"
        "  metadata TEXT NOT NULL DEFAULT '{}',\n"
        "  env_keys TEXT NOT NULL DEFAULT '[]',\n"
        "  created_at INTEGER NOT NULL,\n"
        "  updated_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE INDEX sandboxes_created ON sandboxes(created_at);\n"
        "CREATE TABLE sessions (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,\n"
        "  cmd TEXT NOT NULL,\n"
        "  pty INTEGER NOT NULL DEFAULT 0,\n"
        "  token_hash BLOB NOT NULL CHECK (length(token_hash) = 32),\n"
        "  created_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE INDEX sessions_sandbox ON sessions(sandbox_id);\n"
        "CREATE TABLE api_keys (\n"
        "  name TEXT PRIMARY KEY NOT NULL,\n"
        "  hash BLOB NOT NULL UNIQUE CHECK (length(hash) = 32),\n"
        "  created_at INTEGER NOT NULL\n"
        ");\n",
        /* 2: lifecycle verbs: the desired state of a sandbox and the
         * operations that move it (idempotency keys are unique overall: a
         * key names one operation, whatever sandbox or verb) */
        "ALTER TABLE sandboxes ADD COLUMN desired_state TEXT;\n"
        "CREATE TABLE operations (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  sandbox_id TEXT NOT NULL,\n"
        "  verb TEXT NOT NULL,\n"
        "  state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed')),\n"
        "  error TEXT,\n"
        "  result TEXT,\n"
        "  idempotency_key TEXT UNIQUE,\n"
        "  created_at INTEGER NOT NULL,\n"
        "  finished_at INTEGER\n"
        ");\n"
        "CREATE INDEX operations_sandbox ON operations(sandbox_id);\n",
        /* 3: disk snapshots; the images live in the sandbox's directory on
         * the node, so the rows go with the sandbox */
        "CREATE TABLE snapshots (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,\n"
        "  kind TEXT NOT NULL,\n"
        "  size INTEGER NOT NULL DEFAULT 0,\n"
        "  created_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id, created_at);\n",
        /* 4: operations report how far they got (progress 0-100 and the
         * step they are in) and remember a hash of the request that made
         * them, so an Idempotency-Key reused for another request is told
         * apart from a retry; operations that succeeded before are done */
        "ALTER TABLE operations ADD COLUMN progress INTEGER NOT NULL DEFAULT 0\n"
        "  CHECK (progress BETWEEN 0 AND 100);\n"
        "ALTER TABLE operations ADD COLUMN stage TEXT;\n"
        "ALTER TABLE operations ADD COLUMN request_hash TEXT;\n"
        "UPDATE operations SET progress = 100 WHERE state = 'succeeded';\n",
        /* 5: the snapshot scheduler: a snapshot is pinned when a user took
         * it (retention never deletes it; every snapshot before this was
         * taken on demand), and a sandbox may carry its own snapshot
         * policy (JSON over the global one; NULL: the global one) */
        "ALTER TABLE snapshots ADD COLUMN pinned INTEGER NOT NULL DEFAULT 1 CHECK (pinned IN (0, 1));\n"
        "ALTER TABLE sandboxes ADD COLUMN snapshot_policy TEXT;\n",
        /* 6: idle suspend: seconds without activity after which a sandbox
         * is suspended (0: never; NULL: the global default) */
        "ALTER TABLE sandboxes ADD COLUMN idle_timeout_s INTEGER CHECK (idle_timeout_s >= 0);\n",
        /* 7: tenants. A key is admin-scoped (tenant_id NULL: the admin
         * token) or belongs to one tenant, and goes with it; user-made keys
         * are named by their id, "label" is the name they were given.
         * Sandboxes and operations carry their tenant (NULL: admin-owned,
         * which every sandbox made before tenants is); a tenant with
         * sandboxes cannot be deleted (no cascade). */
        "CREATE TABLE tenants (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  name TEXT NOT NULL UNIQUE,\n"
        "  created_at INTEGER NOT NULL\n"
        ");\n"
        "ALTER TABLE api_keys ADD COLUMN id TEXT;\n"
        "ALTER TABLE api_keys ADD COLUMN tenant_id TEXT REFERENCES tenants(id) ON DELETE CASCADE;\n"
        "ALTER TABLE api_keys ADD COLUMN label TEXT;\n"
        "UPDATE api_keys SET id = 'key-' || lower(hex(randomblob(8)));\n"
        "CREATE UNIQUE INDEX api_keys_id ON api_keys(id);\n"
        "CREATE INDEX api_keys_tenant ON api_keys(tenant_id);\n"
        "ALTER TABLE sandboxes ADD COLUMN tenant_id TEXT REFERENCES tenants(id);\n"
        "CREATE INDEX sandboxes_tenant ON sandboxes(tenant_id, created_at);\n"
        "ALTER TABLE operations ADD COLUMN tenant_id TEXT;\n",
        /* 8: egress policies (lib/netpolicy, canonical JSON text): a
         * sandbox's own, resolved when it was made (NULL: made before
         * policies, it gets the node default), and a tenant's default for
         * the sandboxes it makes later (NULL: the node default) */
        "ALTER TABLE sandboxes ADD COLUMN network TEXT;\n"
        "ALTER TABLE tenants ADD COLUMN network TEXT;\n",
        /* 9: credentials (lib/credstore seals the values; the AEAD binds
         * each to its tenant and name), their attachments to sandboxes
         * (the placeholder the guest sees; a fork child may share its
         * parent's), and the audit log: the control plane's own events
         * and those read from gateways (source, boot_id, seq: read once),
         * with where reading each gateway stopped. The admin scope is
         * tenant_id NULL, hence the COALESCE in the unique index. */
        "CREATE TABLE secrets (\n"
        "  id INTEGER PRIMARY KEY,\n"
        "  tenant_id TEXT REFERENCES tenants(id) ON DELETE CASCADE,\n"
        "  name TEXT NOT NULL,\n"
        "  sandbox_id TEXT,\n"
        "  spec TEXT NOT NULL,\n"
        "  expires_at INTEGER NOT NULL DEFAULT 0,\n"
        "  sealed BLOB NOT NULL,\n"
        "  created_at INTEGER NOT NULL,\n"
        "  created_by TEXT\n"
        ");\n"
        "CREATE UNIQUE INDEX secrets_scope_name ON secrets(COALESCE(tenant_id, ''), name);\n"
        "CREATE TABLE sandbox_secrets (\n"
        "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,\n"
        "  secret_id INTEGER NOT NULL REFERENCES secrets(id) ON DELETE CASCADE,\n"
        "  name TEXT NOT NULL,\n"
        "  placeholder TEXT NOT NULL,\n"
        "  env_name TEXT NOT NULL,\n"
        "  PRIMARY KEY (sandbox_id, name)\n"
        ");\n"
        "CREATE INDEX sandbox_secrets_secret ON sandbox_secrets(secret_id);\n"
        "CREATE TABLE audit_events (\n"
        "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
        "  ts_ms INTEGER NOT NULL,\n"
        "  tenant_id TEXT,\n"
        "  actor TEXT NOT NULL,\n"
        "  sandbox_id TEXT,\n"
        "  secret TEXT,\n"
        "  host TEXT,\n"
        "  port INTEGER,\n"
        "  method TEXT,\n"
        "  path TEXT,\n"
        "  action TEXT NOT NULL,\n"
        "  reason TEXT,\n"
        "  source TEXT,\n"
        "  boot_id TEXT,\n"
        "  seq INTEGER\n"
        ");\n"
        "CREATE UNIQUE INDEX audit_events_source ON audit_events(source, boot_id, seq);\n"
        "CREATE INDEX audit_events_tenant ON audit_events(tenant_id, id);\n"
        "CREATE TABLE audit_cursors (\n"
        "  source TEXT PRIMARY KEY NOT NULL,\n"
        "  boot_id TEXT NOT NULL,\n"
        "  seq INTEGER NOT NULL\n"
        ");\n",
        /* 10: a sandbox's lifetime: when it ends (Unix ms; NULL: never),
         * how (deleted, or suspended), and the timeout it was given, so
         * that a wake can give it again */
        "ALTER TABLE sandboxes ADD COLUMN expires_at INTEGER;\n"
        "ALTER TABLE sandboxes ADD COLUMN expiry_s INTEGER CHECK (expiry_s > 0);\n"
        "ALTER TABLE sandboxes ADD COLUMN on_expiry TEXT CHECK (on_expiry IN ('delete', 'suspend'));\n",
        /* 11: images, full snapshots published to the object store that
         * outlive their sandbox (sandbox_id is no reference: it may go) */
        "CREATE TABLE images (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  tenant_id TEXT REFERENCES tenants(id),\n"
        "  name TEXT,\n"
        "  sandbox_id TEXT NOT NULL,\n"
        "  template TEXT NOT NULL,\n"
        "  size INTEGER NOT NULL DEFAULT 0,\n"
        "  created_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE UNIQUE INDEX images_name ON images(COALESCE(tenant_id, ''), name) WHERE name IS NOT NULL;\n"
        "CREATE INDEX images_scope ON images(tenant_id, created_at);\n",
        /* 12: a cluster (docs/cluster.md): the worker nodes that joined
         * (lost_at: found silent, NULL while not), join tokens (the SHA-256
         * of their secret), the cluster's CA (one row), the replicas'
         * capability public keys and the replicas themselves. A sandbox
         * names the node it runs on (NULL: the control plane's local one,
         * every sandbox made before); a node named by a sandbox stays. An
         * unfinished operation has an owner (a replica) and a lease it
         * renews; once the lease ran out another replica may take it over */
        "CREATE TABLE nodes (\n"
        "  name TEXT PRIMARY KEY NOT NULL,\n"
        "  address TEXT NOT NULL,\n"
        "  boot_id TEXT,\n"
        "  info TEXT NOT NULL DEFAULT '{}',\n"
        "  draining INTEGER NOT NULL DEFAULT 0 CHECK (draining IN (0, 1)),\n"
        "  lost_at INTEGER,\n"
        "  joined_at INTEGER NOT NULL,\n"
        "  heartbeat_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE INDEX nodes_heartbeat ON nodes(heartbeat_at);\n"
        "CREATE TABLE join_tokens (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  hash BLOB NOT NULL CHECK (length(hash) = 32),\n"
        "  created_at INTEGER NOT NULL,\n"
        "  expires_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE TABLE cluster_ca (\n"
        "  id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),\n"
        "  cert TEXT NOT NULL,\n"
        "  key TEXT NOT NULL,\n"
        "  created_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE TABLE cap_keys (\n"
        "  kid TEXT PRIMARY KEY NOT NULL,\n"
        "  public_key TEXT NOT NULL,\n"
        "  replica TEXT,\n"
        "  created_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE TABLE replicas (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  cluster_address TEXT,\n"
        "  api_address TEXT,\n"
        "  started_at INTEGER NOT NULL,\n"
        "  seen_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE INDEX replicas_seen ON replicas(seen_at);\n"
        "ALTER TABLE sandboxes ADD COLUMN node TEXT REFERENCES nodes(name);\n"
        "CREATE INDEX sandboxes_node ON sandboxes(node, created_at);\n"
        "ALTER TABLE operations ADD COLUMN owner TEXT;\n"
        "ALTER TABLE operations ADD COLUMN lease_until INTEGER;\n"
        "CREATE INDEX operations_lease ON operations(lease_until) WHERE state IN ('pending', 'running');\n"
        "CREATE INDEX operations_owner ON operations(owner) WHERE state IN ('pending', 'running');\n",
        /* 13: what a replica needs to settle an operation its carrier left:
         * a fork's child, a delete's keep_snapshots (JSON object text) */
        "ALTER TABLE operations ADD COLUMN detail TEXT;\n",
        /* 14: images exported from a kept snapshot: which one, and whether
         * it holds memory (full: resumes) or the disk only (disk: boots) */
        "ALTER TABLE images ADD COLUMN kind TEXT NOT NULL DEFAULT 'full' CHECK (kind IN ('full', 'disk'));\n"
        "ALTER TABLE images ADD COLUMN snapshot_id TEXT;\n",
        /* 15: sandboxes' lifecycle events (GET /v1/events), kept an hour */
        "CREATE TABLE sandbox_events (\n"
        "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
        "  ts_ms INTEGER NOT NULL,\n"
        "  tenant_id TEXT,\n"
        "  sandbox_id TEXT NOT NULL,\n"
        "  type TEXT NOT NULL,\n"
        "  state TEXT,\n"
        "  previous TEXT\n"
        ");\n"
        "CREATE INDEX sandbox_events_ts ON sandbox_events(ts_ms);\n",
        /* 16: a sandbox's own size within its template's (NULL: the template's) */
        "ALTER TABLE sandboxes ADD COLUMN memory_mib INTEGER;\n"
        "ALTER TABLE sandboxes ADD COLUMN vcpus INTEGER;\n",
        /* 17: templates built from specs: an owner's name (tenant_id NULL:
         * the admin's; they go with their tenant) for a node template named
         * by its content (node_name, no reference: several rows may name
         * one), the latest build of it and the node that built it (NULL:
         * the local node) */
        "CREATE TABLE templates (\n"
        "  tenant_id TEXT REFERENCES tenants(id) ON DELETE CASCADE,\n"
        "  name TEXT NOT NULL,\n"
        "  node_name TEXT NOT NULL,\n"
        "  build_id TEXT NOT NULL,\n"
        "  state TEXT NOT NULL CHECK (state IN ('building', 'ready', 'failed')),\n"
        "  error TEXT,\n"
        "  node TEXT,\n"
        "  spec TEXT NOT NULL,\n"
        "  memory_mib INTEGER NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),\n"
        "  vcpus INTEGER NOT NULL DEFAULT 0 CHECK (vcpus >= 0),\n"
        "  created_at INTEGER NOT NULL,\n"
        "  updated_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE UNIQUE INDEX templates_name ON templates(COALESCE(tenant_id, ''), name);\n"
        "CREATE INDEX templates_node_name ON templates(node_name);\n",
        /* 18: volumes (docs/volumes.md): an owner's named, sized persistent
         * disks (tenant_id NULL: the admin's; a tenant with volumes stays),
         * kept in the store of one node (NULL: the local node), perhaps a
         * snapshot of another (source_id, no reference: it may go), and
         * the sandboxes' holds on them: a slot (0..3) and a mount path;
         * holds go with their sandbox, a held volume cannot be deleted (no
         * cascade), and the database keeps a volume to one read-write
         * holder (the partial unique index) */
        "CREATE TABLE volumes (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  tenant_id TEXT REFERENCES tenants(id),\n"
        "  name TEXT NOT NULL,\n"
        "  size INTEGER NOT NULL CHECK (size > 0),\n"
        "  node TEXT,\n"
        "  source_id TEXT,\n"
        "  created_at INTEGER NOT NULL\n"
        ");\n"
        "CREATE UNIQUE INDEX volumes_name ON volumes(COALESCE(tenant_id, ''), name);\n"
        "CREATE TABLE sandbox_volumes (\n"
        "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,\n"
        "  volume_id TEXT NOT NULL REFERENCES volumes(id),\n"
        "  slot INTEGER NOT NULL CHECK (slot >= 0 AND slot < 4),\n"
        "  path TEXT NOT NULL,\n"
        "  read_only INTEGER NOT NULL CHECK (read_only IN (0, 1)),\n"
        "  PRIMARY KEY (sandbox_id, slot)\n"
        ");\n"
        "CREATE INDEX sandbox_volumes_volume ON sandbox_volumes(volume_id);\n"
        "CREATE UNIQUE INDEX sandbox_volumes_rw ON sandbox_volumes(volume_id) WHERE read_only = 0;\n",
        /* 19: webhooks: an owner's endpoints for lifecycle events
         * (tenant_id NULL: the admin's; they go with their tenant), each
         * with how far it got through sandbox_events (cursor: the last
         * event id it handled; no reference, events are pruned), the failed
         * tries at the next one and when to try again; their recent
         * deliveries (pruned to the newest few hundred a webhook; they go
         * with it); and an event's detail (JSON object text, NULL for a
         * plain change of state) */
        "CREATE TABLE webhooks (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  tenant_id TEXT REFERENCES tenants(id) ON DELETE CASCADE,\n"
        "  url TEXT NOT NULL,\n"
        "  events TEXT NOT NULL,\n"
        "  secret TEXT NOT NULL,\n"
        "  created_at INTEGER NOT NULL,\n"
        "  cursor INTEGER NOT NULL DEFAULT 0,\n"
        "  attempts INTEGER NOT NULL DEFAULT 0,\n"
        "  next_at INTEGER NOT NULL DEFAULT 0,\n"
        "  last_error TEXT,\n"
        "  delivered INTEGER NOT NULL DEFAULT 0,\n"
        "  failed INTEGER NOT NULL DEFAULT 0\n"
        ");\n"
        "CREATE INDEX webhooks_tenant ON webhooks(tenant_id);\n"
        "CREATE TABLE webhook_deliveries (\n"
        "  id INTEGER PRIMARY KEY AUTOINCREMENT,\n"
        "  webhook_id TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,\n"
        "  event_id INTEGER NOT NULL,\n"
        "  event_type TEXT NOT NULL,\n"
        "  sandbox_id TEXT,\n"
        "  ts_ms INTEGER NOT NULL,\n"
        "  attempt INTEGER NOT NULL,\n"
        "  status INTEGER NOT NULL,\n"
        "  error TEXT,\n"
        "  duration_ms INTEGER NOT NULL\n"
        ");\n"
        "CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries(webhook_id, id);\n"
        "ALTER TABLE sandbox_events ADD COLUMN detail TEXT;\n",
};
