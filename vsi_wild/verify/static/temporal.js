// The temporal page (VOO, VOC): the video with masks, the timeline, the fix ops, the
// appearance orders and the VOC counts, all recomputed by the server from the pending fixes.
"use strict";
const S = {info: null, fixes: [], sha: "none", view: null, selected: new Set(), t0: 0, t1: 1, player: null, progress: null};
const $ = id => document.getElementById(id);
const VID = videoId();
const ROW = 12, HEAD = 14, AXIS = 18, GUTTER = 70;

function instances() { return S.view.instances || []; }
function byConcept() {
  const groups = new Map();
  for (const i of [...instances()].sort((a, b) => a.first_time - b.first_time || a.instance_id - b.instance_id)) {
    if (!groups.has(i.concept)) groups.set(i.concept, []);
    groups.get(i.concept).push(i);
  }
  return groups;
}
function now() { return Math.round(S.player.video.currentTime * 10) / 10; }
function selectedIds() { return [...S.selected].filter(id => instances().some(i => i.instance_id === id)).sort((a, b) => a - b); }

// ------------------------------------------------------------------ fixes: preview, add, save
async function preview(fixes) {
  return api(`/api/videos/${encodeURIComponent(VID)}/preview`, {fixes});
}

async function addFixes(ops, errorBox) {
  // each op goes through the pipeline's validation (a dry run) before it is pending
  errorBox.textContent = "";
  try {
    const res = await preview(S.fixes.concat(ops));
    S.fixes = S.fixes.concat(ops);
    applyView(res);
  } catch (e) {
    errorBox.textContent = e.body && e.body.reason ? `${e.body.field ? e.body.field + ": " : ""}${e.body.reason}` : e.message;
  }
}

async function dropFix(i) {
  const fixes = S.fixes.filter((_, j) => j !== i);
  try { applyView(await preview(fixes)); S.fixes = fixes; } catch (e) { $("save-error").textContent = e.message; }
  renderPending();
}

function applyView(res) {
  S.view = {...S.view, instances: res.instances, appearance: res.appearance, voc: res.voc, motion: res.motion};
  renderAll();
}

async function save() {
  $("save-error").textContent = "";
  try {
    const res = await api(`/api/videos/${encodeURIComponent(VID)}/fixes`, {fixes: S.fixes, sha256: S.sha});
    S.sha = res.sha256; S.history = res.history;
    renderHistory();
    status(`saved ${res.path}`);
  } catch (e) {
    $("save-error").textContent = e.body && e.body.stale ? `refused: ${e.message}` : `not saved: ${e.message}`;
  }
}

async function restore() {
  const v = Number($("history").value);
  if (!v) return;
  try {
    const res = await api(`/api/videos/${encodeURIComponent(VID)}/restore`, {version: v, sha256: S.sha});
    S.sha = res.sha256; S.fixes = res.fixes; S.history = res.history;
    applyView(await preview(S.fixes)); renderHistory(); status(`restored version ${v}`);
  } catch (e) { $("save-error").textContent = e.message; }
}

function renderHistory() {
  $("history").replaceChildren(el("option", {value: ""}, "history…"),
    ...[...(S.history || [])].reverse().map(v => el("option", {value: v}, `version ${v}`)));
}

async function runRederive() {
  $("job").textContent = "re-derive starting…";
  try {
    const job = await rederive(j => { $("job").textContent = jobText(j); });
    if (job.state === "done") await load(true);
  } catch (e) { $("job").textContent = e.message; }
}

// ------------------------------------------------------------------ rendering
function renderInstances() {
  const box = $("instances");
  box.replaceChildren();
  for (const [concept, list] of byConcept()) {
    const all = list.every(i => !S.player.hidden.has(i.instance_id));
    box.append(el("div", {class: "concept"},
      el("input", {type: "checkbox", class: "concept-show", "data-concept": concept, checked: all, onchange: e => {
        for (const i of list) e.target.checked ? S.player.hidden.delete(i.instance_id) : S.player.hidden.add(i.instance_id);
        renderInstances(); S.player.redraw();
      }}), ` ${concept} (${list.length})`));
    for (const i of list) {
      box.append(el("label", {class: S.selected.has(i.instance_id) ? "selected" : null, "data-id": i.instance_id},
        el("input", {type: "checkbox", class: "show", "data-id": i.instance_id, checked: !S.player.hidden.has(i.instance_id),
          onchange: e => { e.target.checked ? S.player.hidden.delete(i.instance_id) : S.player.hidden.add(i.instance_id); S.player.redraw(); }}),
        el("input", {type: "checkbox", class: "sel", "data-id": i.instance_id, checked: S.selected.has(i.instance_id),
          onchange: e => { e.target.checked ? S.selected.add(i.instance_id) : S.selected.delete(i.instance_id); renderAll(); }}),
        el("span", {class: "swatch", style: `background:${colour(i.instance_id)}`}),
        `#${i.instance_id} ${fmtTime(i.first_time)}–${fmtTime(i.last_time)}`, i.origin === "fix" ? el("span", {class: "muted"}, " (fixed)") : null));
    }
  }
}

function renderOps() {
  const concepts = [...byConcept().keys()].sort();
  const from = $("rename-from"), keep = from.value;
  from.replaceChildren(...concepts.map(c => el("option", {value: c}, c)));
  if (concepts.includes(keep)) from.value = keep;
  $("concepts").replaceChildren(...concepts.map(c => el("option", {value: c})));
  const sel = selectedIds();
  $("merge-what").textContent = sel.length ? `instances ${sel.join(", ")}` : "select two or more";
  // split: the clip-local members of the selected instances (merged ids follow their merge)
  const members = (S.info.members || []).filter(m => sel.includes(mergedInto(m.instance_id)));
  $("split-member").replaceChildren(...members.map(m => el("option", {value: `${m.clip_index}:${m.local_id}`},
    `clip ${m.clip_index} local ${m.local_id} (#${m.instance_id}, ${fmtTime(m.first_time)}–${fmtTime(m.last_time)})`)));
}

// the automatic instance an id is now part of, after the pending merges (a merge keeps the smallest id)
function mergedInto(id) {
  const alias = new Map();
  for (const f of S.fixes) if (f.op === "merge") { const keepId = Math.min(...f.instances); for (const i of f.instances) alias.set(i, keepId); }
  let seen = 0;
  while (alias.has(id) && alias.get(id) !== id && seen++ < 100) id = alias.get(id);
  return id;
}

function renderReviewPairs() {
  // reconciliation's uncertain decisions, most answers changed first: an apart pair is resolved by a
  // merge fix (or left apart), a merged one by a split fix of its later clip instance (or left merged)
  const pairs = S.info.review_pairs || [];
  const head = el("tr", {}, ...["concept", "instances", "clips", "now", "P(same)", "answers", "why", ""].map(h => el("th", {}, h)));
  const rows = pairs.map(p => {
    const joined = mergedInto(p.instance_a) === mergedInto(p.instance_b);
    const split = S.fixes.some(f => f.op === "split" && f.clip === p.clip_b && f.local_id === p.local_b);
    const action = p.decision === "merge"
      ? (split ? el("span", {class: "muted"}, "split (pending)") :
         el("button", {class: "split-pair", onclick: () => addFixes([{op: "split", clip: p.clip_b, local_id: p.local_b}],
           $("review-error"))}, "split"))
      : (joined ? el("span", {class: "muted"}, "merged (pending)") :
         el("button", {class: "merge-pair", onclick: () => addFixes([{op: "merge",
           instances: [mergedInto(p.instance_a), mergedInto(p.instance_b)]}], $("review-error"))}, "merge"));
    return el("tr", {"data-pair": `${p.instance_a}-${p.instance_b}`},
      el("td", {}, p.concept), el("td", {}, `#${p.instance_a} · #${p.instance_b}`),
      el("td", {}, `${p.clip_a} (local ${p.local_a}) · ${p.clip_b} (local ${p.local_b})`),
      el("td", {}, p.decision === "merge" ? "merged" : "apart"), el("td", {}, p.posterior.toFixed(2)),
      el("td", {}, String(p.answer_impact)), el("td", {class: "muted"}, p.reason),
      el("td", {}, el("button", {title: "show and select both", onclick: () => {
          S.selected = new Set([mergedInto(p.instance_a), mergedInto(p.instance_b)]); renderAll(); }}, "select"), " ",
        action));
  });
  $("review-pairs").replaceChildren(head, ...(rows.length ? rows : [el("tr", {}, el("td", {colspan: 8, class: "muted"}, "none"))]));
}

function describe(f) {
  const rest = Object.entries(f).filter(([k]) => k !== "op").map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join(", ");
  return `${f.op} ${rest}`;
}

function renderPending() {
  $("pending").replaceChildren(...S.fixes.map((f, i) => el("li", {}, describe(f), " ",
    el("button", {title: "drop this fix", onclick: () => dropFix(i)}, "✕"))));
}

function renderOrders() {
  for (const which of ["first", "last"]) {
    const list = S.view.appearance[which];
    $(`${which}-order`).replaceChildren(...list.map((x, i) => el("li", {"data-concept": x.concept}, `${x.concept} `,
      el("span", {class: "muted"}, fmtTime(x.time)),
      el("button", {class: "up", disabled: i === 0, onclick: () => reorder(which, i, -1)}, "↑"),
      el("button", {class: "down", disabled: i === list.length - 1, onclick: () => reorder(which, i, +1)}, "↓"))));
  }
}

function reorder(which, i, dir) {
  // Move concept i before its predecessor (dir -1) or after its successor (+1): set_appearance
  // of the instances that decide its place, half a second past the neighbour's time.
  const list = S.view.appearance[which], me = list[i], other = list[i + dir];
  const mine = instances().filter(x => x.concept === me.concept), step = S.info.sample_step;
  const key = which === "first" ? "first_time" : "last_time";
  let ops;
  if (which === "first" && dir < 0) {
    const earliest = mine.reduce((a, b) => a.first_time <= b.first_time ? a : b);
    ops = [{op: "set_appearance", instance: earliest.instance_id, first_time: Math.max(0, other.time - step)}];
  } else if (which === "first") {
    ops = mine.filter(x => x.first_time <= other.time).map(x => ({op: "set_appearance", instance: x.instance_id, first_time: other.time + step}));
  } else if (dir < 0) {
    ops = mine.filter(x => x.last_time >= other.time).map(x => ({op: "set_appearance", instance: x.instance_id, last_time: Math.max(0, other.time - step)}));
  } else {
    const latest = mine.reduce((a, b) => a.last_time >= b.last_time ? a : b);
    ops = [{op: "set_appearance", instance: latest.instance_id, last_time: other.time + step}];
  }
  addFixes(ops.filter(o => o[key] !== undefined), $("order-error"));
}

function renderVoc() {
  const v = S.view.voc;
  $("voc").replaceChildren(
    el("tr", {}, el("th", {}, "concept"), ...v.checkpoints.map(c => el("th", {class: "num"}, fmtTime(c)))),
    ...Object.entries(v.counts).sort().map(([c, counts]) => el("tr", {"data-concept": c}, el("td", {}, c),
      ...counts.map(n => el("td", {class: "num"}, n)))));
}

// ------------------------------------------------------------------ timeline
function rows() {
  const out = [];
  for (const [concept, list] of byConcept()) {
    out.push({concept});
    for (const i of list) out.push({instance: i});
  }
  return out;
}

function drawTimeline() {
  const t0 = performance.now();
  const c = $("timeline"), wrap = c.parentElement, list = rows();
  const W = wrap.clientWidth, H = AXIS + list.reduce((h, r) => h + (r.concept ? HEAD : ROW), 0) + 4;
  if (c.width !== W) c.width = W;
  if (c.height !== H) c.height = H;
  const g = c.getContext("2d"), span = S.t1 - S.t0, x = t => GUTTER + (t - S.t0) / span * (W - GUTTER);
  g.clearRect(0, 0, W, H);
  g.font = "11px system-ui"; g.textBaseline = "middle";
  // axis ticks
  const nice = [0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
  const tick = nice.find(s => span / s <= (W - GUTTER) / 70) || 3600;
  g.fillStyle = "#66707a"; g.strokeStyle = "#e5e9ed";
  for (let t = Math.ceil(S.t0 / tick) * tick; t <= S.t1; t += tick) {
    g.beginPath(); g.moveTo(x(t), AXIS - 4); g.lineTo(x(t), H); g.stroke();
    g.fillText(fmtTime(t), x(t) + 2, 8);
  }
  // clip boundaries
  g.setLineDash([4, 3]); g.strokeStyle = "#90a4ae";
  for (const clip of S.info.segment_clips || []) {
    if (clip.start > S.t0 && clip.start < S.t1) { g.beginPath(); g.moveTo(x(clip.start), AXIS); g.lineTo(x(clip.start), H); g.stroke(); }
  }
  g.setLineDash([]);
  let y = AXIS;
  for (const r of list) {
    if (r.concept) {
      g.fillStyle = "#1d232a"; g.font = "bold 11px system-ui"; g.fillText(r.concept, 2, y + HEAD / 2); g.font = "11px system-ui";
      y += HEAD; continue;
    }
    const i = r.instance, sel = S.selected.has(i.instance_id);
    if (sel) { g.fillStyle = "#e3f2fd"; g.fillRect(0, y, W, ROW); }
    g.fillStyle = "#66707a"; g.fillText(`#${i.instance_id}`, 10, y + ROW / 2);
    g.fillStyle = colour(i.instance_id, S.player.hidden.has(i.instance_id) ? 0.25 : 0.9);
    for (const s of i.spans) {
      if (s.end < S.t0 || s.start > S.t1) continue;
      const a = Math.max(GUTTER, x(s.start)), b = Math.min(W, x(s.end));
      g.fillRect(a, y + 2, Math.max(2, b - a), ROW - 4);
    }
    y += ROW;
  }
  const t = S.player.video.currentTime;
  if (t >= S.t0 && t <= S.t1) { g.strokeStyle = "#d32f2f"; g.lineWidth = 2; g.beginPath(); g.moveTo(x(t), 0); g.lineTo(x(t), H); g.stroke(); g.lineWidth = 1; }
  window.timelineRenderMs = performance.now() - t0;
}

function timeAt(px) {
  const W = $("timeline").width;
  return S.t0 + (px - GUTTER) / (W - GUTTER) * (S.t1 - S.t0);
}

function zoom(factor, centre) {
  const d = S.info.video.duration_s, c = centre === undefined ? (S.t0 + S.t1) / 2 : centre;
  let span = Math.min(d, Math.max(2, (S.t1 - S.t0) * factor));
  S.t0 = Math.max(0, Math.min(d - span, c - (c - S.t0) * span / (S.t1 - S.t0)));
  S.t1 = S.t0 + span;
  drawTimeline();
}

function setupTimeline() {
  const c = $("timeline");
  let drag = null;
  c.addEventListener("wheel", e => { e.preventDefault(); zoom(e.deltaY > 0 ? 1.25 : 0.8, timeAt(e.offsetX)); }, {passive: false});
  c.addEventListener("mousedown", e => { drag = {x: e.offsetX, t0: S.t0, t1: S.t1, moved: false}; });
  c.addEventListener("mousemove", e => {
    if (!drag) return;
    const dx = e.offsetX - drag.x;
    if (Math.abs(dx) > 3) drag.moved = true;
    if (!drag.moved) return;
    const dt = dx / (c.width - GUTTER) * (drag.t1 - drag.t0), d = S.info.video.duration_s, span = drag.t1 - drag.t0;
    S.t0 = Math.max(0, Math.min(d - span, drag.t0 - dt)); S.t1 = S.t0 + span; drawTimeline();
  });
  c.addEventListener("mouseup", e => {
    if (drag && !drag.moved) {
      if (e.offsetX < GUTTER) selectRowAt(e.offsetY); else S.player.seek(timeAt(e.offsetX));
    }
    drag = null;
  });
  $("zoom-in").onclick = () => zoom(0.5);
  $("zoom-out").onclick = () => zoom(2);
  $("zoom-all").onclick = () => { S.t0 = 0; S.t1 = S.info.video.duration_s; drawTimeline(); };
}

function selectRowAt(py) {
  let y = AXIS;
  for (const r of rows()) {
    const h = r.concept ? HEAD : ROW;
    if (py >= y && py < y + h && r.instance) {
      const id = r.instance.instance_id;
      S.selected.has(id) ? S.selected.delete(id) : S.selected.add(id);
      renderAll(); return;
    }
    y += h;
  }
}

function renderAll() {
  renderInstances(); renderOps(); renderReviewPairs(); renderPending(); renderOrders(); renderVoc(); drawTimeline();
}

// ------------------------------------------------------------------ controls
function setupOps() {
  $("rename-add").onclick = () => {
    const from = $("rename-from").value, to = $("rename-to").value.trim();
    const op = {op: "rename_concept", from, to};
    if ($("rename-selected").checked) op.instances = selectedIds();
    addFixes([op], $("rename-error"));
  };
  $("merge-add").onclick = () => addFixes([{op: "merge", instances: selectedIds()}], $("merge-error"));
  $("split-add").onclick = () => {
    const v = $("split-member").value;
    if (!v) { $("split-error").textContent = "select the instance whose member to split"; return; }
    const [clip, local_id] = v.split(":").map(Number);
    addFixes([{op: "split", clip, local_id}], $("split-error"));
  };
  $("remove-add").onclick = () => addFixes(selectedIds().map(i => ({op: "remove_instance", instance: i})), $("remove-error"));
  $("add-start-now").onclick = () => { $("add-start").value = now(); };
  $("add-end-now").onclick = () => { $("add-end").value = now(); };
  $("add-add").onclick = () => {
    const s = Number($("add-start").value), e = Number($("add-end").value);
    addFixes([{op: "add_instance", concept: $("add-concept").value.trim(), spans: [[s, e]]}], $("add-error"));
  };
  const appearance = key => {
    const sel = selectedIds();
    if (sel.length !== 1) { $("appearance-error").textContent = "select one instance"; return; }
    addFixes([{op: "set_appearance", instance: sel[0], [key]: now()}], $("appearance-error"));
  };
  $("first-now").onclick = () => appearance("first_time");
  $("last-now").onclick = () => appearance("last_time");
  $("save").onclick = save;
  $("restore").onclick = restore;
  $("rederive").onclick = runRederive;
  $("verified").onchange = async e => {
    S.progress = await saveProgress({...S.progress, temporal_verified: e.target.checked});
    status(e.target.checked ? "marked verified" : "marked not verified");
  };
  $("show-masks").onchange = e => { S.player.showMasks = e.target.checked; S.player.redraw(); };
  $("show-boxes").onchange = e => { S.player.showBoxes = e.target.checked; S.player.redraw(); };
}

async function load(again) {
  const info = await api(`/api/videos/${encodeURIComponent(VID)}`);
  S.info = info; S.progress = info.progress; S.sha = info.fixes.sha256; S.history = info.fixes.history;
  $("verified").checked = info.progress.temporal_verified;
  if (info.metadata.state !== "done" || info.fixes.error) {
    $("state-box").hidden = false;
    $("state").textContent = info.fixes.error ? `fix file: ${info.fixes.error.error}` : `${info.metadata.state}: ${info.metadata.error || ""}`;
  } else $("state-box").hidden = true;
  if (!info.instances) {  // nothing to show but the state; a re-derive may mend it (e.g. after the file is fixed)
    $("rederive").onclick = runRederive;
    status("no metadata to verify yet", true);
    return;
  }
  S.fixes = info.fixes.fixes;
  S.view = {instances: info.instances, appearance: info.appearance, voc: info.voc, motion: info.motion};
  if (S.fixes.length && !info.fixes.error) {
    // the file may be newer than the metadata (edited by hand, not re-derived yet): show what it gives
    const res = await preview(S.fixes);
    S.view = {...S.view, instances: res.instances, appearance: res.appearance, voc: res.voc, motion: res.motion};
  }
  if (!again) {
    S.player = new MaskPlayer($("video"), $("overlay"), info, {onTime: t => { $("time").textContent = fmtTime(t); drawTimeline(); }});
    S.t0 = 0; S.t1 = info.video.duration_s;
    setupTimeline(); setupOps();
  } else { S.player.info = info; S.player.cache.clear(); S.player.redraw(); S.player.draw(S.player.video.currentTime); }
  renderHistory(); renderAll();
  window.pageReady = true;
  status(`${info.instances.length} instances · fix file ${info.fixes.sha256 === "none" ? "not written yet" : "loaded"}`);
}

header("temporal");
load().catch(e => status(e.message, true));
