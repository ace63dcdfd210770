/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * Schema migrations of the PostgreSQL backend, in order: the same versions
 * as migrations/sqlite.h, each making the same tables, constraints and
 * indexes in PostgreSQL's types (BIGINT for Unix-ms times and sizes, BYTEA
 * for hashes and sealed values, BOOLEAN for flags), so that
 * store_schema_version() gives one number on both backends. Version N is
 * the entry at index N-1. Never edit a migration that has shipped: append a
 * new one, here and in sqlite.h. Each runs inside one transaction together
 * with its schema_migrations row, under the migrations' advisory lock.
 */

static const char *const store_pg_migrations[] = {
        /* 1: sandboxes, sessions, api keys */
        "CREATE TABLE sandboxes (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  template TEXT NOT NULL,\n"
        "  state TEXT NOT NULL,\n"
        "  error TEXT,\n"
        "  metadata TEXT NOT NULL DEFAULT '{}',\n"
        "  env_keys TEXT NOT NULL DEFAULT '[]',\n"
        "  created_at BIGINT NOT NULL,\n"
        "  updated_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE INDEX sandboxes_created ON sandboxes(created_at);\n"
        "CREATE TABLE sessions (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,\n"
        "  cmd TEXT NOT NULL,\n"
        "  pty BOOLEAN NOT NULL DEFAULT FALSE,\n"
        "  token_hash BYTEA NOT NULL CHECK (octet_length(token_hash) = 32),\n"
        "  created_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE INDEX sessions_sandbox ON sessions(sandbox_id);\n"
        "CREATE TABLE api_keys (\n"
        "  name TEXT PRIMARY KEY NOT NULL,\n"
        "  hash BYTEA NOT NULL UNIQUE CHECK (octet_length(hash) = 32),\n"
        "  created_at BIGINT NOT NULL\n"
        ");\n",
        /* 2: lifecycle verbs (idempotency keys are unique overall) */
        "ALTER TABLE sandboxes ADD COLUMN desired_state TEXT;\n"
        "CREATE TABLE operations (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  sandbox_id TEXT NOT NULL,\n"
        "  verb TEXT NOT NULL,\n"
        "  state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed')),\n"
        "  error TEXT,\n"
        "  result TEXT,\n"
        "  idempotency_key TEXT UNIQUE,\n"
        "  created_at BIGINT NOT NULL,\n"
        "  finished_at BIGINT\n"
        ");\n"
        "CREATE INDEX operations_sandbox ON operations(sandbox_id);\n",
        /* 3: disk snapshots, going with their sandbox */
        "CREATE TABLE snapshots (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,\n"
        "  kind TEXT NOT NULL,\n"
        "  size BIGINT NOT NULL DEFAULT 0,\n"
        "  created_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id, created_at);\n",
        /* 4: operations' progress, stage and request hash */
        "ALTER TABLE operations ADD COLUMN progress INTEGER NOT NULL DEFAULT 0\n"
        "  CHECK (progress BETWEEN 0 AND 100);\n"
        "ALTER TABLE operations ADD COLUMN stage TEXT;\n"
        "ALTER TABLE operations ADD COLUMN request_hash TEXT;\n"
        "UPDATE operations SET progress = 100 WHERE state = 'succeeded';\n",
        /* 5: pinned snapshots (every earlier one was taken on demand) and a
         * sandbox's own snapshot policy */
        "ALTER TABLE snapshots ADD COLUMN pinned BOOLEAN NOT NULL DEFAULT TRUE;\n"
        "ALTER TABLE sandboxes ADD COLUMN snapshot_policy TEXT;\n",
        /* 6: idle suspend */
        "ALTER TABLE sandboxes ADD COLUMN idle_timeout_s BIGINT CHECK (idle_timeout_s >= 0);\n",
        /* 7: tenants; keys, sandboxes and operations carry theirs (NULL:
         * the admin's); a tenant with sandboxes cannot be deleted */
        "CREATE TABLE tenants (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  name TEXT NOT NULL UNIQUE,\n"
        "  created_at BIGINT NOT NULL\n"
        ");\n"
        "ALTER TABLE api_keys ADD COLUMN id TEXT;\n"
        "ALTER TABLE api_keys ADD COLUMN tenant_id TEXT REFERENCES tenants(id) ON DELETE CASCADE;\n"
        "ALTER TABLE api_keys ADD COLUMN label TEXT;\n"
        "UPDATE api_keys SET id = 'key-' || left(replace(gen_random_uuid()::text, '-', ''), 16);\n"
        "CREATE UNIQUE INDEX api_keys_id ON api_keys(id);\n"
        "CREATE INDEX api_keys_tenant ON api_keys(tenant_id);\n"
        "ALTER TABLE sandboxes ADD COLUMN tenant_id TEXT REFERENCES tenants(id);\n"
        "CREATE INDEX sandboxes_tenant ON sandboxes(tenant_id, created_at);\n"
        "ALTER TABLE operations ADD COLUMN tenant_id TEXT;\n",
        /* 8: egress policies, a sandbox's and a tenant's default */
        "ALTER TABLE sandboxes ADD COLUMN network TEXT;\n"
        "ALTER TABLE tenants ADD COLUMN network TEXT;\n",
        /* 9: credentials, their attachments to sandboxes, and the audit
         * log with where reading each gateway stopped */
        "CREATE TABLE secrets (\n"
        "  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n"
        "  tenant_id TEXT REFERENCES tenants(id) ON DELETE CASCADE,\n"
        "  name TEXT NOT NULL,\n"
        "  sandbox_id TEXT,\n"
        "  spec TEXT NOT NULL,\n"
        "  expires_at BIGINT NOT NULL DEFAULT 0,\n"
        "  sealed BYTEA NOT NULL,\n"
        "  created_at BIGINT NOT NULL,\n"
        "  created_by TEXT\n"
        ");\n"
        "CREATE UNIQUE INDEX secrets_scope_name ON secrets((COALESCE(tenant_id, '')), name);\n"
        "CREATE TABLE sandbox_secrets (\n"
        "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,\n"
        "  secret_id BIGINT NOT NULL REFERENCES secrets(id) ON DELETE CASCADE,\n"
        "  name TEXT NOT NULL,\n"
        "  placeholder TEXT NOT NULL,\n"
        "  env_name TEXT NOT NULL,\n"
        "  PRIMARY KEY (sandbox_id, name)\n"
        ");\n"
        "CREATE INDEX sandbox_secrets_secret ON sandbox_secrets(secret_id);\n"
        "CREATE TABLE audit_events (\n"
        "  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n"
        "  ts_ms BIGINT NOT NULL,\n"
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
        "  seq BIGINT\n"
        ");\n"
        "CREATE UNIQUE INDEX audit_events_source ON audit_events(source, boot_id, seq);\n"
        "CREATE INDEX audit_events_tenant ON audit_events(tenant_id, id);\n"
        "CREATE TABLE audit_cursors (\n"
        "  source TEXT PRIMARY KEY NOT NULL,\n"
        "  boot_id TEXT NOT NULL,\n"
        "  seq BIGINT NOT NULL\n"
        ");\n",
        /* 10: a sandbox's lifetime */
        "ALTER TABLE sandboxes ADD COLUMN expires_at BIGINT;\n"
        "ALTER TABLE sandboxes ADD COLUMN expiry_s BIGINT CHECK (expiry_s > 0);\n"
        "ALTER TABLE sandboxes ADD COLUMN on_expiry TEXT CHECK (on_expiry IN ('delete', 'suspend'));\n",
        /* 11: images, outliving their sandbox (sandbox_id is no reference) */
        "CREATE TABLE images (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  tenant_id TEXT REFERENCES tenants(id),\n"
        "  name TEXT,\n"
        "  sandbox_id TEXT NOT NULL,\n"
        "  template TEXT NOT NULL,\n"
        "  size BIGINT NOT NULL DEFAULT 0,\n"
        "  created_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE UNIQUE INDEX images_name ON images((COALESCE(tenant_id, '')), name) WHERE name IS NOT NULL;\n"
        "CREATE INDEX images_scope ON images(tenant_id, created_at);\n",
        /* 12: a cluster: nodes, join tokens, the CA, capability keys,
         * replicas; the node of a sandbox, the owner and lease of an
         * operation */
        "CREATE TABLE nodes (\n"
        "  name TEXT PRIMARY KEY NOT NULL,\n"
        "  address TEXT NOT NULL,\n"
        "  boot_id TEXT,\n"
        "  info TEXT NOT NULL DEFAULT '{}',\n"
        "  draining BOOLEAN NOT NULL DEFAULT FALSE,\n"
        "  lost_at BIGINT,\n"
        "  joined_at BIGINT NOT NULL,\n"
        "  heartbeat_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE INDEX nodes_heartbeat ON nodes(heartbeat_at);\n"
        "CREATE TABLE join_tokens (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  hash BYTEA NOT NULL CHECK (octet_length(hash) = 32),\n"
        "  created_at BIGINT NOT NULL,\n"
        "  expires_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE TABLE cluster_ca (\n"
        "  id INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),\n"
        "  cert TEXT NOT NULL,\n"
        "  key TEXT NOT NULL,\n"
        "  created_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE TABLE cap_keys (\n"
        "  kid TEXT PRIMARY KEY NOT NULL,\n"
        "  public_key TEXT NOT NULL,\n"
        "  replica TEXT,\n"
        "  created_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE TABLE replicas (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  cluster_address TEXT,\n"
        "  api_address TEXT,\n"
        "  started_at BIGINT NOT NULL,\n"
        "  seen_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE INDEX replicas_seen ON replicas(seen_at);\n"
        "ALTER TABLE sandboxes ADD COLUMN node TEXT REFERENCES nodes(name);\n"
        "CREATE INDEX sandboxes_node ON sandboxes(node, created_at);\n"
        "ALTER TABLE operations ADD COLUMN owner TEXT;\n"
        "ALTER TABLE operations ADD COLUMN lease_until BIGINT;\n"
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
        "  id BIGSERIAL PRIMARY KEY,\n"
        "  ts_ms BIGINT NOT NULL,\n"
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
        /* 17: templates built from specs: an owner's name for a node
         * template named by its content (tenant_id NULL: the admin's;
         * node NULL: the local node) */
        "CREATE TABLE templates (\n"
        "  tenant_id TEXT REFERENCES tenants(id) ON DELETE CASCADE,\n"
        "  name TEXT NOT NULL,\n"
        "  node_name TEXT NOT NULL,\n"
        "  build_id TEXT NOT NULL,\n"
        "  state TEXT NOT NULL CHECK (state IN ('building', 'ready', 'failed')),\n"
        "  error TEXT,\n"
        "  node TEXT,\n"
        "  spec TEXT NOT NULL,\n"
        "  memory_mib BIGINT NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),\n"
        "  vcpus BIGINT NOT NULL DEFAULT 0 CHECK (vcpus >= 0),\n"
        "  created_at BIGINT NOT NULL,\n"
        "  updated_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE UNIQUE INDEX templates_name ON templates((COALESCE(tenant_id, '')), name);\n"
        "CREATE INDEX templates_node_name ON templates(node_name);\n",
        /* 18: volumes (docs/volumes.md): an owner's named, sized disks
         * (tenant_id NULL: the admin's; they go with their tenant) and the
         * sandboxes' holds on them (they go with their sandbox; a held
         * volume stays); one read-write holder at most */
        "CREATE TABLE volumes (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  tenant_id TEXT REFERENCES tenants(id),\n"
        "  name TEXT NOT NULL,\n"
        "  size BIGINT NOT NULL CHECK (size > 0),\n"
        "  node TEXT,\n"
        "  source_id TEXT,\n"
        "  created_at BIGINT NOT NULL\n"
        ");\n"
        "CREATE UNIQUE INDEX volumes_name ON volumes((COALESCE(tenant_id, '')), name);\n"
        "CREATE TABLE sandbox_volumes (\n"
        "  sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,\n"
        "  volume_id TEXT NOT NULL REFERENCES volumes(id),\n"
        "  slot INTEGER NOT NULL CHECK (slot >= 0 AND slot < 4),\n"
        "  path TEXT NOT NULL,\n"
        "  read_only BOOLEAN NOT NULL,\n"
        "  PRIMARY KEY (sandbox_id, slot)\n"
        ");\n"
        "CREATE INDEX sandbox_volumes_volume ON sandbox_volumes(volume_id);\n"
        "CREATE UNIQUE INDEX sandbox_volumes_rw ON sandbox_volumes(volume_id) WHERE NOT read_only;\n",
        /* 19: webhooks: an owner's endpoints for lifecycle events
         * (tenant_id NULL: the admin's; they go with their tenant), how far
         * each got through sandbox_events (cursor, no reference) and its
         * retries; their recent deliveries (they go with it); an event's
         * detail (JSON object text, or NULL) */
        "CREATE TABLE webhooks (\n"
        "  id TEXT PRIMARY KEY NOT NULL,\n"
        "  tenant_id TEXT REFERENCES tenants(id) ON DELETE CASCADE,\n"
        "  url TEXT NOT NULL,\n"
        "  events TEXT NOT NULL,\n"
        "  secret TEXT NOT NULL,\n"
        "  created_at BIGINT NOT NULL,\n"
        "  cursor BIGINT NOT NULL DEFAULT 0,\n"
        "  attempts INTEGER NOT NULL DEFAULT 0,\n"
        "  next_at BIGINT NOT NULL DEFAULT 0,\n"
        "  last_error TEXT,\n"
        "  delivered BIGINT NOT NULL DEFAULT 0,\n"
        "  failed BIGINT NOT NULL DEFAULT 0\n"
        ");\n"
        "CREATE INDEX webhooks_tenant ON webhooks(tenant_id);\n"
        "CREATE TABLE webhook_deliveries (\n"
        "  id BIGSERIAL PRIMARY KEY,\n"
        "  webhook_id TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,\n"
        "  event_id BIGINT NOT NULL,\n"
        "  event_type TEXT NOT NULL,\n"
        "  sandbox_id TEXT,\n"
        "  ts_ms BIGINT NOT NULL,\n"
        "  attempt INTEGER NOT NULL,\n"
        "  status INTEGER NOT NULL,\n"
        "  error TEXT,\n"
        "  duration_ms BIGINT NOT NULL\n"
        ");\n"
        "CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries(webhook_id, id);\n"
        "ALTER TABLE sandbox_events ADD COLUMN detail TEXT;\n",
};
