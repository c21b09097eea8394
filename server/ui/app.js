// memosrt playground: reads the JSON APIs every 2 s and shows cubes, their
// memories (tier, heat, last use), packs (tokens, bytes, level), adapters,
// transitions and the server's budgets; and acts on the chosen cube: chat
// with it (POST /v1/generate, streamed; each answer lists the memories its
// prompt carried), add, edit and delete memories, run an extraction and a
// scheduler tick. The bearer token (serve --token, or an access key) is
// kept in localStorage and sent with every call; a #token=T fragment in the
// address sets it too (and is removed at once). Every text from the server
// is set with textContent, never parsed as HTML.
"use strict";

const TOKEN_KEY = "memosrt.token";
const POLL_MS = 2000;

const state = {
  cube: new URLSearchParams(location.search).get("cube") || "",
  timer: 0,
  gen: 0, // the latest refresh; an older one renders nothing
  admin: false,
  chat: [], // the conversation with state.cube: {role, content}
  busy: false, // a chat answer is on its way
  used: { cube: "", pack: new Set(), retrieved: new Set() }, // the last answer's memories
  texts: new Map(), // memory id → text, from the last refresh
  holding: "", // a memory row being edited or deleted: the poll leaves the table alone
};

function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

function takeFragmentToken() {
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return;
  localStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
  history.replaceState(null, "", location.pathname + location.search);
}

class HTTPError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

function headers(json) {
  const h = { Accept: json ? "application/json" : "application/x-ndjson" };
  const t = token();
  if (t) h.Authorization = "Bearer " + t;
  return h;
}

async function failure(r) {
  const body = await r.json().catch(() => ({}));
  const e = body.error;
  return new HTTPError(r.status, (e && e.message) || e || r.statusText);
}

// api calls one JSON route: GET without body, else method with body as
// JSON. It returns the decoded answer ({} for 204) or throws an HTTPError.
async function api(path, method, body) {
  const h = headers(true);
  const init = { method: method || "GET", headers: h, cache: "no-store" };
  if (body !== undefined) {
    h["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  if (!r.ok) throw await failure(r);
  if (r.status === 204) return {};
  return r.json();
}

// el builds an element; text is set with textContent, never as HTML.
function el(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") n.textContent = v;
    else if (k === "class") n.className = v;
    else n.setAttribute(k, v);
  }
  for (const k of kids) if (k != null) n.append(k);
  return n;
}

function bytes(n) {
  if (n == null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(n < 10 ? 1 : 0)) + " " + u[i];
}

function ago(ts) {
  if (!ts || ts.startsWith("0001-")) return "never";
  const s = (Date.now() - Date.parse(ts)) / 1000;
  if (s < 1) return "just now";
  if (s < 60) return Math.round(s) + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return (s / 3600).toFixed(1) + " h ago";
  return (s / 86400).toFixed(1) + " d ago";
}

function short(id) { return id && id.length > 14 ? id.slice(0, 12) + "…" : id || ""; }

function fill(tbody, rows, empty, cols) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: cols, text: empty }))]));
}

function badge(name) { return el("span", { class: "badge " + name, text: name }); }

function renderHeader(info) {
  const m = document.getElementById("model");
  if (info.model) {
    const md = info.model;
    const parts = [md.parameter_size, md.quantization_level, md.n_ctx ? "n_ctx " + md.n_ctx : "", md.backend].filter(Boolean);
    m.replaceChildren(el("strong", { text: md.name || "no model" }), el("span", { class: "muted", text: " " + parts.join(" · ") }));
  }
  const b = info.budgets;
  state.admin = !!b;
  if (!b) return; // an access key: renderCube shows the cube's share
  const box = document.getElementById("budgets");
  const bar = (label, used, max, fmt) => {
    const pct = max > 0 ? Math.min(100, (100 * used) / max) : 0;
    const fillBar = el("div", { class: "fill" + (pct > 90 ? " hot" : "") });
    fillBar.style.width = pct.toFixed(1) + "%";
    return el("div", { class: "budget" },
      el("div", { class: "label", text: label }),
      el("div", { class: "bar" }, fillBar),
      el("div", { class: "value", text: fmt(used) + " / " + fmt(max) }));
  };
  const cells = (n) => n + " cells";
  box.replaceChildren(
    bar("Tier KV", b.tier_kv_bytes, b.tier_kv_budget, bytes),
    bar("KV in RAM", b.ram_bytes, b.ram_budget, bytes),
    bar("Conversation packs", b.conv_bytes, b.conv_budget, bytes),
    bar("Resident", b.resident_cells, b.resident_cells_budget, cells),
    bar("Adapters", b.adapter_bytes, b.adapter_budget, bytes),
    el("div", { class: "gauges muted", text:
      `slots ${info.stats.busy_slots}/${info.stats.slots} busy · queued ${info.stats.queued} · packs ${info.stats.packs} · disk ${bytes(info.stats.disk_bytes)}` }));
}

function renderCubes(cubes) {
  const ul = document.getElementById("cubes");
  if (!state.cube && cubes.length) state.cube = cubes[0].name;
  ul.replaceChildren(...cubes.map((c) => {
    const a = el("a", { href: "?cube=" + encodeURIComponent(c.name), text: c.name });
    a.addEventListener("click", (ev) => { ev.preventDefault(); select(c.name); });
    return el("li", { class: c.name === state.cube ? "active" : "" }, a,
      el("span", { class: "muted", text: ` ${c.memories} mem · ${c.packs} packs` }));
  }));
  if (!cubes.length) ul.replaceChildren(el("li", { class: "muted", text: "no cubes yet" }));
}

function renderCube(tiers, packs, adapters) {
  document.getElementById("cube-title").textContent = "Cube " + tiers.cube;
  const sum = document.getElementById("pack-summary");
  if (tiers.pack_id) {
    sum.replaceChildren(
      el("span", { text: "Tier pack " }), el("code", { text: short(tiers.pack_id) }),
      el("span", { text: ` · ${tiers.pack_tokens} tokens · ${bytes(tiers.raw_bytes)} KV (${bytes(tiers.blob_bytes)} stored) · heat ${tiers.pack_heat.toFixed(2)} · ` }),
      badge(tiers.pack_level || "disk"));
    const pc = tiers.pack_composed;
    if (pc) {
      sum.append(el("div", {}, badge("composed"),
        el("span", { text: ` from its members' chunks (approximate): ${pc.tokens} tokens, ${pc.recomputed} recomputed (fraction ${pc.ratio.toFixed(2)})` })));
    }
  } else {
    sum.replaceChildren(el("span", { class: "muted", text: "No tier pack." }));
  }
  const g = tiers.kv_gate;
  if (g) {
    let state = "not calibrated yet: exact";
    if (g.setting === "exact") state = "packs stored exact";
    else if (g.calibrated) state = `calibrated: packs stored ${g.codec}, composition ${g.compose ? "on at " + g.compose_ratio.toFixed(2) : "off"}`;
    sum.append(el("div", {}, el("span", { class: "badge", text: "kv codec " + g.setting }),
      el("span", { text: ` pack ${tiers.pack_codec || "-"} · ${state}` })));
  }
  const pm = tiers.parametric;
  if (pm && (pm.adapter || pm.failure || pm.distilling)) {
    const ev = pm.eval;
    sum.append(el("div", {},
      badge("parametric"),
      el("span", { text: pm.adapter
        ? ` adapter ${pm.adapter} (v${pm.version}) · ${pm.members} memories · ${bytes(pm.bytes)}` +
          (pm.base_type ? ` · base ${pm.base_type}` : "") +
          (ev ? ` · memory NLL ${ev.nll_base.toFixed(3)} → ${ev.nll_adapter.toFixed(3)} · recalled ${ev.recalled}/${ev.memories}` +
            ` · generic top-1 ${(100 * ev.top1).toFixed(1)}% KL ${ev.kl.toFixed(4)}` : "")
        : (pm.base_type ? ` base ${pm.base_type}` : "") }),
      pm.distilling ? el("span", { class: "muted", text: " · distilling now" }) : null,
      pm.failure ? el("span", { class: "muted", text: ` · last run not attached: ${pm.failure}` }) : null));
  }
  if (!state.admin) {
    document.getElementById("budgets").replaceChildren(el("span", { class: "muted",
      text: `Tier KV ${bytes(tiers.kv_bytes)} / ${bytes(tiers.kv_budget)} · the other budgets need the admin token` }));
  }

  state.texts = new Map(tiers.memories.map((m) => [m.id, m.text]));
  if (state.holding && !state.texts.has(state.holding)) state.holding = ""; // gone meanwhile
  if (!state.holding) renderMemories(tiers.cube, tiers.memories);

  const levels = packs.levels || {};
  fill(document.querySelector("#packs tbody"), packs.packs.map((p) => el("tr", {},
    el("td", {}, el("code", { title: p.id, text: short(p.id) })),
    el("td", { text: (p.label || "").startsWith("conv:") ? "conversation" : "tier" }),
    el("td", { class: "num", text: p.n_tokens }),
    el("td", { class: "num", text: bytes(p.raw_bytes) }),
    el("td", { class: "num", text: bytes(p.blob_bytes) }),
    el("td", {}, badge(levels[p.id] || (p.in_ram ? "ram" : "disk"))),
    el("td", { title: p.created, text: ago(p.created) }))), "no packs", 7);

  fill(document.querySelector("#adapters tbody"), adapters.map((a) => el("tr", {},
    el("td", {}, el("strong", { text: a.name })),
    el("td", { text: a.cube ? "cube" : "global" }),
    el("td", { class: "num", text: a.rank }),
    el("td", { class: "num", text: bytes(a.bytes) }),
    el("td", { text: a.default ? "yes" : "" }),
    el("td", {}, a.loaded ? badge("loaded") : el("span", { class: "muted", text: "no" })))), "no adapters", 6);

  const tr = tiers.transitions.slice().reverse();
  document.getElementById("transitions").replaceChildren(...(tr.length ? tr.map((t) => el("li", {},
    el("span", { class: "when", title: t.time, text: ago(t.time) }),
    badge(t.from), el("span", { text: " → " }), badge(t.to),
    el("span", { text: ` ${t.memory ? short(t.memory) : "pack"} · ${t.reason} · heat ${t.heat.toFixed(2)} · ${t.tokens} tokens (${t.decoded} decoded)` })))
    : [el("li", { class: "muted", text: "none yet" })]));
  document.getElementById("jobs").replaceChildren(...(tiers.jobs.length ? tiers.jobs.map((j) => el("li", {},
    el("span", { class: "when", text: ago(j.created) }),
    el("span", { text: `${j.kind} ${short(j.memory)} · ${j.reason} · heat ${j.heat.toFixed(2)}` })))
    : [el("li", { class: "muted", text: "none" })]));
}

// renderMemories fills the memory table: each row with its tier, heat and
// use, whether the last answer carried it, and its Edit and Delete buttons.
function renderMemories(cube, memories) {
  const used = state.used.cube === cube ? state.used : { pack: new Set(), retrieved: new Set() };
  fill(document.querySelector("#memories tbody"), memories.map((m) => {
    const inPack = used.pack.has(m.id), retrieved = used.retrieved.has(m.id);
    const edit = el("button", { type: "button", class: "small", text: "Edit", "aria-label": "edit memory " + m.id });
    const del = el("button", { type: "button", class: "small danger", text: "Delete", "aria-label": "delete memory " + m.id });
    const row = el("tr", { "data-id": m.id, class: inPack ? "used-pack" : retrieved ? "used-retrieved" : "" },
      el("td", { class: "text" }, el("div", { class: "mem-text", text: m.text }), el("code", { class: "muted", text: m.id })),
      el("td", {}, badge(m.tier), m.pinned ? el("span", { class: "muted", text: " pinned" }) : null,
        m.chunk ? el("span", { class: "muted", text: " +chunk", title: "KV chunk " + m.chunk.slice(0, 12) }) : null),
      el("td", { class: "num heat", text: m.heat.toFixed(2) }),
      el("td", { class: "num visits", text: (m.usage.v || 0).toFixed(1) }),
      el("td", { class: "num turns", text: (m.usage.i || 0).toFixed(1) }),
      el("td", { title: m.usage.last || "", text: ago(m.usage.last) }),
      el("td", { class: "used" }, inPack ? badge("pack") : null, retrieved ? badge("retrieved") : null),
      el("td", { class: "row-actions" }, edit, del));
    edit.addEventListener("click", () => startEdit(cube, m, row));
    del.addEventListener("click", () => confirmDelete(cube, m, row));
    return row;
  }), "no memories", 8);
}

// startEdit turns a row's text into a form: Enter or Save replaces the
// text (PUT, a new version), Escape or Cancel gives the row back.
function startEdit(cube, m, row) {
  state.holding = m.id;
  const input = el("input", { class: "grow", "aria-label": "memory text" });
  input.value = m.text;
  const form = el("form", { class: "row edit", autocomplete: "off" }, input,
    el("button", { type: "submit", class: "small primary", text: "Save" }),
    el("button", { type: "button", class: "small", text: "Cancel" }));
  const cancel = () => { state.holding = ""; refresh(); };
  form.lastChild.addEventListener("click", cancel);
  input.addEventListener("keydown", (ev) => { if (ev.key === "Escape") cancel(); });
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = input.value;
    act("edit", "Edited", async () => {
      const got = await api(`/v1/cubes/${encodeURIComponent(cube)}/memories/${encodeURIComponent(m.id)}`, "PUT", { text });
      return `${got.id} (version ${got.version}): ${got.text}`;
    }).then((ok) => { if (ok) state.holding = ""; refresh(); });
  });
  row.querySelector("td.text").replaceChildren(form);
  input.focus();
}

// confirmDelete asks in the row before DELETE: the focus lands on Cancel.
function confirmDelete(cube, m, row) {
  state.holding = m.id;
  const yes = el("button", { type: "button", class: "small danger", text: "Confirm delete" });
  const no = el("button", { type: "button", class: "small", text: "Cancel" });
  no.addEventListener("click", () => { state.holding = ""; refresh(); });
  yes.addEventListener("click", () => {
    act("delete", "Deleted", async () => {
      await api(`/v1/cubes/${encodeURIComponent(cube)}/memories/${encodeURIComponent(m.id)}`, "DELETE");
      return `${m.id}: ${m.text}`;
    }).then(() => { state.holding = ""; refresh(); });
  });
  row.querySelector("td.row-actions").replaceChildren(el("span", { class: "muted", text: "Delete? " }), yes, no);
  no.focus();
}

// act runs one action, logs its outcome at the top of the actions list
// (an li with data-action and data-state "ok" or "error") and refreshes
// the tables at once. It resolves to whether the action succeeded.
async function act(name, label, fn) {
  const li = el("li", { "data-action": name, "data-state": "running" }, el("span", { text: label + "…" }));
  const list = document.getElementById("actions");
  list.querySelector("li.muted")?.remove();
  list.prepend(li);
  while (list.children.length > 8) list.lastChild.remove();
  try {
    const what = await fn(li);
    li.dataset.state = "ok";
    li.replaceChildren(el("span", { class: "when", text: new Date().toLocaleTimeString() }), el("strong", { text: label + " " }), el("span", { class: "result", text: what }));
    return true;
  } catch (e) {
    li.dataset.state = "error";
    li.replaceChildren(el("span", { class: "when", text: new Date().toLocaleTimeString() }), el("strong", { text: label + " failed: " }), el("span", { class: "result", text: e.message }));
    return false;
  } finally {
    refresh();
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// extract records text as a user turn and queues an extraction job over it
// (POST /v1/cubes/{cube}/messages), then follows the job until it ends.
async function extract(cube, text, li) {
  const c = encodeURIComponent(cube);
  let { job } = await api(`/v1/cubes/${c}/messages`, "POST", { messages: [{ role: "user", content: text }] });
  li.dataset.job = job.id;
  for (let i = 0; i < 600 && (job.state === "queued" || job.state === "running"); i++) {
    li.lastChild.textContent = `job ${job.id} ${job.state}…`;
    await sleep(500);
    job = await api(`/v1/cubes/${c}/jobs/${encodeURIComponent(job.id)}`);
  }
  const results = job.results || [], dropped = job.dropped || [];
  const parts = [`job ${job.id} ${job.state}`, `${results.length} result${results.length === 1 ? "" : "s"}`];
  if (job.by) parts.push("by " + job.by);
  if (dropped.length) parts.push(`${dropped.length} dropped`);
  if (job.error) parts.push(job.error);
  for (const r of results) parts.push(`${r.op}: ${r.text}`);
  li.dataset.jobState = job.state;
  return parts.join(" · ");
}

// ms formats a duration in nanoseconds as milliseconds.
function ms(ns) { return ns ? (ns / 1e6).toFixed(ns < 1e7 ? 2 : 1) + " ms" : "–"; }

// answerFacts is what an answer's Response reports: timings, tokens, the
// cache source, and the memories the prompt carried, by text.
function answerFacts(res) {
  const u = res.usage || {};
  const facts = el("div", { class: "meta" },
    el("span", { text: `TTFT ${ms(u.ttft_ns)}` }),
    el("span", { text: `${u.prompt_tokens} prompt tokens` }),
    el("span", { class: "cached", text: `${u.cached_tokens} cached` }),
    el("span", { class: "source", text: "cache " + (res.cache_source || "none") }),
    el("span", { text: `${u.eval_tokens} generated (${res.done_reason})` }),
    res.pack_id ? el("span", { title: res.pack_id, text: "pack " + short(res.pack_id) }) : null,
    res.refused ? el("span", { text: "refused: " + res.refused }) : null);
  const item = (kind, id) => el("li", { "data-kind": kind, "data-id": id }, badge(kind),
    el("span", { text: " " + (state.texts.get(id) || id) }));
  const none = (kind, why) => el("li", { class: "muted", "data-none": kind }, badge(kind), el("span", { text: " " + why }));
  const pack = res.pack_memory_ids || [], got = res.retrieved_memory_ids || [], prefs = res.preference_memory_ids || [];
  const used = el("ul", { class: "used-list" },
    ...(pack.length ? pack.map((id) => item("pack", id)) : [none("pack", "none")]),
    ...(got.length ? got.map((id) => item("retrieved", id)) : [none("retrieved", "none")]),
    ...prefs.map((id) => item("preference", id)),
    u.composed_tokens
      ? el("li", { "data-composed": String(u.composed_tokens) }, badge("composed"),
        el("span", { text: ` ${u.composed_tokens} prompt tokens placed from memory chunks, ${u.recomputed_tokens || 0} of them recomputed` }))
      : none("composed", "none: no memory chunk was composed into this turn"));
  return [facts, used];
}

// generate streams POST /v1/generate, handing each text piece to onText,
// and returns the last line's Response.
async function generate(body, onText) {
  const r = await fetch("/v1/generate", { method: "POST", headers: { ...headers(false), "Content-Type": "application/json" },
    body: JSON.stringify({ ...body, stream: true }), cache: "no-store" });
  if (!r.ok) throw await failure(r);
  const reader = r.body.getReader(), dec = new TextDecoder();
  let buf = "", result = null;
  const line = (l) => {
    if (!l.trim()) return;
    const c = JSON.parse(l);
    if (c.error) throw new Error(c.error);
    if (c.text) onText(c.text);
    if (c.done) result = c.result;
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      line(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  }
  line(buf);
  if (!result) throw new Error("the answer ended without its last line");
  return result;
}

function chatMessage(role, text) {
  return el("li", { class: "msg " + role }, el("div", { class: "who", text: role === "user" ? "you" : "model" }), el("div", { class: "text", text }));
}

// send adds text as the next user turn of the chat with the chosen cube
// and streams the model's answer under it.
async function send(text) {
  const cube = state.cube;
  if (!cube || state.busy || !text.trim()) return;
  const log = document.getElementById("chat-log");
  log.querySelector("li.hint")?.remove();
  const max = parseInt(document.getElementById("chat-max").value, 10);
  state.chat.push({ role: "user", content: text });
  const answer = chatMessage("assistant", "");
  answer.classList.add("pending");
  log.append(chatMessage("user", text), answer);
  const body = answer.querySelector(".text");
  state.busy = true;
  document.getElementById("chat-send").disabled = true;
  let out = "";
  try {
    const res = await generate({ cube, messages: state.chat, num_predict: max > 0 ? max : 0 }, (t) => {
      out += t;
      body.textContent = out;
      log.scrollTop = log.scrollHeight;
    });
    if (state.cube !== cube) return; // another cube was chosen meanwhile
    state.chat.push({ role: "assistant", content: out });
    state.used = { cube, pack: new Set(res.pack_memory_ids || []), retrieved: new Set([...(res.retrieved_memory_ids || []), ...(res.preference_memory_ids || [])]) };
    answer.append(...answerFacts(res));
    answer.dataset.done = "true";
  } catch (e) {
    state.chat.pop();
    answer.classList.add("bad");
    body.textContent = "error: " + e.message;
    answer.dataset.done = "error";
  } finally {
    answer.classList.remove("pending");
    state.busy = false;
    document.getElementById("chat-send").disabled = false;
    log.scrollTop = log.scrollHeight;
    refresh();
  }
}

function clearChat() {
  state.chat = [];
  state.used = { cube: "", pack: new Set(), retrieved: new Set() };
  document.getElementById("chat-log").replaceChildren(el("li", { class: "muted hint", text: "New chat: the next message starts a conversation." }));
}

function setStatus(text, bad) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = "status" + (bad ? " bad" : "");
}

async function refresh() {
  clearTimeout(state.timer);
  const gen = ++state.gen;
  try {
    const [info, list] = await Promise.all([
      api("/v1/stats").catch(async (e) => {
        if (e.status !== 403) throw e;
        const ms = await api("/v1/models").catch(() => ({ data: [] }));
        return { model: { name: (ms.data[0] || {}).id || "" } };
      }),
      api("/v1/cubes"),
    ]);
    let cube = null;
    const chosen = state.cube || (list.cubes[0] || {}).name;
    if (chosen) {
      const c = encodeURIComponent(chosen);
      cube = await Promise.all([
        api(`/v1/cubes/${c}/tiers?limit=20`), api(`/v1/cubes/${c}/pack`), api(`/v1/cubes/${c}/adapters`)]);
    }
    if (gen !== state.gen) return; // a newer refresh renders
    renderHeader(info);
    renderCubes(list.cubes);
    if (cube) renderCube(cube[0], cube[1], cube[2].adapters);
    setStatus("updated " + new Date().toLocaleTimeString(), false);
    document.body.dataset.ready = "true";
  } catch (e) {
    if (gen !== state.gen) return;
    setStatus(e.status === 401 ? "token needed: enter it above" : "error: " + e.message, true);
  }
  state.timer = setTimeout(refresh, POLL_MS);
}

function select(cube) {
  if (cube !== state.cube) clearChat();
  state.cube = cube;
  state.holding = "";
  history.pushState(null, "", "?cube=" + encodeURIComponent(cube));
  refresh();
}

window.addEventListener("popstate", () => {
  const cube = new URLSearchParams(location.search).get("cube") || "";
  if (cube !== state.cube) clearChat();
  state.cube = cube;
  state.holding = "";
  refresh();
});

document.addEventListener("DOMContentLoaded", () => {
  takeFragmentToken();
  const input = document.getElementById("token");
  input.value = token();
  document.getElementById("auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (input.value) localStorage.setItem(TOKEN_KEY, input.value.trim());
    else localStorage.removeItem(TOKEN_KEY);
    refresh();
  });

  const chatInput = document.getElementById("chat-input");
  document.getElementById("chat-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = chatInput.value;
    if (!text.trim() || state.busy) return;
    chatInput.value = "";
    send(text);
  });
  chatInput.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      document.getElementById("chat-form").requestSubmit();
    }
  });
  document.getElementById("chat-clear").addEventListener("click", clearChat);

  const addText = document.getElementById("add-text");
  document.getElementById("add-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = addText.value, cube = state.cube;
    if (!text.trim() || !cube) return;
    act("add", "Added", async () => {
      const m = await api(`/v1/cubes/${encodeURIComponent(cube)}/memories`, "POST", { text });
      addText.value = "";
      return `${m.id}: ${m.text}`;
    });
  });

  const extractText = document.getElementById("extract-text");
  document.getElementById("extract-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = extractText.value, cube = state.cube;
    if (!text.trim() || !cube) return;
    extractText.value = "";
    act("extract", "Extraction", (li) => extract(cube, text, li));
  });

  document.getElementById("tick").addEventListener("click", () => act("tick", "Tick", async () => {
    const r = await api("/v1/tiers/tick", "POST");
    return `planned ${r.planned} · done ${r.done} · failed ${r.failed}`;
  }));
  refresh();
});
