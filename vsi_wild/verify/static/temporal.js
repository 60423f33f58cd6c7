// The temporal page (VOO, VOC): the video with masks, the timeline, the fix ops, the review pairs,
// the appearance orders and the VOC counts. Every list is what the server's preview of the fix
// file plus the reviewer's draft gives, recomputed after each edit.
"use strict";
const S = {info: null, view: null, selected: new Set(), t0: 0, t1: 1, player: null, progress: null, focus: null,
           draw: {mode: null, frames: []}};
const $ = id => document.getElementById(id);
const VID = videoId();
const ROW = 12, HEAD = 14, AXIS = 18, GUTTER = 70;
const DRAFT = new Draft(VID, res => applyView(res));
DRAFTS.push(DRAFT);
// where a refused or no-longer-applying fix's message goes: beside the control that makes the op
const ERROR_BOX = {rename_concept: "rename-error", merge: "merge-error", split: "split-error", split_at: "split-error",
                   remove_instance: "remove-error", add_instance: "add-error", set_box: "box-error",
                   set_appearance: "appearance-error", review_pair: "review-error", motion: "save-error",
                   review_question: "save-error"};

function instances() { return (S.view && S.view.instances) || []; }
function byConcept() {
  const groups = new Map();
  for (const i of [...instances()].sort((a, b) => a.first_time - b.first_time || a.instance_id - b.instance_id)) {
    if (!groups.has(i.concept)) groups.set(i.concept, []);
    groups.get(i.concept).push(i);
  }
  return groups;
}
function now() { return Math.round(S.player.video.currentTime * 1000) / 1000; }
function selectedIds() { return [...S.selected].filter(id => instances().some(i => i.instance_id === id)).sort((a, b) => a - b); }

// ------------------------------------------------------------------ fixes: the draft, save
function addFixes(ops, errorBox) { return DRAFT.add(ops, errorBox).then(ok => { renderPending(); return ok; }); }

function applyView(res) {
  S.view = {...S.view, ...res};
  renderAll();
}

async function save() {
  $("save-error").textContent = "";
  for (const id of new Set(Object.values(ERROR_BOX))) $(id).textContent = "";
  try {
    const res = await DRAFT.save();
    renderHistory(); renderPending();
    for (const f of res.failed) {  // rebased onto a newer file: what no longer applies, beside its control
      $(ERROR_BOX[f.edit.fix.op] || "save-error").textContent = `not saved, no longer applies: ${f.error.field ? f.error.field + ": " : ""}${f.error.reason || f.error.error}`;
    }
    status(`saved ${res.path}` + (res.failed.length ? ` · ${res.failed.length} pending fix(es) no longer apply: see beside their controls` : ""), res.failed.length > 0);
  } catch (e) {
    $("save-error").textContent = `not saved: ${fixError(e)}`;
  }
}

async function restore() {
  const v = Number($("history").value);
  if (!v) return;
  try {
    const res = await api(`/api/videos/${encodeURIComponent(VID)}/restore`, {version: v, sha256: DRAFT.sha});
    DRAFT.file = res.fixes.fixes; DRAFT.sha = res.sha256; DRAFT.history = res.history;
    if (res.preview) applyView(res.preview);
    renderHistory(); status(`restored version ${v}`);
  } catch (e) { $("save-error").textContent = e.message; }
}

function renderHistory() {
  $("history").replaceChildren(el("option", {value: ""}, "history…"),
    ...[...(DRAFT.history || [])].reverse().map(h => el("option", {value: h.version},
      `version ${h.version} · ${h.fixes} fixes` + (h.by.length ? ` · ${h.by.join(", ")}` : "") + (h.at ? ` · ${h.at}` : ""))));
}

async function runRederive() {
  $("job").textContent = "re-derive starting…";
  try {
    const job = await rederive(j => showJob($("job"), j));
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
  const names = [...new Set([...(S.info.vocabulary || []), ...concepts])].sort();
  $("concepts").replaceChildren(...names.map(c => el("option", {value: c})));
  const sel = selectedIds();
  $("merge-what").textContent = sel.length ? `instances ${sel.join(", ")}` : "select two or more";
  // split: the clip-local members of the selected instances, as they are with the pending fixes
  const auto = new Map((S.info.members || []).map(m => [`${m.clip_index}:${m.local_id}`, m]));
  const members = ((S.view && S.view.members) || []).filter(m => sel.includes(m.instance_id));
  $("split-member").replaceChildren(...members.map(m => {
    const a = auto.get(`${m.clip_index}:${m.local_id}`);
    return el("option", {value: `${m.clip_index}:${m.local_id}`},
      `clip ${m.clip_index} local ${m.local_id} (#${m.instance_id}` + (a ? `, ${fmtTime(a.first_time)}–${fmtTime(a.last_time)}` : "") + ")");
  }));
  $("undo").disabled = !DRAFT.canUndo; $("redo").disabled = !DRAFT.canRedo;
}

function pairAction(p, decision) {
  return addFixes([{op: "review_pair", clip_a: p.clip_a, local_a: p.local_a, clip_b: p.clip_b, local_b: p.local_b, decision}],
                  $("review-error"));
}

function renderReviewPairs() {
  // the pairs reconciliation could not decide, as they are with the pending fixes: the instance
  // each side is part of now (a merged-away id shows what it became), merged or apart, decided by whom
  const pairs = (S.view && S.view.review_pairs) || [];
  const was = new Map((S.info.review_pairs || []).map(p => [`${p.clip_a}:${p.local_a}:${p.clip_b}:${p.local_b}`, p]));
  const head = el("tr", {}, ...["concept", "instances now", "clips (local ids)", "evidence", "why", "state", ""].map(h => el("th", {}, h)));
  const rows = pairs.map((p, n) => {
    const key = `${p.clip_a}:${p.local_a}:${p.clip_b}:${p.local_b}`, before = was.get(key);
    const side = (now, then) => now === null ? `#${then} (removed)` : (before && now !== then ? `#${now} (was #${then})` : `#${now}`);
    const ids = `${side(p.instance_a, before ? before.instance_a : p.instance_a)} · ${side(p.instance_b, before ? before.instance_b : p.instance_b)}`;
    const ev = [p.distance === null || p.distance === undefined ? null : `distance ${p.distance.toFixed(2)}`,
                p.appearance === null || p.appearance === undefined ? null : `look ${p.appearance.toFixed(2)}`,
                p.posterior === null || p.posterior === undefined ? null : `P(same) ${p.posterior.toFixed(2)}`,
                p.answer_impact ? `${p.answer_impact} answers` : null].filter(Boolean).join(" · ");
    // a side removed or the two renamed apart: the fixes decided the pair (as the metadata stage counts it)
    const state = p.removed ? "a side was removed" : p.decided_apart ? "renamed apart: two objects" :
      (p.merged ? "one instance" : "two instances") +
      (p.decided ? ` · decided: ${p.decided.decision}` + (p.decided.by ? ` by ${p.decided.by}` : "") : "");
    const actions = p.decided_apart ? [] : p.merged
      ? [el("button", {class: "keep-merged", onclick: () => pairAction(p, "merge")}, "keep merged"), " ",
         el("button", {class: "split-pair", title: `split clip ${p.clip_b} local ${p.local_b} out of #${p.instance_a}`, onclick: () => pairAction(p, "apart")}, `split #${p.instance_a}`)]
      : [el("button", {class: "merge-pair", title: `merge #${p.instance_b} into #${p.instance_a}`, onclick: () => pairAction(p, "merge")}, `merge #${p.instance_a} + #${p.instance_b}`), " ",
         el("button", {class: "keep-apart", onclick: () => pairAction(p, "apart")}, "keep apart")];
    return el("tr", {"data-pair": key, class: (S.focus === key ? "current " : "") + (p.decided || p.decided_apart ? "decided" : ""),
                     onclick: e => { if (e.target.tagName !== "BUTTON") { S.focus = key; showPair(p); renderReviewPairs(); } }},
      el("td", {}, p.concept), el("td", {class: "ids"}, ids),
      el("td", {}, `${p.clip_a} (${p.local_a}) · ${p.clip_b} (${p.local_b})`), el("td", {class: "muted"}, ev),
      el("td", {class: "muted"}, p.reason), el("td", {class: "state"}, state),
      el("td", {class: "actions"}, el("button", {title: "show and select both", onclick: () => showPair(p)}, "select"), " ", ...actions));
  });
  $("review-pairs").replaceChildren(head, ...(rows.length ? rows : [el("tr", {}, el("td", {colspan: 7, class: "muted"}, "none"))]));
}

function showPair(p) {
  S.selected = new Set([p.instance_a, p.instance_b].filter(i => i !== null));
  const a = instances().find(i => i.instance_id === p.instance_b) || instances().find(i => i.instance_id === p.instance_a);
  if (a) S.player.seek(a.first_time);
  renderAll();
}

function renderPending() { DRAFT.renderList($("pending"), () => renderAll()); $("undo").disabled = !DRAFT.canUndo; $("redo").disabled = !DRAFT.canRedo; }

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

// ------------------------------------------------------------------ the overlay: labels with the pending fixes
function labelOf(m) {
  // a mask's instance as the pending fixes make it: its clip-local member's instance now
  const members = S.memberMap, inst = S.instanceMap;
  if (!members) return {instance_id: m.instance_id, concept: m.concept};
  const now = members.get(`${m.clip}:${m.local_id}`);
  const id = now === undefined ? m.instance_id : now;
  return {instance_id: id, concept: id !== null && inst.has(id) ? inst.get(id).concept : m.concept};
}

function indexView() {
  S.memberMap = S.view.members ? new Map(S.view.members.map(m => [`${m.clip_index}:${m.local_id}`, m.instance_id])) : null;
  S.instanceMap = new Map(instances().map(i => [i.instance_id, i]));
}

// ------------------------------------------------------------------ drawing a track
function interp(frames, t) {
  // the box of a drawn track at time t (as the metadata stage lays it: linear between boxes,
  // held up to an out-of-view keyframe); null where it shows none
  for (let i = 0; i < frames.length; i++) {
    const a = frames[i], b = frames[i + 1];
    if (!a.box) continue;
    if (!b) return Math.abs(t - a.time) < S.info.sample_step / 2 ? a.box : null;
    if (t < a.time - 1e-6 || t > b.time + 1e-6) continue;
    if (b.outside) return t < b.time ? a.box : null;
    const u = (t - a.time) / (b.time - a.time);
    return a.box.map((p, j) => p + u * (b.box[j] - p));
  }
  return null;
}

function showDrawn() {
  // the track being drawn on the frame: its box at the timestamp shown (dashed)
  const fr = S.draw.frames, step = S.info.sample_step;
  S.player.extra = [];
  if (fr.length) {
    const k = S.player.current === undefined ? 0 : S.player.current, box = interp(fr, k * step);
    const id = S.draw.mode === "box" && selectedIds().length === 1 ? selectedIds()[0] : 0;
    if (box) S.player.extra = [{id, box, time: k * step, text: (S.draw.mode === "box" ? `#${id} new box` : `${$("add-concept").value || "new"} (drawn)`), dashed: true}];
  }
  const keys = fr.map(f => f.box ? `${fmtTime(f.time)} [${f.box.map(v => Math.round(v)).join(", ")}]` : `${fmtTime(f.time)} out of view`).join(" · ");
  const text = fr.length ? `keyframes: ${keys}` : (S.draw.mode ? "drag a box on the frame" : "");
  $(S.draw.mode === "box" ? "box-keys" : "draw-keys").textContent = text;
  $("drawbar-keys").textContent = S.draw.mode === "box" ? `new box of #${selectedIds()[0]} · ${text}` : `${$("add-concept").value || "new instance"} · ${text}`;
  $("draw-toggle").classList.toggle("on", S.draw.mode === "add"); $("box-draw").classList.toggle("on", S.draw.mode === "box");
  S.player.redraw();
}

function startDrawing(mode) {
  S.draw = {mode: S.draw.mode === mode ? null : mode, frames: []};
  S.player.setDrawing(S.draw.mode !== null);
  $("draw-keys").textContent = ""; $("box-keys").textContent = "";
  $("drawbar").hidden = S.draw.mode === null;
  if (S.draw.mode !== null) $("overlay").scrollIntoView({block: "nearest"});  // the frame to draw on, in view
  showDrawn();
}

function stopDrawing() { S.draw = {mode: null, frames: []}; S.player.setDrawing(false); $("drawbar").hidden = true; showDrawn(); }

function addKeyframe(k) {
  const fr = S.draw.frames.filter(f => Math.abs(f.time - k.time) > 1e-6);
  fr.push(k); fr.sort((a, b) => a.time - b.time);
  S.draw.frames = fr;
  showDrawn();
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
  const nice = [0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
  const tick = nice.find(s => span / s <= (W - GUTTER) / 70) || 3600;
  g.fillStyle = "#66707a"; g.strokeStyle = "#e5e9ed";
  for (let t = Math.ceil(S.t0 / tick) * tick; t <= S.t1; t += tick) {
    g.beginPath(); g.moveTo(x(t), AXIS - 4); g.lineTo(x(t), H); g.stroke();
    g.fillText(fmtTime(t), x(t) + 2, 8);
  }
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
  if (!S.view) return;
  indexView();
  renderInstances(); renderOps(); renderReviewPairs(); renderPending(); renderOrders(); renderVoc(); drawTimeline();
  S.player.highlight = new Set(S.selected); showDrawn();
}

// ------------------------------------------------------------------ controls
function setupOps() {
  $("rename-add").onclick = async () => {
    const from = $("rename-from").value, to = $("rename-to").value.trim();
    const op = {op: "rename_concept", from, to};
    if ($("rename-selected").checked) op.instances = selectedIds();
    if (await addFixes([op], $("rename-error"))) {
      // the renamed concept stays chosen under its new name; the box is cleared for the next one
      $("rename-from").value = to; $("rename-to").value = "";
      S.player.redraw();
    }
  };
  $("merge-add").onclick = () => addFixes([{op: "merge", instances: selectedIds()}], $("merge-error"));
  $("split-add").onclick = () => {
    const v = $("split-member").value;
    if (!v) { $("split-error").textContent = "select the instance whose member to split"; return; }
    const [clip, local_id] = v.split(":").map(Number);
    addFixes([{op: "split", clip, local_id}], $("split-error"));
  };
  $("split-at-add").onclick = () => {
    const sel = selectedIds();
    if (sel.length !== 1) { $("split-error").textContent = "select one instance"; return; }
    addFixes([{op: "split_at", instance: sel[0], time: now()}], $("split-error"));
  };
  $("remove-add").onclick = () => addFixes(selectedIds().map(i => ({op: "remove_instance", instance: i})), $("remove-error"));
  $("add-start-now").onclick = () => { $("add-start").value = Math.round(now() * 10) / 10; };
  $("add-end-now").onclick = () => { $("add-end").value = Math.round(now() * 10) / 10; };
  $("add-span-add").onclick = () => {
    const s = Number($("add-start").value), e = Number($("add-end").value);
    addFixes([{op: "add_instance", concept: $("add-concept").value.trim(), spans: [[s, e]]}], $("add-error"));
  };
  $("draw-toggle").onclick = () => startDrawing("add");
  $("box-draw").onclick = () => {
    if (selectedIds().length !== 1) { $("box-error").textContent = "select one instance"; return; }
    startDrawing("box");
  };
  $("draw-cancel").onclick = stopDrawing;
  $("drawbar-cancel").onclick = stopDrawing;
  $("drawbar-outside").onclick = () => $("draw-outside").click();
  $("drawbar-done").onclick = () => (S.draw.mode === "box" ? $("box-apply") : $("add-add")).click();
  $("draw-outside").onclick = () => { if (S.draw.frames.length) addKeyframe({time: now(), outside: true}); };
  $("add-add").onclick = async () => {
    if (!S.draw.frames.length) { $("add-error").textContent = "draw its box on the frame first (draw boxes), or add it by time"; return; }
    if (await addFixes([{op: "add_instance", concept: $("add-concept").value.trim(), boxes: S.draw.frames}], $("add-error"))) stopDrawing();
    else $("drawbar-keys").textContent = $("add-error").textContent;
  };
  $("box-apply").onclick = async () => {
    const sel = selectedIds();
    if (sel.length !== 1 || !S.draw.frames.length) { $("box-error").textContent = "select one instance and draw its box"; return; }
    if (await addFixes([{op: "set_box", instance: sel[0], boxes: S.draw.frames}], $("box-error"))) stopDrawing();
    else $("drawbar-keys").textContent = $("box-error").textContent;
  };
  const appearance = key => {
    const sel = selectedIds();
    if (sel.length !== 1) { $("appearance-error").textContent = "select one instance"; return; }
    addFixes([{op: "set_appearance", instance: sel[0], [key]: Math.round(now() * 10) / 10}], $("appearance-error"));
  };
  $("first-now").onclick = () => appearance("first_time");
  $("last-now").onclick = () => appearance("last_time");
  $("undo").onclick = async () => { if (await DRAFT.undo()) renderPending(); };
  $("redo").onclick = async () => { if (await DRAFT.redo()) renderPending(); };
  $("save").onclick = save;
  $("restore").onclick = restore;
  $("rederive").onclick = runRederive;
  $("verified").onchange = async e => {
    S.progress = await saveProgress({temporal_verified: e.target.checked});
    status(e.target.checked ? "marked verified" : "marked not verified");
  };
  $("show-masks").onchange = e => { S.player.showMasks = e.target.checked; S.player.redraw(); };
  $("show-boxes").onchange = e => { S.player.showBoxes = e.target.checked; S.player.redraw(); };
  undoKeys(DRAFT, () => renderPending());
  document.addEventListener("keydown", e => {
    if (typing(e) || e.ctrlKey || e.metaKey || e.altKey) return;
    const v = S.player.video, fps = S.info.video.fps, pairs = (S.view && S.view.review_pairs) || [];
    const focused = pairs.find(p => `${p.clip_a}:${p.local_a}:${p.clip_b}:${p.local_b}` === S.focus);
    if (e.key === " ") { e.preventDefault(); v.paused ? v.play() : v.pause(); }
    else if (e.key === "ArrowLeft") { e.preventDefault(); S.player.seek(v.currentTime - (e.shiftKey ? 10 : 1)); }
    else if (e.key === "ArrowRight") { e.preventDefault(); S.player.seek(v.currentTime + (e.shiftKey ? 10 : 1)); }
    else if (e.key === ",") { v.pause(); S.player.seek(v.currentTime - 1 / fps); }
    else if (e.key === ".") { v.pause(); S.player.seek(v.currentTime + 1 / fps); }
    else if (e.key === "b") startDrawing("add");
    else if ((e.key === "m" || e.key === "a") && focused && !focused.decided_apart) pairAction(focused, e.key === "m" ? "merge" : "apart");
    else if (e.key === "j" && pairs.length) {  // the next pair not decided yet
      const i = pairs.findIndex(p => `${p.clip_a}:${p.local_a}:${p.clip_b}:${p.local_b}` === S.focus);
      const next = pairs.slice(i + 1).concat(pairs.slice(0, i + 1)).find(p => !p.decided && !p.decided_apart) || pairs[(i + 1) % pairs.length];
      S.focus = `${next.clip_a}:${next.local_a}:${next.clip_b}:${next.local_b}`; showPair(next);
    }
  });
  document.addEventListener("visibilitychange", async () => {
    // back from another tab: the draft or the file may have changed there
    if (document.visibilityState === "visible" && S.view) { await DRAFT.refresh(); renderHistory(); renderAll(); }
  });
}

async function load(again) {
  const info = await api(`/api/videos/${encodeURIComponent(VID)}`);
  S.info = info; S.progress = info.progress;
  DRAFT.load(info);
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
  S.view = info.preview || {instances: info.instances, appearance: info.appearance, voc: info.voc, motion: info.motion,
                            review_pairs: info.review_pairs, members: null};
  if (!again) {
    S.player = new MaskPlayer($("video"), $("overlay"), info, {
      onTime: t => { $("time").textContent = fmtTime(t); drawTimeline(); if (S.draw.frames.length) showDrawn(); },
      labelOf,
      onPick: id => { S.selected.has(id) ? S.selected.delete(id) : S.selected.add(id); renderAll(); },
      onBox: (box, t) => addKeyframe({time: Math.round(t * 1000) / 1000, box}),
    });
    S.t0 = 0; S.t1 = info.video.duration_s;
    setupTimeline(); setupOps();
    const focus = new URLSearchParams(location.search).get("pair");
    if (focus) S.focus = focus;
    const at = Number(new URLSearchParams(location.search).get("t"));  // a moment to open at (a speck's)
    if (at > 0) S.player.seek(at);
  } else { S.player.info = info; S.player.cache.clear(); S.player.redraw(); S.player.draw(S.player.video.currentTime); }
  renderHistory(); renderAll();
  window.pageReady = true;
  status(`${instances().length} instances · fix file ${info.fixes.sha256 === "none" ? "not written yet" : "loaded"}` +
         (DRAFT.dirty() ? ` · ${DRAFT.edits.length} pending edit(s) from your draft` : ""));
}

header("temporal");
load().catch(e => status(e.message, true));
