// memosrt inspector: reads the JSON APIs every 2 s and shows cubes, their
// memories (tier, heat, last use), packs (tokens, bytes, level), adapters,
// transitions and the server's budgets. The bearer token (serve --token, or
// an access key) is kept in localStorage and sent with every call; a
// #token=T fragment in the address sets it too (and is removed at once).
"use strict";

const TOKEN_KEY = "memosrt.token";
const POLL_MS = 2000;

const state = { cube: new URLSearchParams(location.search).get("cube") || "", timer: 0, admin: false };

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

async function api(path) {
  const headers = { Accept: "application/json" };
  const t = token();
  if (t) headers.Authorization = "Bearer " + t;
  const r = await fetch(path, { headers, cache: "no-store" });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    const e = body.error;
    throw new HTTPError(r.status, (e && e.message) || e || r.statusText);
  }
  return body;
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
  } else {
    sum.replaceChildren(el("span", { class: "muted", text: "No tier pack." }));
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

  fill(document.querySelector("#memories tbody"), tiers.memories.map((m) => el("tr", {},
    el("td", { class: "text" }, el("div", { text: m.text }), el("code", { class: "muted", text: m.id })),
    el("td", {}, badge(m.tier), m.pinned ? el("span", { class: "muted", text: " pinned" }) : null),
    el("td", { class: "num", text: m.heat.toFixed(2) }),
    el("td", { class: "num", text: (m.usage.v || 0).toFixed(1) }),
    el("td", { class: "num", text: (m.usage.i || 0).toFixed(1) }),
    el("td", { title: m.usage.last || "", text: ago(m.usage.last) }))), "no memories", 6);

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

function setStatus(text, bad) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = "status" + (bad ? " bad" : "");
}

async function refresh() {
  clearTimeout(state.timer);
  try {
    const [info, list] = await Promise.all([
      api("/v1/stats").catch(async (e) => {
        if (e.status !== 403) throw e;
        const ms = await api("/v1/models").catch(() => ({ data: [] }));
        return { model: { name: (ms.data[0] || {}).id || "" } };
      }),
      api("/v1/cubes"),
    ]);
    renderHeader(info);
    renderCubes(list.cubes);
    if (state.cube) {
      const c = encodeURIComponent(state.cube);
      const [tiers, packs, ad] = await Promise.all([
        api(`/v1/cubes/${c}/tiers?limit=20`), api(`/v1/cubes/${c}/pack`), api(`/v1/cubes/${c}/adapters`)]);
      renderCube(tiers, packs, ad.adapters);
    }
    setStatus("updated " + new Date().toLocaleTimeString(), false);
    document.body.dataset.ready = "true";
  } catch (e) {
    setStatus(e.status === 401 ? "token needed: enter it above" : "error: " + e.message, true);
  }
  state.timer = setTimeout(refresh, POLL_MS);
}

function select(cube) {
  state.cube = cube;
  history.pushState(null, "", "?cube=" + encodeURIComponent(cube));
  refresh();
}

window.addEventListener("popstate", () => {
  state.cube = new URLSearchParams(location.search).get("cube") || "";
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
  refresh();
});
