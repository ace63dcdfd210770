// Airlock's web console (docs/console.md): one page, no build step. It logs
// in with an API key (kept in this tab's sessionStorage only) and calls the
// public API with it, as any client does: everything it shows, a tenant key
// sees of its own tenant and the admin token of all. Every value from the
// API reaches the page as text (textContent), never as markup.

const main = document.getElementById("main");
const KEY = "airlock.key";
let admin = false;
let leaving = []; // what the current page runs (streams, timers): stopped on navigation
let notice = null; // shown once on the next page (a new key)

// ---- the API ----

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function key() {
  return sessionStorage.getItem(KEY);
}

async function api(method, path, body, extra = {}) {
  const headers = { Authorization: `Bearer ${key()}` };
  let payload = body;
  if (body !== undefined && !(body instanceof Blob) && !(body instanceof ArrayBuffer)) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const resp = await fetch(path, { method, headers, body: payload, signal: extra.signal });
  if (extra.raw && resp.ok) return resp;
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch (e) {
    data = null;
  }
  if (!resp.ok) {
    const err = (data && data.error) || {};
    if (resp.status === 401 && !extra.login) logout("The key was refused: log in again.");
    throw new ApiError(resp.status, err.code || "error", err.message || `HTTP ${resp.status}`);
  }
  return data;
}

// Server-Sent Events over fetch (EventSource cannot send the key).
async function events(path, onEvent, signal) {
  const resp = await fetch(path, {
    headers: { Authorization: `Bearer ${key()}`, Accept: "text/event-stream" },
    signal,
  });
  if (!resp.ok) {
    let msg = `HTTP ${resp.status}`;
    try {
      msg = (await resp.json()).error.message;
    } catch (e) {
      /* keep the status */
    }
    throw new ApiError(resp.status, "error", msg);
  }
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let event = "message";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (data.length) {
          let parsed = null;
          try {
            parsed = JSON.parse(data.join("\n"));
          } catch (e) {
            parsed = null;
          }
          if (onEvent(event, parsed) === false) return;
        }
        event = "message";
        data = [];
      } else if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
  }
}

// ---- the page ----

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

function toast(message, error = false) {
  const t = el("div", { class: error ? "error" : "", "data-testid": error ? "toast-error" : "toast" }, message);
  document.getElementById("toast").append(t);
  setTimeout(() => t.remove(), error ? 8000 : 4000);
}

function state(s) {
  return el("span", { class: `state ${s}`, "data-testid": "state" }, s);
}

function age(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) {
    n /= 1024;
    u++;
  }
  return `${u ? n.toFixed(1) : n} ${units[u]}`;
}

// rows: an array of <tr>, or a <tbody> the page fills later
function table(headers, rows, testid) {
  return el(
    "table",
    { "data-testid": testid },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    rows instanceof HTMLTableSectionElement ? rows : el("tbody", {}, rows),
  );
}

function page(title, ...children) {
  main.replaceChildren(el("h1", {}, title), ...children.filter((c) => c));
}

function failed(e) {
  toast(e.message, true);
}

// ---- login ----

async function login(k) {
  sessionStorage.setItem(KEY, k);
  try {
    await api("GET", "/v1/sandboxes", undefined, { login: true });
  } catch (e) {
    sessionStorage.removeItem(KEY);
    throw e;
  }
  await whoami();
}

async function whoami() {
  try {
    await api("GET", "/v1/tenants", undefined, { login: true });
    admin = true;
  } catch (e) {
    admin = false; // a tenant key: 403
  }
  document.getElementById("nav").hidden = false;
  for (const a of document.querySelectorAll(".admin-only")) a.hidden = !admin;
}

function logout(why) {
  sessionStorage.removeItem(KEY);
  document.getElementById("nav").hidden = true;
  location.hash = "#/login";
  if (why) toast(why, true);
}

function viewLogin() {
  const input = el("input", { type: "password", id: "key", "data-testid": "key", autocomplete: "off",
    placeholder: "alk_… or the admin token" });
  const form = el(
    "form",
    { class: "card login", "data-testid": "login" },
    el("h1", {}, "Log in"),
    el("p", { class: "muted" }, "An API key of a tenant, or the admin token (DATA_DIR/control/admin.token)."),
    input,
    el("button", { class: "primary", type: "submit", "data-testid": "login-submit" }, "Log in"),
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      await login(input.value.trim());
      location.hash = "#/sandboxes";
    } catch (e) {
      toast(e.status === 401 ? "That key is not valid." : e.message, true);
    }
  });
  main.replaceChildren(form);
  input.focus();
}

// ---- sandboxes ----

async function viewSandboxes() {
  const templates = ((await api("GET", "/v1/templates")).templates || []).filter((t) => t.state !== "failed");
  const pick = el("select", { "data-testid": "create-template" },
    templates.map((t) => el("option", { value: t.name }, t.name)));
  const create = el("button", { class: "primary", "data-testid": "create", type: "button" }, "Create sandbox");
  create.addEventListener("click", async () => {
    create.disabled = true;
    try {
      const s = await api("POST", "/v1/sandboxes", { template: pick.value });
      location.hash = `#/sandboxes/${s.id}`;
    } catch (e) {
      failed(e);
    } finally {
      create.disabled = false;
    }
  });
  const body = el("tbody");
  page("Sandboxes", el("div", { class: "row" }, pick, create),
    table(["ID", "State", "Template", "Node", "Age", "Memory", "CPU"], body, "sandboxes"));
  const refresh = async () => {
    const list = (await api("GET", "/v1/sandboxes")).sandboxes || [];
    const rows = list.map((s) => {
      const mem = el("td", {}), cpu = el("td", {});
      if (s.state === "running" || s.state === "paused")
        api("GET", `/v1/sandboxes/${s.id}/metrics`).then((m) => {
          if (m.now) {
            mem.textContent = bytes(m.now.memory_bytes);
            cpu.textContent = m.now.cpu_pct === null || m.now.cpu_pct === undefined ? "" : `${m.now.cpu_pct.toFixed(1)} %`;
          }
        }).catch(() => {});
      return el("tr", { "data-testid": "sandbox-row" },
        el("td", { class: "mono" }, el("a", { href: `#/sandboxes/${s.id}` }, s.id)),
        el("td", {}, state(s.state)), el("td", {}, s.template), el("td", {}, s.node || ""),
        el("td", { title: s.created_at }, age(s.created_at)), mem, cpu);
    });
    body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No sandboxes yet."))]));
  };
  await refresh();
  const timer = setInterval(() => refresh().catch(() => {}), 5000);
  leaving.push(() => clearInterval(timer));
}

const VERBS = [
  ["pause", "Pause"], ["resume", "Resume"], ["stop", "Stop"], ["start", "Start"],
  ["suspend", "Suspend"], ["wake", "Wake"], ["fork", "Fork"],
];

async function viewSandbox(id) {
  const s = await api("GET", `/v1/sandboxes/${id}`);
  const ops = el("ul", { "data-testid": "operations" });
  const fields = el("dl", { class: "fields", "data-testid": "details" });
  const usage = el("dl", { class: "fields", "data-testid": "usage" });
  const fill = (x) => {
    const rows = [["Template", x.template], ["State", state(x.state)], ["Node", x.node], ["Created", x.created_at],
      ["Tenant", x.tenant_id || "(admin)"], ["Memory", x.memory_mib ? `${x.memory_mib} MiB` : "the template's"],
      ["vCPUs", x.vcpus || "the template's"]];
    if (x.error) rows.push(["Error", x.error]);
    fields.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  };
  fill(s);
  const reload = async () => {
    const x = await api("GET", `/v1/sandboxes/${id}`);
    fill(x);
    try {
      const m = await api("GET", `/v1/sandboxes/${id}/metrics`);
      const n = m.now || {};
      usage.replaceChildren(el("dt", {}, "CPU"), el("dd", {}, n.cpu_pct !== undefined ? `${n.cpu_pct.toFixed(1)} %` : "–"),
        el("dt", {}, "Memory"), el("dd", {}, n.memory_bytes !== undefined ? bytes(n.memory_bytes) : "–"),
        el("dt", {}, "Disk"), el("dd", {}, n.disk_bytes !== undefined ? bytes(n.disk_bytes) : "–"));
    } catch (e) {
      usage.replaceChildren(el("dt", {}, "Usage"), el("dd", { class: "muted" }, e.message));
    }
    return x;
  };
  const verb = async (name, button) => {
    button.disabled = true;
    try {
      const op = await api("POST", `/v1/sandboxes/${id}/${name}?wait=true`, {});
      const child = op.result && op.result.sandbox ? op.result.sandbox.id : null;
      const what = child ? ` → ${child}` : "";
      ops.prepend(el("li", { "data-testid": "operation" }, `${name}: ${op.state} (${op.id})${what}`,
        op.error ? ` — ${op.error.message}` : ""));
      if (child) ops.prepend(el("li", {}, el("a", { href: `#/sandboxes/${child}` }, `open ${child}`)));
      await reload();
    } catch (e) {
      ops.prepend(el("li", { "data-testid": "operation" }, `${name}: ${e.message}`));
      failed(e);
    } finally {
      button.disabled = false;
    }
  };
  const buttons = VERBS.map(([name, label]) => {
    const b = el("button", { type: "button", "data-testid": `verb-${name}` }, label);
    b.addEventListener("click", () => verb(name, b));
    return b;
  });
  const del = el("button", { type: "button", class: "danger", "data-testid": "verb-delete" }, "Delete");
  del.addEventListener("click", async () => {
    if (!confirm(`Delete ${id}? Its VM and disk go.`)) return;
    try {
      await api("DELETE", `/v1/sandboxes/${id}`);
      toast(`${id} deleted`);
      location.hash = "#/sandboxes";
    } catch (e) {
      failed(e);
    }
  });

  // snapshots
  const snaps = el("tbody");
  const listSnapshots = async () => {
    const list = (await api("GET", `/v1/sandboxes/${id}/snapshots`)).snapshots || [];
    snaps.replaceChildren(...list.map((sn) => {
      const rb = el("button", { type: "button", "data-testid": "rollback" }, "Roll back");
      rb.addEventListener("click", async () => {
        rb.disabled = true;
        try {
          const op = await api("POST", `/v1/sandboxes/${id}/rollback?wait=true`, { snapshot: sn.id });
          ops.prepend(el("li", { "data-testid": "operation" }, `rollback to ${sn.id}: ${op.state} (${op.id})`));
          await reload();
        } catch (e) {
          failed(e);
        } finally {
          rb.disabled = false;
        }
      });
      return el("tr", { "data-testid": "snapshot-row" }, el("td", { class: "mono" }, sn.id), el("td", {}, sn.kind),
        el("td", {}, sn.created_at), el("td", {}, bytes(sn.size)), el("td", {}, rb));
    }));
  };
  const snapshot = (kind) => {
    const b = el("button", { type: "button", "data-testid": `snapshot-${kind}` }, `Snapshot (${kind})`);
    b.addEventListener("click", async () => {
      b.disabled = true;
      try {
        const sn = await api("POST", `/v1/sandboxes/${id}/snapshots`, { kind });
        toast(`snapshot ${sn.id} taken`);
        await listSnapshots();
      } catch (e) {
        failed(e);
      } finally {
        b.disabled = false;
      }
    });
    return b;
  };

  // files
  const path = el("input", { type: "text", value: "/root", "data-testid": "files-path", size: 40 });
  const files = el("tbody");
  const listFiles = async () => {
    const dir = path.value.replace(/\/+$/, "") || "/";
    const data = await api("GET", `/v1/sandboxes/${id}/ls?path=${encodeURIComponent(dir)}`);
    const up = dir === "/" ? [] : [el("tr", {}, el("td", {}, el("a", { href: "#", onclick: (ev) => {
      ev.preventDefault();
      path.value = dir.replace(/\/[^/]*$/, "") || "/";
      listFiles().catch(failed);
    } }, "..")), el("td"), el("td"), el("td"))];
    const rows = (data.entries || []).sort((a, b) => a.name.localeCompare(b.name)).map((f) => {
      const full = `${dir === "/" ? "" : dir}/${f.name}`;
      const name = f.type === "dir"
        ? el("a", { href: "#", onclick: (ev) => {
          ev.preventDefault();
          path.value = full;
          listFiles().catch(failed);
        } }, `${f.name}/`)
        : el("span", {}, f.name);
      const dl = f.type === "file" ? el("button", { type: "button", "data-testid": "download", onclick: async () => {
        try {
          const resp = await api("GET", `/v1/sandboxes/${id}/files?path=${encodeURIComponent(full)}`, undefined, { raw: true });
          const url = URL.createObjectURL(await resp.blob());
          const a = el("a", { href: url, download: f.name });
          document.body.append(a);
          a.click();
          a.remove();
          setTimeout(() => URL.revokeObjectURL(url), 10000);
        } catch (e) {
          failed(e);
        }
      } }, "Download") : "";
      return el("tr", { "data-testid": "file-row" }, el("td", { class: "mono" }, name), el("td", {}, f.type),
        el("td", {}, f.type === "file" ? bytes(f.size) : ""), el("td", {}, dl));
    });
    files.replaceChildren(...up, ...rows);
  };
  const upload = el("input", { type: "file", "data-testid": "upload-file" });
  const send = el("button", { type: "button", "data-testid": "upload" }, "Upload");
  send.addEventListener("click", async () => {
    const f = upload.files[0];
    if (!f) return toast("Choose a file first.", true);
    const dir = path.value.replace(/\/+$/, "");
    try {
      await api("PUT", `/v1/sandboxes/${id}/files?path=${encodeURIComponent(`${dir}/${f.name}`)}`, f);
      toast(`${f.name} uploaded`);
      await listFiles();
    } catch (e) {
      failed(e);
    }
  });

  // terminal
  const termBox = el("div", { id: "terminal", "data-testid": "terminal" });
  const openTerm = el("button", { type: "button", class: "primary", "data-testid": "open-terminal" }, "Open terminal");
  openTerm.addEventListener("click", () => openTerminal(id, termBox, openTerm).catch(failed));

  page(el("span", { class: "mono" }, id), el("div", { class: "card" }, fields, el("h2", {}, "Usage"), usage),
    el("div", { class: "card" }, el("div", { class: "row" }, buttons, del), ops),
    el("div", { class: "card" }, el("h2", {}, "Terminal"), el("div", { class: "row" }, openTerm), termBox),
    el("div", { class: "card" }, el("h2", {}, "Files"),
      el("div", { class: "row" }, path, el("button", { type: "button", "data-testid": "files-list",
        onclick: () => listFiles().catch(failed) }, "List"), upload, send),
      table(["Name", "Type", "Size", ""], files, "files")),
    el("div", { class: "card" }, el("h2", {}, "Snapshots"), el("div", { class: "row" }, snapshot("disk"), snapshot("full")),
      table(["ID", "Kind", "Created", "Size", ""], snaps, "snapshots")));
  await reload();
  if (s.state === "running") {
    listFiles().catch(() => {});
  }
  listSnapshots().catch(() => {});
}

// The terminal's size for its box: whole characters of term.js's font
// across the box, and rows filling most of the window's height.
function terminalFit(term, box) {
  const probe = document.createElement("span");
  probe.textContent = "0".repeat(20);
  term.element.append(probe);
  const r = probe.getBoundingClientRect();
  probe.remove();
  if (!r.width || !r.height) return { cols: term.cols, rows: term.rows };
  const clamp = (n, lo, hi) => Math.max(lo, Math.min(hi, Math.floor(n)));
  return {
    cols: clamp((box.clientWidth - 16) / (r.width / 20), 20, 500),
    rows: clamp((window.innerHeight * 0.6) / r.height, 8, 200),
  };
}

// A shell on a pseudo-terminal (the session API), in term.js (Debian's
// libjs-term.js: it draws the screen as text, a row per element). Its size
// follows the window's; the shell is told each new one.
async function openTerminal(id, box, button) {
  if (!window.Terminal) throw new Error("term.js is not installed (Debian's libjs-term.js)");
  button.disabled = true;
  box.replaceChildren();
  const term = new window.Terminal({ cols: 100, rows: 24, useStyle: true, screenKeys: false, cursorBlink: false });
  term.open(box);
  let size = terminalFit(term, box);
  term.resize(size.cols, size.rows);
  box.dataset.cols = size.cols;
  box.dataset.rows = size.rows;
  const ses = await api("POST", `/v1/sandboxes/${id}/sessions`, {
    cmd: ["/bin/sh", "-c", "if command -v bash >/dev/null; then exec bash -l; else exec sh -l; fi"],
    pty: true, rows: size.rows, cols: size.cols,
  });
  let resizing = null;
  const onResize = () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      const want = terminalFit(term, box);
      if (want.cols === size.cols && want.rows === size.rows) return;
      size = want;
      term.resize(size.cols, size.rows);
      api("POST", `/v1/sessions/${ses.id}/resize`, size).then(() => {
        box.dataset.cols = size.cols;
        box.dataset.rows = size.rows;
      }, failed);
    }, 150);
  };
  window.addEventListener("resize", onResize);
  leaving.push(() => window.removeEventListener("resize", onResize));
  // keystrokes in order: one request at a time, what came meanwhile
  // goes in the next one
  let pending = "";
  let sending = false;
  const send = async (data) => {
    pending += data;
    if (sending) return;
    sending = true;
    try {
      while (pending) {
        const text = pending;
        pending = "";
        await api("POST", `/v1/sessions/${ses.id}/stdin`, { text });
      }
    } catch (e) {
      failed(e);
    } finally {
      sending = false;
    }
  };
  term.on("data", send);
  const abort = new AbortController();
  leaving.push(() => abort.abort());
  const decode = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  events(`/v1/sessions/${ses.id}/events`, (event, data) => {
    if ((event === "stdout" || event === "stderr") && data) term.write(new TextDecoder().decode(decode(data.data)));
    if (event === "exit") {
      term.write(`\r\n[exited with ${data ? data.exit_code : "?"}]\r\n`);
      button.disabled = false;
      return false;
    }
    return true;
  }, abort.signal).catch((e) => {
    if (e.name !== "AbortError") failed(e);
  });
  term.focus();
}

// ---- templates ----

async function viewTemplates() {
  const list = (await api("GET", "/v1/templates")).templates || [];
  const rows = list.map((t) => el("tr", { "data-testid": "template-row" },
    el("td", {}, t.kind === "built" ? el("a", { href: `#/templates/${t.name}` }, t.name) : t.name),
    el("td", {}, state(t.state)), el("td", {}, t.kind || ""), el("td", {}, t.memory_mib ? `${t.memory_mib} MiB` : ""),
    el("td", {}, t.error || t.step_text || "")));
  page("Templates", el("p", { class: "muted" },
    "Built-in templates, and yours built from specs (airlock template build, docs/templates.md)."),
  table(["Name", "State", "Kind", "Memory", ""], rows, "templates"));
}

async function viewTemplate(name) {
  const t = await api("GET", `/v1/templates/${name}`);
  const log = el("pre", { class: "log", "data-testid": "build-log" });
  const bar = el("div", {});
  const step = el("div", { class: "muted", "data-testid": "build-step" });
  const st = el("span", {}, state(t.state));
  const del = el("button", { type: "button", class: "danger", "data-testid": "template-delete" }, "Delete");
  del.addEventListener("click", async () => {
    if (!confirm(`Delete template ${name}?`)) return;
    try {
      await api("DELETE", `/v1/templates/${name}`);
      location.hash = "#/templates";
    } catch (e) {
      failed(e);
    }
  });
  page(el("span", {}, name, " ", st),
    el("div", { class: "card" }, el("dl", { class: "fields" },
      el("dt", {}, "Build"), el("dd", { class: "mono" }, t.build_id), el("dt", {}, "Template id"),
      el("dd", { class: "mono" }, t.template_id), el("dt", {}, "Node"), el("dd", {}, t.node || ""),
      el("dt", {}, "Base"), el("dd", {}, JSON.stringify(t.spec.base || {})), el("dt", {}, "Created"),
      el("dd", {}, t.created_at), t.error ? el("dt", {}, "Error") : null, t.error ? el("dd", {}, t.error) : null),
    el("div", { class: "row" }, del)),
    el("div", { class: "card" }, el("h2", {}, "Build log"), el("div", { class: "progress" }, bar), step, log));
  const abort = new AbortController();
  leaving.push(() => abort.abort());
  events(`/v1/templates/${name}/builds/${t.build_id}/logs`, (event, data) => {
    if (event === "log" && data) {
      log.append(data.text);
      log.scrollTop = log.scrollHeight;
    } else if (event === "progress" && data) {
      bar.style.width = `${Math.round((100 * data.step) / data.steps)}%`;
      step.textContent = `step ${data.step} of ${data.steps}: ${data.step_text}`;
    } else if (event === "end" && data) {
      st.replaceChildren(state(data.state));
      bar.style.width = "100%";
      step.textContent = data.state === "ready" ? `built in ${(data.elapsed_ms / 1000).toFixed(1)} s`
        : `failed: ${data.error || ""}`;
      return false;
    }
    return true;
  }, abort.signal).catch((e) => {
    if (e.name !== "AbortError") failed(e);
  });
}

// ---- nodes and tenants (the admin's) ----

async function viewNodes() {
  const health = await api("GET", "/v1/health").catch((e) => ({ status: e.message }));
  const list = (await api("GET", "/v1/nodes")).nodes || [];
  const rows = list.map((n) => el("tr", { "data-testid": "node-row" }, el("td", {}, n.name), el("td", {}, state(n.state)),
    el("td", { class: "mono" }, n.address || ""), el("td", {}, n.sandboxes),
    el("td", {}, n.capacity ? `${n.capacity.cpus} CPUs, ${bytes(n.capacity.memory_mib * 1048576)}` : ""),
    el("td", {}, n.usage ? `${n.usage.sandboxes} sandboxes, ${bytes(n.usage.memory_mib * 1048576)}` : ""),
    el("td", {}, (n.templates || []).filter((x) => !x.startsWith("c-")).join(", "))));
  page("Nodes",
    el("div", { class: "card", "data-testid": "local-node" }, el("dl", { class: "fields" },
      el("dt", {}, "This machine's node"), el("dd", {}, health.status || ""), el("dt", {}, "Accelerator"),
      el("dd", {}, health.accel || "–"), el("dt", {}, "Templates"),
      el("dd", {}, (health.templates || []).map((t) => `${t.name} (${t.state})`).join(", ") || "–"))),
    el("h2", {}, "Joined nodes"),
    table(["Name", "State", "Address", "Sandboxes", "Capacity", "Usage", "Templates"],
      rows.length ? rows : [el("tr", {}, el("td", { colspan: 7, class: "muted" }, "None: one machine (docs/cluster.md)."))],
      "nodes"));
}

async function viewTenants() {
  const list = (await api("GET", "/v1/tenants")).tenants || [];
  const name = el("input", { type: "text", placeholder: "name", "data-testid": "tenant-name" });
  const add = el("button", { type: "button", class: "primary", "data-testid": "tenant-create" }, "Create tenant");
  add.addEventListener("click", async () => {
    try {
      await api("POST", "/v1/tenants", { name: name.value.trim() });
      await route();
    } catch (e) {
      failed(e);
    }
  });
  const cards = await Promise.all(list.map(async (t) => {
    const keys = (await api("GET", `/v1/tenants/${t.id}/keys`)).keys || [];
    const mk = el("button", { type: "button", "data-testid": "key-create" }, "New key");
    mk.addEventListener("click", async () => {
      try {
        const k = await api("POST", `/v1/tenants/${t.id}/keys`, { name: "console" });
        notice = el("div", { class: "card", "data-testid": "new-key" }, "New key for ", t.name, " (shown once): ",
          el("span", { class: "mono", "data-testid": "new-key-value" }, k.key));
        await route();
      } catch (e) {
        failed(e);
      }
    });
    return el("div", { class: "card", "data-testid": "tenant" }, el("h2", {}, t.name, " ", el("span", { class: "muted mono" }, t.id)),
      table(["Key", "Name", "Created", ""], keys.map((k) => {
        const rm = el("button", { type: "button", class: "danger", "data-testid": "key-revoke" }, "Revoke");
        rm.addEventListener("click", async () => {
          if (!confirm(`Revoke key ${k.id}?`)) return;
          try {
            await api("DELETE", `/v1/keys/${k.id}`);
            await route();
          } catch (e) {
            failed(e);
          }
        });
        return el("tr", { "data-testid": "key-row" }, el("td", { class: "mono" }, k.id), el("td", {}, k.name || ""),
          el("td", {}, k.created_at), el("td", {}, rm));
      }), "keys"), el("div", { class: "row" }, mk));
  }));
  const shown = notice;
  notice = null;
  page("Tenants", el("div", { class: "row" }, name, add), shown, ...cards);
}

// ---- routing ----

const routes = [
  [/^#\/login$/, viewLogin, false],
  [/^#\/sandboxes$/, viewSandboxes, true],
  [/^#\/sandboxes\/([A-Za-z0-9._-]+)$/, viewSandbox, true],
  [/^#\/templates$/, viewTemplates, true],
  [/^#\/templates\/([A-Za-z0-9._-]+)$/, viewTemplate, true],
  [/^#\/nodes$/, viewNodes, true],
  [/^#\/tenants$/, viewTenants, true],
];

async function route() {
  for (const stop of leaving) stop();
  leaving = [];
  main.removeAttribute("data-ready");
  const hash = location.hash || "#/sandboxes";
  if (!key() && hash !== "#/login") {
    location.hash = "#/login";
    return;
  }
  for (const a of document.querySelectorAll("nav a"))
    a.classList.toggle("active", hash.startsWith(a.getAttribute("href")));
  for (const [re, view, needsKey] of routes) {
    const m = hash.match(re);
    if (!m) continue;
    try {
      if (needsKey && document.getElementById("nav").hidden) await whoami();
      await view(...m.slice(1));
      main.setAttribute("data-ready", view.name);
    } catch (e) {
      page("Error", el("p", { "data-testid": "error" }, e.message));
    }
    return;
  }
  location.hash = "#/sandboxes";
}

document.getElementById("logout").addEventListener("click", () => logout());
window.addEventListener("hashchange", () => route());
route();
