// The spatial page (VMR): the motion clips, a pivot set from the keyboard (on the 2 FPS grid the
// motion is sampled on, shown as such), the direction set on a compass (sectors of the answers
// drawn; in grey the automatic estimate at the pivot), "no meaningful motion", a coherence warning.
"use strict";
const M = {info: null, motion: [], clip: 0, pivot: null, angle: null, progress: null};
const $ = id => document.getElementById(id);
const VID = videoId();
const SECTORS = ["forward", "forward-right", "right", "backward-right", "backward", "backward-left", "left", "forward-left"];
const COHERENCE_DEG = 90;  // adjacent clips whose directions differ more are flagged
const DRAFT = new Draft(VID, res => { M.motion = res.motion; selectClip(M.clip, false); renderPending(); });
DRAFTS.push(DRAFT);

function wrap(a) { return ((a + 180) % 360 + 360) % 360 - 180; }
function sector(a) { return SECTORS[((Math.floor((a + 22.5) / 45) % 8) + 8) % 8]; }
function video() { return $("video"); }
function step() { return M.info.sample_step; }
function snap(t) { return Math.round(Math.round(t / step()) * step() * 1000) / 1000; }
function clipAt(t) { return M.motion.find(c => t >= c.clip_start && t < c.clip_end) || M.motion[M.motion.length - 1]; }
function autoAngle(t) {
  // the pose track's direction at the 2 FPS timestamp of t: what a pivot-only fix takes there
  const s = M.info.motion_samples;
  if (!s || !s.time.length || t === null || t === undefined) return null;
  let i = Math.round(t / step());
  i = Math.max(0, Math.min(s.time.length - 1, i));
  return s.angle_deg[i];
}
function pendingFix(index) {
  const add = DRAFT.edits.filter(e => e.kind === "add" && e.fix.op === "motion" && e.fix.clip === index);
  return add.length ? add[add.length - 1].fix : null;
}

function selectClip(index, seek) {
  M.clip = index;
  const c = M.motion[index];
  const pending = pendingFix(index);
  M.pivot = pending && pending.pivot_time !== undefined ? pending.pivot_time : c.pivot_time;
  M.angle = pending && pending.angle_deg !== undefined ? pending.angle_deg : c.angle_deg;
  M.note = "";
  if (seek) video().currentTime = M.pivot !== null ? M.pivot : c.clip_start;
  render();
}

// ------------------------------------------------------------------ compass
function drawCompass() {
  const c = $("compass"), g = c.getContext("2d"), W = c.width, R = W / 2 - 24, cx = W / 2, cy = W / 2;
  g.clearRect(0, 0, W, W);
  g.font = "11px system-ui"; g.textAlign = "center"; g.textBaseline = "middle";
  for (let k = 0; k < 8; k++) {
    // sector k covers [45k - 22.5, 45k + 22.5) degrees clockwise from forward (up)
    const a0 = (45 * k - 22.5 - 90) * Math.PI / 180, a1 = (45 * k + 22.5 - 90) * Math.PI / 180;
    g.beginPath(); g.moveTo(cx, cy); g.arc(cx, cy, R, a0, a1); g.closePath();
    g.fillStyle = k % 2 ? "#f3f6f9" : "#e6ecf1"; g.fill(); g.strokeStyle = "#c7d0d8"; g.stroke();
    const am = (45 * k - 90) * Math.PI / 180;
    g.fillStyle = "#45505a"; g.fillText(SECTORS[k].replace("forward", "fwd").replace("backward", "back"), cx + (R + 12) * Math.cos(am), cy + (R + 12) * Math.sin(am));
  }
  const arrow = (deg, colour, width) => {
    const a = (deg - 90) * Math.PI / 180, x = cx + R * 0.9 * Math.cos(a), y = cy + R * 0.9 * Math.sin(a);
    g.strokeStyle = colour; g.fillStyle = colour; g.lineWidth = width;
    g.beginPath(); g.moveTo(cx, cy); g.lineTo(x, y); g.stroke();
    g.beginPath(); g.arc(x, y, width + 2, 0, 2 * Math.PI); g.fill(); g.lineWidth = 1;
  };
  const c0 = M.motion[M.clip];
  const auto = autoAngle(M.pivot !== null && M.pivot !== undefined ? M.pivot : c0 && c0.pivot_time);
  M.drawnAuto = auto;
  $("auto-angle").textContent = auto === null || auto === undefined ? "none" : `${Math.round(auto)}°, ${sector(auto)}`;
  if (auto !== null && auto !== undefined) arrow(auto, "#9aa5ae", 7);  // wide: it shows around the blue one on it
  if (M.angle !== null && M.angle !== undefined) arrow(M.angle, "#1565c0", 4);
}

function setupCompass() {
  const c = $("compass");
  let dragging = false;
  const angleAt = e => {
    const r = c.getBoundingClientRect(), x = e.clientX - r.left - r.width / 2, y = e.clientY - r.top - r.height / 2;
    return Math.round(wrap(Math.atan2(x, -y) * 180 / Math.PI));
  };
  c.addEventListener("pointerdown", e => { dragging = true; c.setPointerCapture(e.pointerId); M.angle = angleAt(e); render(); });
  c.addEventListener("pointermove", e => { if (dragging) { M.angle = angleAt(e); render(); } });
  c.addEventListener("pointerup", () => { dragging = false; });
}

// ------------------------------------------------------------------ fixes
async function setMotionFix(op) {
  await DRAFT.add([op], $("motion-error"));
  renderPending();
}

function applyPivotAngle() {
  const op = {op: "motion", clip: M.clip};
  if (M.pivot !== null && M.pivot !== undefined) op.pivot_time = M.pivot;
  if (M.angle !== null && M.angle !== undefined) op.angle_deg = Math.round(wrap(M.angle) * 10) / 10;
  return setMotionFix(op);
}

async function save() {
  $("save-error").textContent = ""; $("motion-error").textContent = "";
  try {
    const res = await DRAFT.save();
    renderPending();
    for (const f of res.failed) $(f.edit.fix.op === "motion" ? "motion-error" : "save-error").textContent =
      `not saved, no longer applies: ${f.error.field ? f.error.field + ": " : ""}${f.error.reason || f.error.error}`;
    status(`saved ${res.path}` + (res.failed.length ? ` · ${res.failed.length} pending fix(es) no longer apply` : ""), res.failed.length > 0);
  } catch (e) { $("save-error").textContent = `not saved: ${fixError(e)}`; }
}

async function markVerified(on) {
  M.progress = await saveProgress({clip: M.clip, clip_verified: on});
  render();
}

// ------------------------------------------------------------------ rendering
function renderPending() { DRAFT.renderList($("pending"), () => render()); $("undo").disabled = !DRAFT.canUndo; $("redo").disabled = !DRAFT.canRedo; }

function render() {
  const t = video().currentTime, cur = clipAt(t);
  $("time").textContent = fmtTime(t);
  $("frame").textContent = Math.round(t * M.info.video.fps);
  $("clip").textContent = cur ? cur.clip_index : "–";
  $("sel-clip").textContent = M.clip;
  $("sel-pivot").textContent = M.pivot === null || M.pivot === undefined ? "–" : fmtTime(M.pivot);
  $("pivot-note").textContent = M.note || "";
  $("sel-angle").textContent = M.angle === null || M.angle === undefined ? "–" : `${Math.round(M.angle)}°`;
  $("sel-sector").textContent = M.angle === null || M.angle === undefined ? "–" : sector(M.angle);
  $("clip-verified").checked = M.progress.clips_verified.includes(M.clip);
  const verified = new Set(M.progress.clips_verified);
  $("clips").replaceChildren(
    el("tr", {}, ...["clip", "start", "end", "pivot", "angle", "direction", "state", "origin", "verified"].map(h => el("th", {}, h))),
    ...M.motion.map(c => el("tr", {class: c.clip_index === M.clip ? "current" : null, "data-clip": c.clip_index,
                                   onclick: () => selectClip(c.clip_index, true), style: "cursor: pointer"},
      el("td", {}, c.clip_index), el("td", {}, fmtTime(c.clip_start)), el("td", {}, fmtTime(c.clip_end)),
      el("td", {}, c.pivot_time === null ? "–" : fmtTime(c.pivot_time)),
      el("td", {class: "num"}, c.angle_deg === null ? "–" : `${Math.round(c.angle_deg)}°`),
      el("td", {}, c.angle_deg === null ? "–" : sector(c.angle_deg)),
      el("td", {class: c.state === "ok" ? "ok" : c.state === "failed" ? "error" : "muted", title: c.reason || ""}, c.state),
      el("td", {}, c.origin), el("td", {}, verified.has(c.clip_index) ? "✓" : ""))));
  const warnings = [];
  for (let i = 1; i < M.motion.length; i++) {
    const a = M.motion[i - 1], b = M.motion[i];
    if (a.state === "ok" && b.state === "ok" && Math.abs(wrap(a.angle_deg - b.angle_deg)) > COHERENCE_DEG) {
      warnings.push(`clips ${a.clip_index} and ${b.clip_index}: ${sector(a.angle_deg)} then ${sector(b.angle_deg)} ` +
                    `(${Math.round(Math.abs(wrap(a.angle_deg - b.angle_deg)))}° apart): check both directions`);
    }
  }
  $("coherence").replaceChildren(...warnings.map(w => el("p", {class: "warning"}, "⚠ not temporally coherent: " + w)));
  drawCompass();
}

function setupKeys() {
  undoKeys(DRAFT, () => renderPending());
  document.addEventListener("keydown", e => {
    if (typing(e) || e.ctrlKey || e.metaKey || e.altKey) return;
    const v = video(), frame = 1 / M.info.video.fps, d = M.info.video.duration_s;
    const seek = t => { v.currentTime = Math.max(0, Math.min(d, t)); };
    if (e.key === " ") { e.preventDefault(); v.paused ? v.play() : v.pause(); }
    else if (e.key === "ArrowLeft") { e.preventDefault(); seek(v.currentTime - (e.shiftKey ? 10 : 1)); }
    else if (e.key === "ArrowRight") { e.preventDefault(); seek(v.currentTime + (e.shiftKey ? 10 : 1)); }
    else if (e.key === ",") { v.pause(); seek(v.currentTime - frame); }
    else if (e.key === ".") { v.pause(); seek(v.currentTime + frame); }
    else if (e.key === "p" || e.key === "P") {
      // the pivot is a 2 FPS timestamp (the metadata stage snaps it there): take that one, say so,
      // and show its frame
      const c = clipAt(v.currentTime), other = M.clip !== c.clip_index;
      if (other) selectClip(c.clip_index, false);
      const t = Math.round(v.currentTime * 1000) / 1000, snapped = snap(t);
      M.pivot = snapped;
      M.note = Math.abs(snapped - t) > 1e-3 ? `pivot ${fmtTime(snapped)}: the 2 FPS timestamp nearest ${fmtTime(t)} (motion is sampled at 2 FPS)` : "";
      if (M.angle === null || M.angle === undefined) M.angle = autoAngle(snapped);
      v.pause(); seek(snapped);
      render();
    }
    else if (e.key === "y") markVerified(true);
    else if (e.key === "x") setMotionFix({op: "motion", clip: M.clip, state: "none"});
    else if (e.key === "j") selectClip((M.clip + 1) % M.motion.length, true);
  });
}

async function load() {
  const info = await api(`/api/videos/${encodeURIComponent(VID)}`);
  M.info = info; M.progress = info.progress;
  DRAFT.load(info);
  if (!info.motion) { status(`metadata ${info.metadata.state}: ${info.metadata.error || ""}`, true); return; }
  M.motion = info.preview ? info.preview.motion : info.motion;
  const v = video();
  if (M.setUp) { selectClip(M.clip, false); renderPending(); return; }  // reloaded after a re-derive
  M.setUp = true;
  v.src = `/api/videos/${encodeURIComponent(VID)}/media`;
  controlBar(v, info.video.duration_s, info.video.fps);
  v.addEventListener("timeupdate", render);
  v.addEventListener("seeked", render);
  setupKeys(); setupCompass();
  $("apply").onclick = applyPivotAngle;
  $("none").onclick = () => setMotionFix({op: "motion", clip: M.clip, state: "none"});
  $("clip-verified").onchange = e => markVerified(e.target.checked);
  $("undo").onclick = async () => { if (await DRAFT.undo()) renderPending(); };
  $("redo").onclick = async () => { if (await DRAFT.redo()) renderPending(); };
  $("save").onclick = save;
  $("rederive").onclick = async () => {
    try {
      const job = await rederive(j => showJob($("job"), j));
      if (job.state === "done") { await load(); }
    } catch (e) { $("job").textContent = e.message; }
  };
  const want = Number(new URLSearchParams(location.search).get("clip"));
  selectClip(Number.isInteger(want) && want < M.motion.length ? want : 0, Number.isInteger(want) && want > 0);
  renderPending();
  document.addEventListener("visibilitychange", async () => {
    if (document.visibilityState === "visible") { await DRAFT.refresh(); renderPending(); }
  });
  window.pageReady = true;
}

header("spatial");
load().catch(e => status(e.message, true));
