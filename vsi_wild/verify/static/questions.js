// Question review: one card per generated question; accept / reject (with a reason) become
// review_question fixes, saved at once.
"use strict";
const Q = {questions: [], fixes: [], sha: "none", progress: null, info: null};
const $ = id => document.getElementById(id);
const VID = videoId();
const REASONS = ["ambiguous", "not answerable from the video", "wrong answer", "other…"];

function verdicts() {
  const out = new Map();
  for (const f of Q.fixes) if (f.op === "review_question") out.set(f.question, f);
  return out;
}

async function setVerdict(qid, verdict, reason, errorBox) {
  errorBox.textContent = "";
  const op = {op: "review_question", question: qid, verdict};
  if (reason) op.reason = reason;
  const fixes = Q.fixes.filter(f => !(f.op === "review_question" && f.question === qid)).concat([op]);
  try {
    const res = await api(`/api/videos/${encodeURIComponent(VID)}/fixes`, {fixes, sha256: Q.sha});
    Q.fixes = res.fixes; Q.sha = res.sha256;
    Q.progress = await saveProgress({...Q.progress, questions: {...Q.progress.questions, [qid]: verdict}});
    status(`${verdict === "accept" ? "accepted" : "rejected"} ${qid}`);
    render();
  } catch (e) {
    errorBox.textContent = e.body && e.body.reason ? e.body.reason : e.message;
  }
}

function playInterval(start, end) {
  const v = $("video");
  v.currentTime = start;
  v.play();
  const stop = () => { if (v.currentTime >= end) { v.pause(); v.removeEventListener("timeupdate", stop); } };
  v.addEventListener("timeupdate", stop);
}

function card(q, verdict) {
  const err = el("div", {class: "error"});
  const options = q.correct !== null ? [q.correct, ...(q.distractors || [])].sort() : null;
  const frames = (q.frame_indices || []).map(f => el("img", {src: `/api/videos/${encodeURIComponent(VID)}/frame?f=${f}`,
    title: `frame ${f}`, loading: "lazy"}));
  const images = (q.image_files || []).map(f => el("img", {src: `/api/videos/${encodeURIComponent(VID)}/images/${f}`,
    title: f, loading: "lazy"}));
  const evidence = q.evidence.map((ivs, i) => el("div", {},
    `at ${fmtTime(q.query_times[i])}: ${q.answers[i]} · evidence `,
    ...ivs.map(iv => el("button", {class: "play", onclick: () => playInterval(iv.start, iv.end)},
      `▶ ${fmtTime(iv.start)}–${fmtTime(iv.end)}`))));
  const reason = el("select", {class: "reason"}, ...REASONS.map(r => el("option", {value: r}, r)));
  const other = el("input", {class: "reason-text", size: 18, placeholder: "reason", hidden: true});
  reason.onchange = () => { other.hidden = reason.value !== "other…"; };
  const state = verdict ? verdict.verdict : null;
  return el("div", {class: "card" + (state === "accept" ? " accepted" : state === "reject" ? " rejected" : ""),
                    "data-question": q.question_id},
    el("div", {class: "muted"}, `${q.task_type} · ${q.subtype} · ${q.split} · ${q.item} · id ${q.question_id}`),
    el("p", {}, q.question),
    options ? el("ol", {type: "A"}, ...options.map(o => el("li", {class: o === q.correct ? "correct" : null}, o))) : null,
    el("div", {}, ...evidence),
    frames.length ? el("div", {}, "frames: ", ...frames) : null,
    images.length ? el("div", {}, "rendered views: ", ...images) : null,
    el("p", {},
      el("button", {class: "accept", onclick: () => setVerdict(q.question_id, "accept", null, err)}, "✓ accept"), " ",
      el("button", {class: "reject", onclick: () => setVerdict(q.question_id, "reject",
        reason.value === "other…" ? other.value.trim() : reason.value, err)}, "✗ reject"), " ", reason, " ", other,
      state ? el("b", {class: state === "accept" ? "ok" : "error"}, ` ${state}ed` + (verdict.reason ? `: ${verdict.reason}` : "")) : null),
    err);
}

function render() {
  const v = verdicts(), f = $("filter").value;
  const shown = Q.questions.filter(q => f === "all" || (f === "open" ? !v.has(q.question_id) : v.has(q.question_id) && v.get(q.question_id).verdict === f));
  $("cards").replaceChildren(...shown.map(q => card(q, v.get(q.question_id))));
  $("count").textContent = `${shown.length} of ${Q.questions.length} questions · ${v.size} reviewed`;
  const asked = new Set(Q.questions.map(q => q.question_id));
  const gone = [...v.values()].filter(r => r.verdict === "reject" && !asked.has(r.question));
  $("gone").textContent = gone.length ? `rejected and no longer asked: ${gone.map(r => `${r.question} (${r.reason})`).join(", ")}` : "";
}

async function load() {
  const [info, questions] = await Promise.all([api(`/api/videos/${encodeURIComponent(VID)}`),
                                               api(`/api/videos/${encodeURIComponent(VID)}/questions`)]);
  Q.info = info; Q.questions = questions; Q.fixes = info.fixes.fixes; Q.sha = info.fixes.sha256; Q.progress = info.progress;
  $("video").src = `/api/videos/${encodeURIComponent(VID)}/media`;
  render();
  window.pageReady = true;
}

header("questions");
$("filter").onchange = render;
$("rederive").onclick = async () => {
  try {
    const job = await rederive(j => { $("job").textContent = jobText(j); });
    if (job.state === "done") await load();
  } catch (e) { $("job").textContent = e.message; }
};
load().catch(e => status(e.message, true));
