// Shared by every page: the token, the reviewer, JSON calls, colours, time formatting, the page
// header, the reviewer's draft (pending fixes kept on the server), the keyboard.
"use strict";
const TOKEN = document.querySelector('meta[name="verify-token"]').content;
const REVIEWER_KEY = "vsi-verify-reviewer";

function reviewerName() { return localStorage.getItem(REVIEWER_KEY) || ""; }

async function api(path, body) {
  // GET without a body; POST (with the session token) with one. Errors become exceptions with
  // the server's JSON ({error, file, line, field, ...}) on e.body.
  const headers = body === undefined ? {} : {"Content-Type": "application/json", "X-Verify-Token": TOKEN};
  if (reviewerName()) headers["X-Verify-Reviewer"] = reviewerName();
  const opts = body === undefined ? {headers} : {method: "POST", body: JSON.stringify(body), headers};
  const r = await fetch(path, opts);
  const data = await r.json().catch(() => ({error: r.statusText}));
  if (!r.ok) { const e = new Error(data.error || r.statusText); e.body = data; e.status = r.status; throw e; }
  return data;
}

function colour(id, alpha) {
  // a distinct hue per instance id (golden angle), the same on every page
  const h = (id * 137.508) % 360;
  return alpha === undefined ? `hsl(${h}, 80%, 45%)` : `hsla(${h}, 80%, 45%, ${alpha})`;
}

function rgb(id) {
  const h = ((id * 137.508) % 360) / 360, s = 0.8, l = 0.45;
  const q = l < 0.5 ? l * (1 + s) : l + s - l * s, p = 2 * l - q;
  const f = t => { t = (t + 1) % 1; return t < 1 / 6 ? p + (q - p) * 6 * t : t < 1 / 2 ? q : t < 2 / 3 ? p + (q - p) * (2 / 3 - t) * 6 : p; };
  return [f(h + 1 / 3), f(h), f(h - 1 / 3)].map(v => Math.round(v * 255));
}

function fmtTime(t) {
  if (t === null || t === undefined) return "";
  const h = Math.floor(t / 3600), m = Math.floor(t / 60) % 60, s = (t % 60).toFixed(1).padStart(4, "0");
  return (h ? `${h}:${String(m).padStart(2, "0")}` : `${m}`) + `:${s}`;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== false && v !== null && v !== undefined) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

function provisionalNote(reason, tag, bound) {
  // a question whose answer rests on reconciliation decisions no person has reviewed: why, in full
  // (the reason names up to 3 decisions; a long one wraps, the list's one-line form ellipsises and
  // so leads with VOC's bound on P(wrong answer), when given, where the reason's opening is generic)
  const lead = bound === null || bound === undefined ? "" : `P(wrong answer) ≤ ${bound.toFixed(2)} · `;
  return el(tag || "p", {class: "provisional", title: `provisional: ${reason || ""}`},
    el("b", {}, "provisional:"), " ", lead + (reason || ""));
}

function verdictHolds(fix, q) {
  // a review_question verdict still stands for the question as shown: a rejection always; an
  // accept while the question gives the answers the person saw (stages/qa/provisional.py verdict_holds)
  return fix.verdict !== "accept" || !fix.answers || JSON.stringify(fix.answers) === JSON.stringify(q.answers);
}

function videoId() {
  // /videos/<id>[/spatial|/questions]
  return decodeURIComponent(location.pathname.split("/")[2] || "");
}

function header(here) {
  const vid = here === "queue" || here === "vocabulary" ? "" : videoId();
  const nav = el("nav", {}, el("a", {href: "/queue", class: here === "queue" ? "here" : null}, "Queue"),
                 el("a", {href: "/", class: here === "videos" ? "here" : null}, "Videos"),
                 el("a", {href: "/vocabulary", class: here === "vocabulary" ? "here" : null}, "Vocabulary"),
                 el("a", {href: "/report"}, "Report"));
  if (vid) {
    const base = `/videos/${encodeURIComponent(vid)}`;
    nav.append(el("a", {href: base, class: here === "temporal" ? "here" : null}, "Temporal"),
               el("a", {href: `${base}/spatial`, class: here === "spatial" ? "here" : null}, "Spatial"),
               el("a", {href: `${base}/questions`, class: here === "questions" ? "here" : null}, "Questions"));
  }
  const who = el("span", {id: "reviewer", class: "reviewer", title: "fixes are recorded under this name; click to change"},
                 "reviewer: ", el("b", {}, reviewerName() || "…"));
  who.onclick = () => {
    const name = prompt("Your reviewer name (letters, digits, . _ -)", reviewerName());
    if (name !== null && /^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$/.test(name.trim())) { localStorage.setItem(REVIEWER_KEY, name.trim()); location.reload(); }
  };
  document.body.prepend(el("header", {}, el("h1", {}, "vsi-wild verify" + (vid ? ` · ${vid}` : "")), nav,
                           el("span", {id: "status", class: "muted"}), who));
  api("/api/reviewer").then(r => { who.querySelector("b").textContent = r.reviewer; }).catch(() => {});
}

function status(text, bad) {
  const s = document.getElementById("status");
  s.textContent = text; s.className = bad ? "error" : "muted";
}

async function saveProgress(change, vid) {
  // one mark ({temporal_verified}, {clip, clip_verified}, {question, verdict}); the server applies it
  // to the marks as they are now and returns them
  return api(`/api/videos/${encodeURIComponent(vid || videoId())}/progress`, {progress: change});
}

async function rederive(onUpdate) {
  // start the re-derive of this video and poll it; onUpdate(job) on every poll
  let job = await api(`/api/videos/${encodeURIComponent(videoId())}/rederive`, {});
  while (job.state === "running") {
    onUpdate(job);
    await new Promise(r => setTimeout(r, 500));
    job = await api(`/api/jobs/${job.id}`);
  }
  onUpdate(job);
  return job;
}

function jobText(job) {
  const ends = job.events.filter(e => e.event === "end");
  const last = ends[ends.length - 1];
  const failed = ends.filter(e => e.state === "failed");
  let t = `re-derive ${job.state}: ${ends.length} / ${job.total} units` + (last ? ` (last ${last.stage}:${last.unit} ${last.state})` : "");
  if (failed.length) t += "\n" + failed.map(e => `${e.stage}:${e.unit}: ${e.error}`).join("\n");
  if (job.error) t += "\n" + job.error;
  return t;
}

function showJob(box, job) {
  // the re-derive's progress: a bar (units done of the total) and the text
  const done = job.events.filter(e => e.event === "end").length;
  box.replaceChildren(el("progress", {class: "job", max: Math.max(1, job.total), value: Math.min(done, job.total)}), " ", jobText(job));
}

function fixError(e) {
  // a refused fix as a person reads it: the field and the pipeline's reason
  return e.body && e.body.reason ? `${e.body.field ? e.body.field + ": " : ""}${e.body.reason}` : e.message;
}

function describeFix(f) {
  const rest = Object.entries(f).filter(([k]) => !["op", "by", "at"].includes(k))
    .map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join(", ");
  return `${f.op} ${rest}`;
}

// ------------------------------------------------------------------ the player's controls
function controlBar(video, duration, fps) {
  // play/pause, scrubber, time, frame steps, speed: under the frame, never over it
  const play = el("button", {class: "play-pause", title: "play / pause (space)"}, "▶");
  const scrub = el("input", {type: "range", class: "scrub", min: 0, max: duration, step: "any", value: 0, title: "seek"});
  const time = el("span", {class: "clock"}, `0:00.0 / ${fmtTime(duration)}`);
  const back = el("button", {class: "frame-back", title: "one frame back (,)"}, "−1f");
  const fwd = el("button", {class: "frame-fwd", title: "one frame on (.)"}, "+1f");
  const speed = el("select", {class: "speed", title: "playback speed"}, ...[0.25, 0.5, 1, 2, 4].map(r => el("option", {value: r, selected: r === 1}, `${r}×`)));
  const seek = t => { video.currentTime = Math.max(0, Math.min(duration, t)); };
  play.onclick = () => { video.paused ? video.play() : video.pause(); };
  scrub.oninput = () => seek(Number(scrub.value));
  back.onclick = () => { video.pause(); seek(video.currentTime - 1 / fps); };
  fwd.onclick = () => { video.pause(); seek(video.currentTime + 1 / fps); };
  speed.onchange = () => { video.playbackRate = Number(speed.value); };
  const update = () => {
    play.textContent = video.paused ? "▶" : "⏸";
    if (document.activeElement !== scrub) scrub.value = video.currentTime;
    time.textContent = `${fmtTime(video.currentTime)} / ${fmtTime(duration)}`;
  };
  for (const ev of ["play", "pause", "timeupdate", "seeked", "loadedmetadata"]) video.addEventListener(ev, update);
  const bar = el("div", {class: "controls"}, play, back, fwd, scrub, time, speed);
  (video.closest(".player") || video).after(bar);  // under the frame and its overlay, not inside them
  return bar;
}

// ------------------------------------------------------------------ the reviewer's draft
// Pending fixes live on the server, one draft per video and reviewer, changed one action at a
// time (add, drop a saved fix, discard a pending one, undo, redo): every page of the video shares
// it, and a reload, a second tab or a closed browser loses nothing. A save rebases the draft onto
// the fix file as it is then; an edit that no longer applies comes back with its error.
class Draft {
  constructor(vid, onPreview) { this.vid = vid; this.onPreview = onPreview; this.file = []; this.edits = []; this.failed = []; }
  load(info) {
    this.file = info.fixes.fixes || []; this.history = info.fixes.history || []; this.sha = info.fixes.sha256;
    this.setDraft(info.draft || {edits: [], failed: []});
  }
  setDraft(d) { this.edits = d.edits; this.failed = d.failed || []; this.canUndo = !!d.can_undo; this.canRedo = !!d.can_redo; }
  dirty() { return this.edits.length > 0; }
  async act(body, errorBox) {
    if (errorBox) errorBox.textContent = "";
    try {
      const res = await api(`/api/videos/${encodeURIComponent(this.vid)}/draft`, body);
      this.setDraft(res.draft);
      this.onPreview(res.preview);
      return true;
    } catch (e) {
      if (errorBox) errorBox.textContent = fixError(e); else status(fixError(e), true);
      return false;
    }
  }
  add(fixes, errorBox) { return this.act({action: "add", fixes}, errorBox); }
  drop(fix) { return this.act({action: "drop", fixes: [fix]}); }
  discard(i) { return this.act({action: "discard", index: i}); }
  undo() { return this.act({action: "undo"}); }
  redo() { return this.act({action: "redo"}); }
  async save() {
    const res = await api(`/api/videos/${encodeURIComponent(this.vid)}/fixes`, {});
    this.file = res.fixes.fixes; this.history = res.history; this.sha = res.sha256;
    this.setDraft(res.draft);
    if (res.preview) this.onPreview(res.preview);
    return res;
  }
  async saveOnly(edits) {
    // save these edits now (a question's verdict, a queue decision), rebased; the draft stays as it is
    const res = await api(`/api/videos/${encodeURIComponent(this.vid)}/fixes`, {edits});
    this.file = res.fixes.fixes; this.history = res.history; this.sha = res.sha256;
    if (res.failed.length) { const e = new Error(res.failed[0].error.error); e.body = res.failed[0].error; throw e; }
    return res;
  }
  async refresh() {
    // another tab may have changed the draft or the file: take the server's
    const info = await api(`/api/videos/${encodeURIComponent(this.vid)}`);
    this.load(info);
    if (info.preview) this.onPreview(info.preview);
    return info;
  }
  renderList(ol, onChange) {
    // the saved fixes (✕ drops one: a pending edit) and the pending edits (✕ discards one)
    const dropped = this.edits.filter(e => e.kind === "drop").map(e => JSON.stringify(e.fix));
    const failed = new Map(this.failed.map(f => [JSON.stringify(f.edit), f.error]));
    const saved = this.file.map(f => el("li", {class: "saved" + (dropped.includes(JSON.stringify(f)) ? " dropped" : "")},
      el("span", {class: "tag"}, "saved"), " ", describeFix(f), f.by ? el("span", {class: "muted"}, ` · ${f.by}`) : null, " ",
      dropped.includes(JSON.stringify(f)) ? null : el("button", {class: "drop", title: "drop this saved fix (pending until you save)",
        onclick: async () => { await this.drop(f); onChange(); }}, "✕")));
    const pending = this.edits.map((e, i) => {
      const err = failed.get(JSON.stringify(e));
      return el("li", {class: "pending" + (err ? " failed" : "")},
        el("span", {class: "tag"}, e.kind === "add" ? "pending" : "pending drop"), " ", describeFix(e.fix), " ",
        el("button", {class: "discard", title: "discard this pending edit", onclick: async () => { await this.discard(i); onChange(); }}, "✕"),
        err ? el("div", {class: "error"}, `no longer applies: ${err.reason || err.error}`) : null);
    });
    ol.replaceChildren(...saved, ...pending);
    if (!saved.length && !pending.length) ol.replaceChildren(el("li", {class: "none muted"}, "no fixes yet"));
  }
}

const DRAFTS = [];  // the page's drafts: leaving with pending edits asks first
window.addEventListener("beforeunload", e => {
  if (DRAFTS.some(d => d.dirty())) { e.preventDefault(); e.returnValue = ""; }
});

function typing(e) {
  const t = e.target;
  return t && (t.tagName === "INPUT" && !["checkbox", "radio", "range", "button"].includes(t.type) || t.tagName === "SELECT" || t.tagName === "TEXTAREA" || t.isContentEditable);
}

// `n` on a video's page: the review queue's next open item (the queue page has its own keys)
document.addEventListener("keydown", e => {
  if (typing(e) || e.ctrlKey || e.metaKey || e.altKey || e.key !== "n" || location.pathname.startsWith("/queue")) return;
  location.href = "/queue";
});

function undoKeys(draft, after) {
  // ctrl+z undo, ctrl+shift+z / ctrl+y redo (not while typing in a field)
  document.addEventListener("keydown", async e => {
    if (typing(e) || !(e.ctrlKey || e.metaKey)) return;
    const k = e.key.toLowerCase();
    if (k === "z" && !e.shiftKey) { e.preventDefault(); if (await draft.undo()) after(); }
    else if ((k === "z" && e.shiftKey) || k === "y") { e.preventDefault(); if (await draft.redo()) after(); }
  });
}
