// Shared by every page: the token, JSON calls, colours, time formatting, the page header.
"use strict";
const TOKEN = document.querySelector('meta[name="verify-token"]').content;

async function api(path, body) {
  // GET without a body; POST (with the session token) with one. Errors become exceptions with
  // the server's JSON ({error, file, line, field, ...}) on e.body.
  const opts = body === undefined ? {} : {
    method: "POST", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json", "X-Verify-Token": TOKEN},
  };
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

function videoId() {
  // /videos/<id>[/spatial|/questions]
  return decodeURIComponent(location.pathname.split("/")[2] || "");
}

function header(here) {
  const vid = videoId();
  const nav = el("nav", {}, el("a", {href: "/", class: here === "videos" ? "here" : null}, "Videos"),
                 el("a", {href: "/report"}, "Report"));
  if (vid) {
    const base = `/videos/${encodeURIComponent(vid)}`;
    nav.append(el("a", {href: base, class: here === "temporal" ? "here" : null}, "Temporal"),
               el("a", {href: `${base}/spatial`, class: here === "spatial" ? "here" : null}, "Spatial"),
               el("a", {href: `${base}/questions`, class: here === "questions" ? "here" : null}, "Questions"));
  }
  document.body.prepend(el("header", {}, el("h1", {}, "vsi-wild verify" + (vid ? ` · ${vid}` : "")), nav,
                           el("span", {id: "status", class: "muted"})));
}

function status(text, bad) {
  const s = document.getElementById("status");
  s.textContent = text; s.className = bad ? "error" : "muted";
}

async function saveProgress(progress) {
  return api(`/api/videos/${encodeURIComponent(videoId())}/progress`, {progress});
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
  let t = `re-derive ${job.state}: ${ends.length} units done` + (last ? ` (last ${last.stage}:${last.unit} ${last.state})` : "");
  if (failed.length) t += "\n" + failed.map(e => `${e.stage}:${e.unit}: ${e.error}`).join("\n");
  if (job.error) t += "\n" + job.error;
  return t;
}
