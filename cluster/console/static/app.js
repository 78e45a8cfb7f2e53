// The hindsight console: read-only views over /ui/api/, which answers for the owner of the bearer
// token kept in this tab's sessionStorage. Every value from the server is put in the page as text
// (never as HTML), so nothing stored by an agent can run here.
"use strict";

const TOKEN_KEY = "hindsight-token";
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "on") for (const [event, fn] of Object.entries(v)) node.addEventListener(event, fn);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "on") for (const [event, fn] of Object.entries(v)) node.addEventListener(event, fn);
    else if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  }
  return append(node, children);
}

class HttpError extends Error {
  constructor(status, detail) { super(detail); this.status = status; }
}

async function api(path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = token ? { Authorization: "Bearer " + token } : {};
  // Relative to the page (/ui/), so the console works under any prefix the service is mounted at.
  const response = await fetch("api/" + path, { headers, credentials: "omit", cache: "no-store" });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new HttpError(response.status, body.detail || response.statusText);
  return body;
}

const short = (id) => String(id).slice(0, 8);
const when = (iso) => (iso ? new Date(iso).toISOString().replace("T", " ").slice(0, 19) : "");
const fixed = (x, digits = 2) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
const text = (value) => (typeof value === "string" ? value : JSON.stringify(value));
const pill = (label, kind) => el("span", { class: "pill " + (kind || label || "") }, label);
const link = (href, label) => el("a", { href }, label);

function bar(value) {
  const fill = el("span");
  fill.style.width = `${Math.round(value * 100)}%`; // through the CSSOM: the page's policy allows no style attribute
  return el("span", {}, el("span", { class: "bar" }, fill), fixed(value));
}

function table(headers, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
}

function dl(pairs) {
  return el("dl", {}, pairs.filter(([, v]) => v !== null && v !== undefined && v !== "").map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

// Credit in [-1, 1] as red (hurt the outcome), grey (no part in it), green (led to it).
function creditColour(score) {
  if (score === null || score === undefined) return "#ffffff";
  const mix = (a, b, t) => Math.round(a + (b - a) * t);
  const [from, to, t] = score < 0 ? [[224, 224, 224], [215, 48, 39], -score] : [[224, 224, 224], [26, 152, 80], score];
  return `rgb(${mix(from[0], to[0], t)},${mix(from[1], to[1], t)},${mix(from[2], to[2], t)})`;
}

// ------------------------------------------------------------------------------ trajectories

async function trajectoriesView() {
  const { trajectories } = await api("trajectories");
  const rows = trajectories.map((t) =>
    el("tr", {},
      el("td", {}, link(`#/trajectory/${t.trajectory_id}`, t.task)),
      el("td", {}, t.role), el("td", {}, t.task_type || ""),
      el("td", {}, pill(t.status), t.outcome ? pill(t.outcome) : ""),
      el("td", {}, t.nodes), el("td", {}, t.analysis), el("td", { class: "muted" }, when(t.created_at))));
  return [el("h1", {}, "Trajectories"),
    trajectories.length ? table(["task", "role", "task type", "state", "nodes", "analysis", "started"], rows)
      : el("p", { class: "muted" }, "No trajectories recorded yet.")];
}

async function trajectoryView(id, picked) {
  const t = await api("trajectories/" + encodeURIComponent(id));
  const details = el("div", { class: "panel", id: "node-details" });
  const byId = new Map(t.nodes.map((n) => [n.node_id, n]));
  const involved = new Set();
  for (const c of t.contrasts) for (const side of [c.good, c.bad]) if (side.here) involved.add(side.node_id);

  const show = (node) => {
    document.querySelectorAll(".dag .node").forEach((g) => g.classList.toggle("picked", g.dataset.id === node.node_id));
    details.replaceChildren(el("h2", {}, node.action), dl([
      ["credit", node.score === null ? "not a decision (one action available)" : fixed(node.score, 3)],
      ["result", [pill(node.result), node.summary || ""]],
      ["could choose", node.available.join(", ")],
      ["parameters", el("pre", { class: "mono" }, JSON.stringify(node.params, null, 1))],
      ["context", el("pre", { class: "mono" }, JSON.stringify(node.context, null, 1))],
      ["reasoning", node.reasoning],
      ["node", el("span", { class: "mono" }, node.node_id)],
    ]));
  };

  const dx = 130, dy = 86, pad = 50;
  const width = Math.max(...t.nodes.map((n) => n.x), 0) * dx + 2 * pad;
  const height = Math.max(...t.nodes.map((n) => n.depth), 0) * dy + 2 * pad;
  const at = (n) => [pad + n.x * dx, pad + n.depth * dy];
  const drawing = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "trajectory tree" });
  for (const n of t.nodes) {
    const parent = byId.get(n.parent_id);
    if (!parent) continue;
    const [x1, y1] = at(parent), [x2, y2] = at(n);
    drawing.append(svg("line", { x1, y1, x2, y2, stroke: "#9aa0a8", "stroke-width": 1.5 }));
  }
  // The contrasting siblings: a dashed arc from the choice that failed to the one that worked.
  for (const c of t.contrasts) {
    if (!(c.good.here && c.bad.here)) continue;
    const good = byId.get(c.good.node_id), bad = byId.get(c.bad.node_id);
    if (!good || !bad) continue;
    const [x1, y1] = at(bad), [x2, y2] = at(good);
    drawing.append(svg("path", { d: `M${x1},${y1 + 40} Q${(x1 + x2) / 2},${Math.max(y1, y2) + 66} ${x2},${y2 + 40}`,
      fill: "none", stroke: "#2459a8", "stroke-dasharray": "5 4", "stroke-width": 1.5 },
      svg("title", {}, `contrast: ${c.bad.action} (${fixed(c.bad.score)}) vs ${c.good.action} (${fixed(c.good.score)})`)));
  }
  for (const n of t.nodes) {
    const [x, y] = at(n);
    const g = svg("g", { class: "node", "data-id": n.node_id, "data-score": n.score ?? "", on: { click: () => show(n) } },
      svg("circle", { cx: x, cy: y, r: 18, fill: creditColour(n.score),
        stroke: n.result === "failure" ? "#d73027" : involved.has(n.node_id) ? "#2459a8" : "#555", "stroke-width": involved.has(n.node_id) ? 2.5 : 1.2 }),
      svg("text", { x, y: y + 4, "text-anchor": "middle" }, n.score === null ? "·" : fixed(n.score, 1)),
      svg("text", { x, y: y + 34, "text-anchor": "middle" }, n.action.length > 20 ? n.action.slice(0, 19) + "…" : n.action),
      svg("title", {}, `${n.action} — ${n.result}${n.score === null ? "" : ", credit " + fixed(n.score, 3)}`));
    drawing.append(g);
  }

  const contrasts = t.contrasts.map((c) => el("tr", {},
    el("td", {}, c.kind), el("td", {}, side(c.good, t.trajectory_id)), el("td", {}, side(c.bad, t.trajectory_id)),
    el("td", {}, fixed(c.strength))));
  const templates = t.templates.map((tp) => el("li", {}, link(`#/template/${tp.template_id}`, tp.rule), " ", el("span", { class: "muted" }, fixed(tp.confidence))));

  const view = [
    el("h1", {}, t.task),
    el("p", { class: "muted" }, `${t.role}${t.task_type ? " · " + t.task_type : ""} · agent ${t.agent_id} · `, pill(t.status),
      t.outcome ? pill(t.outcome) : "", ` · credit by scorer "${t.scorer}" against ${t.compared_with} stored runs of this kind`),
    el("div", { class: "legend" }, "credit", el("span", {}, "−1"), el("span", { class: "scale" }), el("span", {}, "+1"),
      "· white: no decision · red ring: the step failed · dashed: contrasting siblings"),
    el("div", { class: "cols" }, el("div", { class: "dag" }, drawing), details),
    el("h2", {}, "Contrasts"),
    t.contrasts.length ? table(["kind", "worked", "failed", "strength"], contrasts)
      : el("p", { class: "muted" }, "No contrast: no decision here was both won and lost at the same point."),
    el("h2", {}, "Templates citing it (active library)"),
    t.templates.length ? el("ul", {}, templates) : el("p", { class: "muted" }, "None."),
  ];
  setTimeout(() => show(byId.get(picked) || t.nodes.find((n) => n.score !== null) || t.nodes[0]), 0);
  if (!t.nodes.length) details.append("No nodes recorded.");
  return view;
}

function side(s, here) {
  const label = `${s.action} (${fixed(s.score)})`;
  if (s.here) return [label, " ", el("span", { class: "muted" }, "this run")];
  return [link(`#/trajectory/${s.trajectory_id}/${s.node_id}`, label), " ", el("span", { class: "muted" }, s.task || short(s.trajectory_id))];
}

// ---------------------------------------------------------------------------------- library

async function libraryView(version) {
  const lib = await api("library" + (version ? "?version=" + encodeURIComponent(version) : ""));
  if (!lib.versions.length) return [el("h1", {}, "Experience library"), el("p", { class: "muted" }, "Nothing learned yet.")];
  const versions = lib.versions.map((v) => el("tr", {},
    el("td", {}, link(`#/library/${v.version}`, "v" + v.version), v.version === lib.version ? " ◂" : ""),
    el("td", {}, v.source), el("td", {}, v.templates), el("td", {}, v.active ? pill("active", "success") : "", v.previous ? pill("previous") : ""),
    el("td", {}, v.note), el("td", { class: "muted" }, when(v.created_at))));
  const templates = lib.templates.map((t) => el("tr", { class: t.retired ? "retired" : "" },
    el("td", {}, bar(t.confidence)), el("td", {}, link(`#/template/${t.template_id}`, t.rule)),
    el("td", {}, t.role, t.task_type ? " · " + t.task_type : ""),
    el("td", {}, `${t.support.successes} / ${t.support.failures} / ${t.support.trajectories}`),
    el("td", {}, t.source, t.supplementary ? " · edge case" : "", t.retired ? " · retired" : "")));
  const numbers = lib.versions.map((v) => v.version);
  const pick = (name, value) => el("select", { name }, numbers.map((n) => el("option", { value: n, selected: n === value }, "v" + n)));
  // By default: the version served now against the newest other one (what a promote would change).
  const other = numbers.filter((n) => n !== lib.active).pop();
  const a = pick("a", lib.active ?? numbers[0]), b = pick("b", other ?? lib.active);
  const form = el("form", { class: "inline", on: { submit: (e) => { e.preventDefault(); location.hash = `#/diff/${a.value}/${b.value}`; } } },
    "Compare", a, "with", b, el("button", { type: "submit" }, "Diff"));
  return [
    el("h1", {}, "Experience library"),
    table(["version", "made by", "templates", "", "note", "created"], versions), form,
    el("h2", {}, `Version ${lib.version}: ${lib.total} templates`),
    table(["confidence", "rule", "role · task", "successes / failures / runs", "source"], templates),
  ];
}

async function diffView(a, b) {
  const d = await api(`library/diff?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`);
  const rows = [];
  for (const [kind, entries] of [["added", d.added], ["removed", d.removed], ["changed", d.changed]])
    for (const e of entries) rows.push(el("tr", {}, el("td", {}, pill(kind)), el("td", {}, e.rule),
      el("td", {}, e.role, e.task_type ? " · " + e.task_type : ""), el("td", {}, `${fixed(e.confidence_a)} → ${fixed(e.confidence_b)}`)));
  return [el("h1", {}, `Library v${d.a} → v${d.b}`),
    el("p", {}, `${d.added.length} added, ${d.removed.length} removed, ${d.changed.length} with another confidence, ${d.unchanged} unchanged. `, link("#/library", "back to the library")),
    rows.length ? table(["", "rule", "role · task", "confidence"], rows) : el("p", { class: "muted" }, "The two versions hold the same rules.")];
}

function historyChart(history) {
  const w = 420, h = 140, pad = 28;
  const points = history.map((c, i) => [pad + (history.length > 1 ? (i * (w - 2 * pad)) / (history.length - 1) : (w - 2 * pad) / 2), h - pad - c.after * (h - 2 * pad), c]);
  const chart = svg("svg", { width: w, height: h, class: "chart", role: "img", "aria-label": "confidence history" },
    svg("line", { x1: pad, y1: h - pad, x2: w - pad, y2: h - pad, stroke: "#ccc" }),
    svg("line", { x1: pad, y1: pad, x2: w - pad, y2: pad, stroke: "#eee" }),
    svg("text", { x: 4, y: pad + 4, "font-size": 10 }, "1.0"), svg("text", { x: 4, y: h - pad + 4, "font-size": 10 }, "0.0"),
    svg("polyline", { points: points.map(([x, y]) => `${x},${y}`).join(" "), fill: "none", stroke: "#2459a8", "stroke-width": 2 }));
  for (const [x, y, c] of points) chart.append(svg("circle", { cx: x, cy: y, r: 4, fill: "#2459a8" }, svg("title", {}, `${c.reason}: ${fixed(c.after)}`)));
  return chart;
}

async function templateView(id) {
  const t = await api("templates/" + encodeURIComponent(id));
  const history = t.history.map((c) => el("tr", {}, el("td", { class: "muted" }, when(c.at)), el("td", {}, c.reason),
    el("td", {}, `${fixed(c.before)} → ${fixed(c.after)}`),
    el("td", {}, c.trajectory_id ? link(`#/trajectory/${c.trajectory_id}`, short(c.trajectory_id)) : "")));
  const provenance = t.provenance.map((p) => el("tr", {},
    el("td", {}, p.task === null ? [short(p.trajectory_id), " ", el("span", { class: "muted" }, "(no longer stored)")]
      : link(`#/trajectory/${p.trajectory_id}${p.node_ids.length ? "/" + p.node_ids[0] : ""}`, p.task)),
    el("td", {}, p.kind || ""), el("td", { class: "mono" }, p.node_ids.map(short).join(" "))));
  return [
    el("h1", {}, "Template"), el("div", { class: "panel" }, el("p", {}, t.text), dl([
      ["confidence", bar(t.confidence)], ["when", t.condition || "always"], ["prefer", t.recommended],
      ["avoid", t.avoid ? `${t.avoid} (${t.avoid_reason})` : null], ["rationale", t.rationale], ["caveats", t.caveats.join("; ")],
      ["role · task", `${t.role}${t.task_type ? " · " + t.task_type : ""}`], ["source", t.source], ["retired", t.retired],
      ["support", `${t.support.successes} successes, ${t.support.failures} failures, ${t.support.trajectories} runs`],
      ["belief", t.belief ? `agree ${fixed(t.belief.agree)}, disagree ${fixed(t.belief.disagree)}, served ok ${t.belief.served_ok}, served failed ${t.belief.served_failed}` : null],
      ["edge case of", t.parent_id ? link(`#/template/${t.parent_id}`, short(t.parent_id)) : null],
      ["signature", el("span", { class: "mono" }, t.signature)],
    ])),
    el("h2", {}, "Confidence history"), historyChart(t.history), table(["when", "why", "confidence", "trajectory"], history),
    el("h2", {}, "Provenance"),
    t.provenance.length ? table(["trajectory", "evidence", "nodes"], provenance) : el("p", { class: "muted" }, "Written by hand: no trajectory behind it."),
  ];
}

// ----------------------------------------------------------------------------------- memory

function memoryRows(list) {
  return list.map((m) => el("tr", {}, el("td", {}, link(`#/memory/${m.memory_id}`, m.key)), el("td", {}, text(m.value)),
    el("td", {}, m.scope.kind, m.entity ? " · " + m.entity : ""), el("td", {}, "v" + m.version),
    el("td", {}, m.state, m.archived ? " · archived" : ""), el("td", { class: "muted" }, when(m.created_at))));
}

function searchForm(value) {
  const input = el("input", { type: "search", name: "q", placeholder: "what would memory_query find?", value: value || "", size: 40 });
  return el("form", { class: "inline", on: { submit: (e) => { e.preventDefault(); location.hash = "#/search/" + encodeURIComponent(input.value); } } },
    input, el("button", { type: "submit" }, "Search"));
}

async function memoriesView() {
  const { memories } = await api("memories");
  return [el("h1", {}, "Memory"), searchForm(""),
    memories.length ? table(["key", "value", "scope", "version", "state", "written"], memoryRows(memories))
      : el("p", { class: "muted" }, "No memories yet.")];
}

async function memoryView(id) {
  const m = await api("memories/" + encodeURIComponent(id));
  const current = m.versions[m.versions.length - 1];
  const rows = m.versions.map((v) => el("tr", { class: v.memory_id === m.memory_id ? "picked" : "" }, el("td", {}, "v" + v.version),
    el("td", {}, text(v.value)), el("td", {}, v.state, v.archived ? " · archived" : ""), el("td", { class: "muted" }, when(v.valid_from)),
    el("td", { class: "muted" }, v.expires_at ? when(v.expires_at) : "never"), el("td", { class: "mono" }, short(v.memory_id))));
  return [el("h1", {}, current.key), el("div", { class: "panel" }, dl([
      ["scope", JSON.stringify(current.scope)], ["entity", current.entity], ["metadata", el("pre", { class: "mono" }, JSON.stringify(current.metadata, null, 1))],
      ["derived from", current.source_ids.join(", ")], ["activity", fixed(current.activity)]])),
    el("h2", {}, `Versions (${m.versions.length})`), table(["version", "value", "state", "valid from", "expires", "id"], rows)];
}

async function searchView(q) {
  const r = await api("memory-search?q=" + encodeURIComponent(q));
  const hits = r.hits.map((h, i) => {
    const w = h.why;
    const why = el("div", { class: "why" },
      w.stages.map((s) => pill(s)),
      el("span", {}, `dense ${fixed(w.dense_similarity)} (#${w.dense_rank ?? "–"})`),
      el("span", {}, `lexical ${fixed(w.lexical_score)} (#${w.lexical_rank ?? "–"})`),
      el("span", {}, `fused ${fixed(w.fused, 4)}`),
      w.entities.length ? el("span", {}, "entities: " + w.entities.join(", ")) : "",
      w.time ? el("span", {}, "time: " + w.time) : "",
      w.expanded.length ? el("span", {}, "expanded: " + w.expanded.join(", ")) : "",
      w.session_bonus ? el("span", {}, `session +${fixed(w.session_bonus, 4)}`) : "",
      el("span", {}, `activity ${fixed(w.activity)}`));
    return el("tr", {}, el("td", {}, i + 1), el("td", {}, link(`#/memory/${h.memory.memory_id}`, h.memory.key)),
      el("td", {}, text(h.memory.value)), el("td", {}, fixed(h.score, 4)), el("td", {}, why));
  });
  return [el("h1", {}, "Why it matched"), searchForm(q),
    el("p", { class: "muted" }, `${r.candidates} candidates after the filters`, r.expansions.length ? `; expanded with ${r.expansions.join(", ")}` : "",
      ". Looking here does not count as a use of the memories."),
    hits.length ? table(["#", "key", "value", "score", "why"], hits) : el("p", { class: "muted" }, "Nothing matched.")];
}

// ----------------------------------------------------------------------------------- router

const ROUTES = [
  [/^#\/trajectory\/([^/]+)(?:\/([^/]+))?$/, "trajectories", (m) => trajectoryView(m[1], m[2])],
  [/^#\/library\/(\d+)$/, "library", (m) => libraryView(m[1])],
  [/^#\/library$/, "library", () => libraryView(null)],
  [/^#\/diff\/(\d+)\/(\d+)$/, "library", (m) => diffView(m[1], m[2])],
  [/^#\/template\/([^/]+)$/, "library", (m) => templateView(m[1])],
  [/^#\/memories$/, "memories", () => memoriesView()],
  [/^#\/memory\/([^/]+)$/, "memories", (m) => memoryView(m[1])],
  [/^#\/search\/(.*)$/, "memories", (m) => searchView(decodeURIComponent(m[1]))],
  [/^.*$/, "trajectories", () => trajectoriesView()],
];

let renders = 0;

async function render() {
  const view = $("view");
  const hash = location.hash || "#/trajectories";
  // A view still loading when the next is asked for must not replace it when its answer comes late.
  const ticket = ++renders;
  for (const [pattern, section, build] of ROUTES) {
    const match = hash.match(pattern);
    if (!match) continue;
    document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("on", a.dataset.view === section));
    view.setAttribute("aria-busy", "true");
    let content;
    try {
      content = [await build(match)].flat();
    } catch (error) {
      if (ticket !== renders) return;
      if (error instanceof HttpError && error.status === 401) return signIn(error.message);
      content = [el("p", { class: "error", id: "failure" }, error.message)];
    }
    if (ticket !== renders) return;
    view.replaceChildren(...content);
    view.setAttribute("aria-busy", "false");
    return;
  }
}

function signIn(message) {
  $("view").replaceChildren();
  $("login").hidden = false;
  $("login-error").textContent = sessionStorage.getItem(TOKEN_KEY) ? message : "";
  $("token").focus();
}

async function start() {
  try {
    const me = await api("whoami");
    $("login").hidden = true;
    $("who").textContent = me.development_mode ? `owner ${me.owner} (development mode)` : `owner ${me.owner}`;
    $("signout").hidden = me.development_mode;
    await render();
  } catch (error) {
    if (error instanceof HttpError && error.status === 401) signIn(error.message);
    else $("view").replaceChildren(el("p", { class: "error" }, error.message));
  }
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  start();
});
$("signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  $("who").textContent = "";
  $("signout").hidden = true;
  signIn("");
});
window.addEventListener("hashchange", () => { if ($("login").hidden) render(); });
start();
