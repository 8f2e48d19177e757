// The shardkit console: plain JavaScript modules, no build step. It reads
// the instance's JSON API (/api/v1/, docs/console.md) and its live status
// (Server-Sent Events at /api/v1/events); every operation is a POST that
// the server checks as it checks the same gRPC call.

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
};

// ---- what the console waits for, said in the status line

const pending = new Map();
function waitFor(key, what) {
  pending.set(key, what);
  showWaiting();
}
function done(key) {
  pending.delete(key);
  showWaiting();
}
function showWaiting() {
  const w = [...pending.values()];
  $("#waiting").textContent = w.length ? "Waiting for " + w.join(", ") + "…" : "";
}

// ---- the API

let session = { secure: false, user: "", role: "", csrf: "" };

class APIError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function request(method, path, body) {
  const opts = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  if (method !== "GET") opts.headers["X-CSRF-Token"] = session.csrf;
  let resp;
  try {
    resp = await fetch(path, opts);
  } catch (e) {
    throw new APIError(0, "the instance serving the console does not answer (" + e.message + ")", "Unavailable");
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON: a guard's plain-text refusal */ }
  if (resp.status === 401 && session.secure) {
    location.href = "/login?next=" + encodeURIComponent(location.hash);
  }
  if (!resp.ok) {
    throw new APIError(resp.status, (data && data.error) || text.trim() || "HTTP " + resp.status, data && data.code);
  }
  return data;
}
const get = (path) => request("GET", path);
const post = (path, body) => request("POST", path, body);

// ---- pages

const pages = ["cluster", "buckets", "spaces", "metrics"];
let page = "";
function route() {
  const want = (location.hash.match(/^#\/(\w+)/) || [])[1];
  const next = pages.includes(want) ? want : "cluster";
  for (const p of pages) {
    $("#page-" + p).hidden = p !== next;
    const a = $(`nav a[data-page="${p}"]`);
    if (p === next) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  if (next !== page) {
    page = next;
    document.title = "shardkit console: " + next;
    refreshPage();
  }
}

function refreshPage() {
  if (page === "cluster") loadHealth();
  if (page === "buckets") loadBuckets();
  if (page === "spaces") loadSpaces();
  if (page === "metrics") loadMetrics();
}

// ---- live cluster status

let status = null;
let lastEvent = 0;
let streamError = "";
const staleAfterMs = 6000;

function connectEvents() {
  waitFor("events", "the cluster's status from this instance");
  const es = new EventSource("/api/v1/events");
  es.addEventListener("cluster", (m) => {
    const ev = JSON.parse(m.data);
    lastEvent = Date.now();
    streamError = "";
    done("events");
    if (ev.status) status = ev.status;
    renderCluster(ev);
  });
  es.onerror = () => {
    streamError = "the connection to the instance serving this console was lost; reconnecting";
    waitFor("events", "the instance serving this console to answer again");
    checkStale();
  };
}

function checkStale(ev) {
  const banner = $("#stale");
  let why = "";
  if (ev && ev.stale) why = "this instance is not in the cluster now: " + ev.reason;
  else if (streamError) why = streamError;
  else if (lastEvent && Date.now() - lastEvent > staleAfterMs) why = "no news from the instance serving this console for " + Math.round((Date.now() - lastEvent) / 1000) + " s";
  if (ev === undefined && !why && !banner.hidden && banner.dataset.server) return; // a server's stale mark stays until the next event
  banner.hidden = !why;
  banner.dataset.server = ev && ev.stale ? "1" : "";
  banner.textContent = why ? "Stale: " + why + ". What is shown is the last known view." : "";
  document.body.classList.toggle("is-stale", !!why);
}
setInterval(() => checkStale(), 1000);

function renderCluster(ev) {
  checkStale(ev);
  if (!status) return;
  $("#cluster-id").textContent = status.cluster_id;
  const sec = $("#security");
  if (status.security === "plaintext") {
    sec.textContent = "insecure cluster";
    sec.className = "badge insecure";
    sec.title = "started without --certs-dir: anyone who reaches the ports may read, write and expel";
  } else if (status.security) {
    sec.textContent = "secure (" + status.security + ")";
    sec.className = "badge secure";
  }
  const leader = status.instances.find((i) => i.raft_id === status.leader_raft_id);
  $("#summary").textContent = `Group 0: leader ${leader ? leader.instance_id : "none known"}, term ${status.term}, commit ${status.commit_index}; ` +
    `${status.instances.length} instances, ${status.replicasets.length} replicasets, ${status.bucket_count} buckets, replication factor ${status.replication_factor}.` +
    (status.quorum && !status.quorum.has_quorum ? " NO QUORUM." : "");

  // Rebuild the tables only when what they show changed: a row under the
  // pointer or the keyboard's focus stays put between events.
  const shown = JSON.stringify([status.instances, status.replicasets, status.leader_raft_id, [...balance.values()].map((b) => b.locked), [...health]]);
  if (shown === renderCluster.shown) return;
  renderCluster.shown = shown;

  const tb = $("#instances tbody");
  tb.replaceChildren(...status.instances.map((i) => {
    const grade = (g) => el("span", { class: "grade-" + g.variant, text: `${g.variant} (${g.incarnation})` });
    const fd = Object.entries(i.failure_domain || {}).map(([k, v]) => k + "=" + v).join(",");
    const leads = status.leader_raft_id === i.raft_id;
    return el("tr", { "data-instance": i.instance_id, "data-grade": i.current_grade.variant },
      el("td", { text: i.instance_id + (leads ? " ★" : ""), title: leads ? "group 0's leader" : "" }),
      el("td", { text: i.replicaset_id }),
      el("td", { text: i.raft_role + " #" + i.raft_id }),
      el("td", { class: "current" }, grade(i.current_grade)),
      el("td", { class: "target" }, grade(i.target_grade)),
      el("td", { text: i.address }),
      el("td", {}, i.http_address ? el("a", { href: location.protocol + "//" + i.http_address + "/", text: i.http_address }) : "–"),
      healthCell(health.get(i.instance_id)),
      el("td", { text: fd || "–" }),
      el("td", { text: i.target_reason || "" }),
      el("td", {}, i.current_grade.variant === "Expelled" ? null : el("button", {
        class: "danger", "data-op": "expel", "data-instance": i.instance_id, text: "Expel…",
        onclick: () => confirmExpel(i),
      })),
    );
  }));

  const rb = $("#replicasets tbody");
  rb.replaceChildren(...status.replicasets.map((r) => {
    const bal = balance.get(r.replicaset_id);
    const locked = bal ? bal.locked : false;
    return el("tr", { "data-replicaset": r.replicaset_id },
      el("td", { text: r.replicaset_id }),
      el("td", { text: r.leader_instance_id || "none" }),
      el("td", { text: r.instances.join(", ") }),
      el("td", { class: "num weight", text: r.weight }),
      el("td", { class: "num", text: `${r.bucket_count} / ${r.target_bucket_count}` }),
      el("td", { text: bal ? (locked ? "locked" : "no") : "?" }),
      el("td", {},
        el("button", { "data-op": "weight", "data-replicaset": r.replicaset_id, text: "Weight…", onclick: () => confirmWeight(r) }), " ",
        el("button", { "data-op": "lock", "data-replicaset": r.replicaset_id, text: locked ? "Unlock…" : "Lock…", onclick: () => confirmLock(r.replicaset_id, !locked) }),
      ),
    );
  }));
  if (!balance.size && !balanceLoading) loadBuckets();
}

// ---- health: each instance's /health/ready, asked by the serving one

const health = new Map();
function healthCell(h) {
  if (!h) return el("td", { class: "health", text: "?" });
  return el("td", { class: "health " + (h.ready ? "ok" : "error"), title: h.reason || "", text: h.ready ? "ready" : "not ready: " + h.reason });
}
async function loadHealth() {
  try {
    const r = await get("/api/v1/health/cluster");
    health.clear();
    for (const h of r.instances) health.set(h.instance_id, { ready: h.ready, reason: h.reason || "" });
  } catch {
    health.clear(); // shown as "?": the status line and the stale mark say why
  }
  if (status) renderCluster();
}
setInterval(() => { if (page === "cluster" && !document.hidden) loadHealth(); }, 5000);

// ---- operations behind a confirmation

let confirmRun = null;
function confirmOp({ title, text, fields = [], run }) {
  const d = $("#confirm");
  $("#confirm-title").textContent = title;
  $("#confirm-text").textContent = text;
  const res = $("#confirm-result");
  res.textContent = "";
  res.className = "";
  const box = $("#confirm-fields");
  box.replaceChildren(...fields.map((f) => f.type === "checkbox"
    ? el("label", { class: "check" }, el("input", { name: f.name, type: "checkbox", checked: !!f.value }), f.label)
    : el("label", {}, f.label, f.options
    ? el("select", { name: f.name }, ...f.options.map((o) => el("option", { value: o, text: o, selected: o === f.value })))
    : el("input", { name: f.name, type: f.type || "text", value: f.value ?? "", min: f.min, required: true }))));
  const ok = $("#confirm-ok");
  ok.disabled = false;
  ok.hidden = false;
  confirmRun = async () => {
    const values = {};
    for (const f of fields) {
      const input = box.querySelector(`[name="${f.name}"]`);
      values[f.name] = f.type === "checkbox" ? input.checked : input.value;
    }
    ok.disabled = true;
    res.className = "";
    res.textContent = "Waiting for the server's answer…";
    try {
      const out = await run(values);
      res.className = "ok";
      res.textContent = "Done." + (out ? " " + out : "");
      ok.hidden = true;
      refreshPage();
      loadBuckets();
    } catch (e) {
      res.className = "error";
      res.textContent = "Refused: " + e.message;
      ok.disabled = false;
    }
  };
  d.showModal();
  (box.querySelector("input,select") || ok).focus();
}
$("#confirm-ok").addEventListener("click", () => confirmRun && confirmRun());
$("#confirm").addEventListener("submit", (e) => {
  if (e.submitter && e.submitter.id === "confirm-ok") { e.preventDefault(); confirmRun && confirmRun(); }
});

function confirmExpel(i) {
  confirmOp({
    title: "Expel " + i.instance_id,
    text: `Expel instance ${i.instance_id} (replicaset ${i.replicaset_id}, ${i.address}) from the cluster for good: it is removed from its Raft groups and can never rejoin. ` +
      "The server refuses an instance that still runs (unless forced), and an expel that would lose data or quorum.",
    fields: [{ name: "force", label: "force: expel it although it is not Offline", type: "checkbox", value: false }],
    run: async (v) => {
      const r = await post(`/api/v1/instances/${encodeURIComponent(i.instance_id)}/expel`, { force: v.force });
      return `${i.instance_id} is ${r.instance ? r.instance.current_grade?.variant ?? "expelled" : "expelled"}.`;
    },
  });
}

function confirmWeight(r) {
  confirmOp({
    title: "Set the weight of " + r.replicaset_id,
    text: `Replicaset ${r.replicaset_id} has weight ${r.weight}. The rebalancer moves buckets until each replicaset holds its share by weight; weight 0 drains it.`,
    fields: [{ name: "weight", label: "New weight", type: "number", min: 0, value: r.weight }],
    run: async (v) => {
      if (!/^\d+$/.test(v.weight)) throw new Error("the weight is a whole number, 0 or more");
      await post(`/api/v1/replicasets/${encodeURIComponent(r.replicaset_id)}/weight`, { weight: Number(v.weight) });
      return `The weight of ${r.replicaset_id} is ${v.weight}.`;
    },
  });
}

function confirmLock(id, lock) {
  confirmOp({
    title: (lock ? "Lock " : "Unlock ") + id,
    text: lock ? `Lock replicaset ${id}: it will neither send nor receive buckets until unlocked.` : `Unlock replicaset ${id}: the rebalancer may move buckets to and from it again.`,
    run: async () => {
      await post(`/api/v1/replicasets/${encodeURIComponent(id)}/lock`, { locked: lock });
      return `${id} is ${lock ? "locked" : "unlocked"}.`;
    },
  });
}

// ---- buckets

const palette = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c"];
const balance = new Map();
let balanceLoading = false;
let buckets = null;
let selected = 0;

// withColour sets an element's colour through the CSSOM (the page's
// Content-Security-Policy allows no inline style attributes).
function withColour(c, e) {
  e.style.setProperty("--c", c);
  return e;
}

function colourOf(rs) {
  const ids = [...balance.keys()].sort();
  const i = ids.indexOf(rs);
  return i < 0 ? "#ccc" : palette[i % palette.length];
}

async function loadBuckets() {
  if (balanceLoading) return;
  balanceLoading = true;
  waitFor("buckets", "the bucket map");
  try {
    buckets = await get("/api/v1/buckets");
    balance.clear();
    for (const r of buckets.replicasets) balance.set(r.replicaset_id, r);
    renderBuckets();
    done("buckets");
  } catch (e) {
    waitFor("buckets", "the bucket map (" + e.message + ")");
  } finally {
    balanceLoading = false;
  }
}
setInterval(() => { if (page === "buckets" && !document.hidden) loadBuckets(); }, 2000);

function renderBuckets() {
  const b = buckets;
  const owner = new Array(b.bucket_count + 1);
  for (const r of b.ranges) for (let n = r.first; n <= r.last; n++) owner[n] = r.replicaset_id;
  const moving = new Map(b.moves.map((m) => [m.bucket, m]));
  const pinned = new Set(b.replicasets.flatMap((r) => r.pinned_buckets));
  const grid = $("#grid");
  if (grid.children.length !== b.bucket_count) {
    const cells = [];
    for (let n = 1; n <= b.bucket_count; n++) cells.push(el("div", { "data-bucket": n }));
    grid.replaceChildren(...cells);
  }
  for (let n = 1; n <= b.bucket_count; n++) {
    const c = grid.children[n - 1];
    const rs = owner[n] || "";
    const bal = balance.get(rs);
    c.dataset.rs = rs;
    c.style.setProperty("--c", colourOf(rs));
    c.classList.toggle("moving", moving.has(n));
    c.classList.toggle("pinned", pinned.has(n));
    c.classList.toggle("locked", !!(bal && bal.locked));
    c.classList.toggle("selected", n === selected);
    const m = moving.get(n);
    c.title = `bucket ${n}: ${rs || "?"}` + (m ? `, moving to ${m.to} (${m.phase})` : "") + (pinned.has(n) ? ", pinned" : "");
  }
  $("#legend").replaceChildren(...b.replicasets.map((r) => withColour(colourOf(r.replicaset_id), el("span", {
    "data-replicaset": r.replicaset_id,
    text: `${r.replicaset_id}: ${r.buckets} / ${r.target} buckets, weight ${r.weight}${r.locked ? ", locked" : ""}${r.pinned ? `, ${r.pinned} pinned` : ""}${r.sending ? `, sending ${r.sending}` : ""}${r.receiving ? `, receiving ${r.receiving}` : ""}` +
      (r.drain_waits ? " — " + r.drain_waits : ""),
  }))));
  $("#rebalance-summary").textContent = b.buckets_to_move
    ? `The rebalancer has ${b.buckets_to_move} buckets to move; ${b.moves.length} moves in flight.`
    : `Balanced: every replicaset holds its target.` + (b.moves.length ? ` ${b.moves.length} moves in flight.` : "");
  if (b.stale) $("#rebalance-summary").textContent += " (stale: " + b.stale_reason + ")";
  $("#moves tbody").replaceChildren(...b.moves.map((m) => el("tr", {},
    el("td", { text: m.bucket }), el("td", { text: m.from }), el("td", { text: m.to }), el("td", { text: m.phase }),
    el("td", { text: Math.round(Number(m.age_ms) / 1000) + " s" }), el("td", { text: m.reason + (m.operator ? " (operator)" : "") }))));
  if (selected) showBucket(selected);
  if (status) renderCluster();
}

function showBucket(n) {
  selected = n;
  const out = $("#bucket-detail");
  if (!buckets || n < 1 || n > buckets.bucket_count) {
    out.replaceChildren(el("p", { class: "error", text: `There is no bucket ${n}: buckets are 1 to ${buckets ? buckets.bucket_count : "?"}.` }));
    return;
  }
  for (const c of $("#grid").querySelectorAll(".selected")) c.classList.remove("selected");
  const c = $("#grid").children[n - 1];
  c.classList.add("selected");
  const rs = c.dataset.rs;
  const isPinned = c.classList.contains("pinned");
  out.replaceChildren(el("p", { text: c.title + "." }),
    el("div", { class: "row" },
      el("button", { "data-op": "move", text: "Move…", onclick: () => confirmMove(n, rs) }),
      el("button", { "data-op": "pin", text: isPinned ? "Unpin…" : "Pin…", onclick: () => confirmPin(n, rs, !isPinned) })));
}
$("#grid").addEventListener("click", (e) => {
  const n = Number(e.target.dataset.bucket);
  if (n) { $("#bucket-no").value = n; showBucket(n); }
});
$("#bucket-form").addEventListener("submit", (e) => { e.preventDefault(); showBucket(Number($("#bucket-no").value)); });

function confirmMove(n, from) {
  const others = [...balance.keys()].filter((id) => id !== from);
  confirmOp({
    title: `Move bucket ${n}`,
    text: `Move bucket ${n} from ${from} to another replicaset, online (its writes pause for the switch). The rebalancer may move it back unless it is pinned.`,
    fields: [{ name: "to", label: "To replicaset", options: others.length ? others : [...balance.keys()], value: others[0] }],
    run: async (v) => {
      const r = await post(`/api/v1/buckets/${n}/move`, { to: v.to });
      return `Bucket ${n} is moving to ${v.to}` + (r.move ? ` (${r.move.phase})` : "") + ".";
    },
  });
}

function confirmPin(n, rs, pin) {
  confirmOp({
    title: (pin ? "Pin" : "Unpin") + ` bucket ${n}`,
    text: pin ? `Pin bucket ${n} to ${rs}: the rebalancer will not move it.` : `Unpin bucket ${n}: the rebalancer may move it again.`,
    run: async () => {
      await post(`/api/v1/buckets/${n}/pin`, { pinned: pin });
      return `Bucket ${n} is ${pin ? "pinned" : "unpinned"}.`;
    },
  });
}

const stepText = {
  plan: "Show the moves the weights ask for; changes nothing.",
  start: "Stop the rebalancer and switch every planned bucket to its new replicaset (curr = new, prev = old).",
  copy: "Copy the switched buckets' tuples from prev to curr, never overwriting.",
  finish: "Drop prev: the copied buckets become active on their new replicaset alone.",
  cleanup: "Delete the moved buckets' tuples from prev, and enable the rebalancer again.",
};
for (const b of document.querySelectorAll("#reshard button")) {
  b.addEventListener("click", () => {
    const step = b.dataset.step;
    confirmOp({
      title: "Reshard: " + step,
      text: stepText[step],
      run: async () => {
        const r = await post("/api/v1/reshard", { step });
        $("#reshard-out").textContent = r.summary + "\n" + r.moves.map((m) => `bucket ${m.bucket}: ${m.from} -> ${m.to} ${m.phase}`).join("\n");
        return r.summary;
      },
    });
  });
}

// ---- spaces

let spaces = [];
async function loadSpaces() {
  waitFor("spaces", "the list of spaces");
  try {
    const r = await get("/api/v1/spaces");
    spaces = r.spaces;
    done("spaces");
  } catch (e) {
    waitFor("spaces", "the list of spaces (" + e.message + ")");
    return;
  }
  $("#spaces tbody").replaceChildren(...spaces.map((s) => el("tr", { "data-space": s.name },
    el("td", { text: s.name }),
    el("td", { text: s.fields.map((f) => `${f.name} ${f.type}${f.nullable ? "?" : ""}`).join(", ") }),
    el("td", { text: s.primary_key.join(", ") }),
    el("td", { text: s.sharding_key.join(", ") }),
    el("td", { class: "num count", text: "counting…" }))));
  for (const id of ["#lookup-space", "#browse-space"]) {
    const sel = $(id);
    const was = sel.value;
    sel.replaceChildren(...spaces.map((s) => el("option", { value: s.name, text: s.name, selected: s.name === was })));
  }
  if (!spaces.length) $("#spaces tbody").append(el("tr", {}, el("td", { colspan: 5, text: "No spaces yet (shardkit space create)." })));
  for (const s of spaces) countSpace(s.name, 1);
}

// countSpace fills a space's count. A count is exact only once every bucket
// is counted once, which a rebalance under way can keep from happening
// within the call's deadline: a failed count is asked again, a second
// apart, countTries times in all, showing the error meanwhile.
const countTries = 5;
function countSpace(name, attempt) {
  const cell = () => $(`#spaces tr[data-space="${CSS.escape(name)}"] .count`);
  get(`/api/v1/spaces/${encodeURIComponent(name)}/count`).then(
    (c) => { if (cell()) cell().textContent = c.count; },
    (e) => {
      if (!cell()) return; // the page was left or redrawn
      cell().textContent = "? (" + e.message + (attempt < countTries ? "; asking again" : "") + ")";
      if (attempt < countTries) setTimeout(() => countSpace(name, attempt + 1), 1000);
    });
}

$("#lookup").addEventListener("submit", async (e) => {
  e.preventDefault();
  const out = $("#lookup-out");
  const space = $("#lookup-space").value;
  const key = $("#lookup-key").value.trim();
  out.replaceChildren(el("p", { text: "Waiting for the tuple…" }));
  try {
    const r = await get(`/api/v1/spaces/${encodeURIComponent(space)}/tuple?mode=${$("#lookup-mode").value}&key=${encodeURIComponent(key)}`);
    const who = `served by ${r.info.instance_id} of ${r.info.replicaset_id}${r.info.leader ? " (leader)" : ", a replica"}`;
    out.replaceChildren(r.found
      ? el("dl", { class: "found" }, el("dt", { text: "tuple" }), el("dd", {}, el("code", { class: "tuple", text: JSON.stringify(r.tuple) })),
        el("dt", { text: "version" }), el("dd", { text: r.version }), el("dt", { text: "bucket" }), el("dd", { text: r.bucket }),
        el("dt", { text: "read" }), el("dd", { text: who }))
      : el("p", { class: "notfound", text: `No tuple with key ${key} in ${space} (bucket ${r.bucket}; ${who}).` }));
  } catch (err) {
    out.replaceChildren(el("p", { class: "error", text: err.message }));
  }
});

let browseNext = null;
async function browse(cursor) {
  const space = $("#browse-space").value;
  const bucket = $("#browse-bucket").value;
  const kind = bucket ? "range" : "scan";
  const q = new URLSearchParams({ limit: "20" });
  if (cursor) { q.set("bucket", cursor.bucket); q.set("after", cursor.after); } else if (bucket) q.set("bucket", bucket);
  const tb = $("#browse-out tbody");
  waitFor("browse", "a page of " + space);
  try {
    const r = await get(`/api/v1/spaces/${encodeURIComponent(space)}/${kind}?${q}`);
    tb.replaceChildren(...r.tuples.map((t) => el("tr", {}, el("td", { text: t.bucket }), el("td", { text: t.version }), el("td", {}, el("code", { text: JSON.stringify(t.tuple) })))));
    if (!r.tuples.length) {
      tb.append(el("tr", {}, el("td", { colspan: 3, text: r.more ? `No tuples before bucket ${r.next_bucket}; the next page goes on from there.` : "No tuples." })));
    }
    browseNext = r.more ? { bucket: r.next_bucket, after: r.next_after } : null;
    $("#browse-next").disabled = !browseNext;
    done("browse");
  } catch (e) {
    done("browse");
    tb.replaceChildren(el("tr", {}, el("td", { colspan: 3, class: "error", text: e.message })));
  }
}
$("#browse").addEventListener("submit", (e) => { e.preventDefault(); browse(null); });
$("#browse-next").addEventListener("click", () => browseNext && browse(browseNext));

// ---- metrics

function sparkline(values) {
  const w = 160, h = 28;
  const max = Math.max(1e-9, ...values);
  const pts = values.map((v, i) => `${(i / Math.max(1, values.length - 1)) * w},${h - 2 - (v / max) * (h - 4)}`).join(" ");
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("class", "spark");
  svg.setAttribute("aria-hidden", "true");
  const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  pl.setAttribute("points", pts);
  svg.append(pl);
  return svg;
}

async function loadMetrics() {
  waitFor("metrics", "every instance's metrics");
  try {
    const r = await get("/api/v1/metrics/cluster");
    done("metrics");
    $("#metrics tbody").replaceChildren(...r.instances.map((m) => {
      if (m.error) return el("tr", { "data-instance": m.instance_id }, el("td", { text: m.instance_id }), el("td", { colspan: 3, class: "error", text: m.error }));
      const s = m.samples;
      const cell = (key, digits) => {
        const vals = s.map((x) => x[key]);
        const last = vals.length ? vals[vals.length - 1] : 0;
        return el("td", { class: "num" }, sparkline(vals), " ", el("span", { text: last.toFixed(digits) }));
      };
      return el("tr", { "data-instance": m.instance_id }, el("td", { text: m.instance_id }), cell("writes_per_s", 1), cell("reads_per_s", 1), cell("p99_ms", 1));
    }));
  } catch (e) {
    waitFor("metrics", "every instance's metrics (" + e.message + ")");
  }
}
setInterval(() => { if (page === "metrics" && !document.hidden) loadMetrics(); }, 4000);

// ---- start

async function start() {
  try {
    session = await get("/api/v1/session");
  } catch (e) {
    if (e.status !== 404) $("#who").textContent = e.message;
  }
  if (session.user) {
    $("#who").textContent = `${session.user} (${session.role || "no role"})`;
  }
  if (session.csrf) {
    const b = $("#logout");
    b.hidden = false;
    b.addEventListener("click", async () => {
      try { await request("POST", "/logout"); } finally { location.href = "/login"; }
    });
  }
  window.addEventListener("hashchange", route);
  route();
  connectEvents();
}
start();
