// The videos page: every view video of the data root with its verification progress.
"use strict";
const COLUMNS = [
  {key: "video_id", label: "video"},
  {key: "source_id", label: "source"},
  {key: "view", label: "view"},
  {key: "duration_s", label: "duration", num: true, show: r => fmtTime(r.duration_s)},
  {key: "metadata_state", label: "metadata", show: r => r.metadata_state === "done" ? "done" : `${r.metadata_state}: ${r.metadata_error || ""}`},
  {key: "instances", label: "instances", num: true},
  {key: "clips", label: "clips", num: true},
  {key: "questions", label: "questions", num: true},
  {key: "temporal_verified", label: "temporal", show: r => r.temporal_verified ? "✓ verified" : "—"},
  {key: "clips_verified", label: "clips verified", num: true, show: r => `${r.clips_verified} / ${r.clips}`},
  // counted among the questions asked now: a rejected one leaves them at the next re-derive
  {key: "questions_reviewed", label: "questions reviewed", num: true, show: r => `${r.questions_reviewed} / ${r.questions ?? "?"}` +
    (r.questions_rejected_gone ? ` (+${r.questions_rejected_gone} rejected, no longer asked)` : "")},
];
let rows = [], sortKey = "video_id", sortDir = 1;

const FILTERS = {
  all: () => true,
  todo: r => !r.temporal_verified,
  temporal: r => r.temporal_verified,
  clips: r => r.clips_verified < r.clips,
  questions: r => r.questions_reviewed < (r.questions || 0),
  done: r => r.temporal_verified && r.clips_verified >= r.clips && r.questions_reviewed >= (r.questions || 0),
};

function render() {
  const head = document.querySelector("#videos thead tr");
  head.replaceChildren(...COLUMNS.map(c => el("th", {
    class: "sortable" + (c.num ? " num" : ""), "data-key": c.key,
    onclick: () => { sortDir = sortKey === c.key ? -sortDir : 1; sortKey = c.key; render(); },
  }, c.label + (sortKey === c.key ? (sortDir > 0 ? " ▲" : " ▼") : ""))));
  const f = FILTERS[document.getElementById("filter").value];
  const q = document.getElementById("search").value.trim();
  const shown = rows.filter(r => f(r) && r.video_id.includes(q)).sort((a, b) => {
    const x = a[sortKey], y = b[sortKey];
    return (x === y ? 0 : x === null ? 1 : y === null ? -1 : x < y ? -1 : 1) * sortDir;
  });
  document.querySelector("#videos tbody").replaceChildren(...shown.map(r => el("tr", {"data-video": r.video_id},
    COLUMNS.map(c => el("td", {class: c.num ? "num" : (c.key === "metadata_state" && r.metadata_state !== "done" ? "error" : null)},
      c.key === "video_id" ? [el("a", {href: `/videos/${encodeURIComponent(r.video_id)}`}, r.video_id), " ",
                              el("a", {class: "muted", href: `/queue?video=${encodeURIComponent(r.video_id)}`, title: "this video's review queue"}, "queue")]
                           : (c.show ? c.show(r) : r[c.key] ?? "—"))))));
  document.getElementById("count").textContent = `${shown.length} of ${rows.length} videos`;
}

async function load() {
  header("videos");
  try { rows = await api("/api/videos"); } catch (e) { status(e.message, true); }
  document.getElementById("filter").addEventListener("change", render);
  document.getElementById("search").addEventListener("input", render);
  render();
}
load();
