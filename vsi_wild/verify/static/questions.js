// Question review: one card per generated question; accept / reject (with a reason) become
// review_question fixes, saved at once (rebased onto the fix file as it is then: another page's
// save in between is kept). The evidence player stays in view while the cards scroll.
"use strict";
const Q = {questions: [], progress: null, info: null, focus: 0};
const $ = id => document.getElementById(id);
const VID = videoId();
const REASONS = ["ambiguous", "not answerable from the video", "wrong answer", "other…"];
const DRAFT = new Draft(VID, () => {});

function verdicts() {
  const out = new Map();
  for (const f of DRAFT.file) if (f.op === "review_question") out.set(f.question, f);
  return out;
}

function standing(v, q) {
  // the question's verdict if it holds for the answers shown now (an accept of answers a later fix
  // changed is no verdict on this answer: the card is open again and says what was accepted)
  const f = v.get(q.question_id);
  return f && verdictHolds(f, q) ? f : null;
}

async function setVerdict(q, verdict, reason, errorBox) {
  errorBox.textContent = "";
  const qid = q.question_id;
  // the answers the person judged: the accept stands only while the question gives them
  const fix = {op: "review_question", question: qid, verdict, answers: q.answers};
  if (reason) fix.reason = reason;
  try {
    await DRAFT.saveOnly([{kind: "add", fix}]);
    Q.progress = await saveProgress({question: qid, verdict});
    status(`${verdict === "accept" ? "accepted" : "rejected"} ${qid}`);
    render();
  } catch (e) {
    errorBox.textContent = fixError(e);
  }
}

function playInterval(start, end) {
  const v = $("video");
  v.currentTime = start;
  v.play();
  const stop = () => { if (v.currentTime >= end) { v.pause(); v.removeEventListener("timeupdate", stop); } };
  v.addEventListener("timeupdate", stop);
}

function figure(src, caption) {
  return el("figure", {class: "thumb"}, el("img", {src, title: caption, loading: "lazy"}), el("figcaption", {}, caption));
}

function card(q, verdict, index) {
  const stale = verdict && !verdictHolds(verdict, q) ? verdict : null;
  if (stale) verdict = null;
  const err = el("div", {class: "error"});
  const options = q.correct !== null ? [q.correct, ...(q.distractors || [])].sort() : null;
  // each frame and rendered view says what it is: "Frame p" as the question names it, its time,
  // and for VPO's renders the yaw turned from the view's heading
  const frames = (q.frame_indices || []).map((f, i) => figure(`/api/videos/${encodeURIComponent(VID)}/frame?f=${f}`,
    (q.task_type === "VPO" ? `Frame ${i + 1} · ` : "") + `frame ${f}` + (q.frame_times && q.frame_times[i] !== undefined ? ` · ${fmtTime(q.frame_times[i])}` : "")));
  const images = (q.image_files || []).map((f, i) => {
    const off = q.render_offset_deg && q.render_offset_deg[i] !== undefined ? q.render_offset_deg[i] : null;
    return figure(`/api/videos/${encodeURIComponent(VID)}/images/${f}`,
      `Frame ${i + 1} as shown` + (off === null ? "" : off === 0 ? " · not turned" : ` · turned ${off > 0 ? "+" : ""}${Math.round(off)}°`));
  });
  const evidence = q.evidence.map((ivs, i) => el("div", {},
    `at ${fmtTime(q.query_times[i])}: ${q.answers[i]} · evidence `,
    ...ivs.map(iv => el("button", {class: "play", onclick: () => playInterval(iv.start, iv.end)},
      `▶ ${fmtTime(iv.start)}–${fmtTime(iv.end)}`))));
  // the reason as it was saved: a custom one shows as "other…" with its text
  const saved = verdict && verdict.verdict === "reject" ? verdict.reason : null;
  const custom = saved !== null && saved !== undefined && !REASONS.includes(saved);
  const reason = el("select", {class: "reason"}, ...REASONS.map(r => el("option", {value: r, selected: custom ? r === "other…" : r === saved}, r)));
  const other = el("input", {class: "reason-text", size: 18, placeholder: "reason", hidden: !custom, value: custom ? saved : null});
  reason.onchange = () => { other.hidden = reason.value !== "other…"; };
  const state = verdict ? verdict.verdict : null;
  const reject = () => setVerdict(q, "reject", reason.value === "other…" ? other.value.trim() : reason.value, err);
  const c = el("div", {class: "card" + (state === "accept" ? " accepted" : state === "reject" ? " rejected" : "") + (index === Q.focus ? " focus" : ""),
                       "data-question": q.question_id},
    el("div", {class: "muted"}, `${q.task_type} · ${q.subtype} · ${q.split} · ${q.item} · id ${q.question_id}`),
    q.provisional ? provisionalNote(q.provisional_reason) : null,
    el("p", {}, q.question),
    options ? el("ol", {type: "A"}, ...options.map(o => el("li", {class: o === q.correct ? "correct" : null}, o))) : null,
    el("div", {}, ...evidence),
    frames.length ? el("div", {class: "strip"}, el("span", {class: "muted"}, "frames of the video"), ...frames) : null,
    images.length ? el("div", {class: "strip"}, el("span", {class: "muted"}, "rendered views (what the question shows)"), ...images) : null,
    el("p", {},
      el("button", {class: "accept", onclick: () => setVerdict(q, "accept", null, err)}, "✓ accept"), " ",
      el("button", {class: "reject", onclick: reject}, "✗ reject"), " ", reason, " ", other,
      state ? el("b", {class: state === "accept" ? "ok" : "error"}, ` ${state}ed` + (verdict.reason ? `: ${verdict.reason}` : "") +
        (verdict.by ? ` by ${verdict.by}` : "")) : null,
      stale ? el("b", {class: "stale"}, ` accepted${stale.by ? " by " + stale.by : ""} when its answer was ${stale.answers.join(", ")}: review again`) : null),
    err);
  c.reject = reject; c.accept = () => setVerdict(q, "accept", null, err); c.reason = reason;
  return c;
}

function shown() {
  const v = verdicts(), f = $("filter").value;
  return Q.questions.filter(q => {
    if (f === "all") return true;
    const s = standing(v, q);
    return f === "open" ? !s : Boolean(s) && s.verdict === f;
  });
}

function render() {
  const v = verdicts(), list = shown();
  Q.focus = Math.max(0, Math.min(Q.focus, list.length - 1));
  $("cards").replaceChildren(...list.map((q, i) => card(q, v.get(q.question_id), i)));
  const asked = new Set(Q.questions.map(q => q.question_id));
  const reviewed = Q.questions.filter(q => standing(v, q)).length;
  $("count").textContent = `${list.length} of ${Q.questions.length} questions · ${reviewed} reviewed`;
  const gone = [...v.values()].filter(r => r.verdict === "reject" && !asked.has(r.question));
  $("gone").textContent = gone.length ? `rejected and no longer asked: ${gone.map(r => `${r.question} (${r.reason})`).join(", ")}` : "";
}

function focusCard(i) {
  const cards = [...document.querySelectorAll("#cards .card")];
  if (!cards.length) return;
  Q.focus = Math.max(0, Math.min(cards.length - 1, i));
  cards.forEach((c, j) => c.classList.toggle("focus", j === Q.focus));
  cards[Q.focus].scrollIntoView({block: "nearest"});
}

async function load() {
  const [info, questions] = await Promise.all([api(`/api/videos/${encodeURIComponent(VID)}`),
                                               api(`/api/videos/${encodeURIComponent(VID)}/questions`)]);
  Q.info = info; Q.questions = questions; Q.progress = info.progress;
  DRAFT.load(info);
  const v = $("video");
  if (!v.src) { v.src = `/api/videos/${encodeURIComponent(VID)}/media`; controlBar(v, info.video.duration_s, info.video.fps); }
  render();
  window.pageReady = true;
}

header("questions");
$("filter").onchange = render;
$("rederive").onclick = async () => {
  try {
    const job = await rederive(j => showJob($("job"), j));
    if (job.state === "done") await load();
  } catch (e) { $("job").textContent = e.message; }
};
document.addEventListener("keydown", e => {
  if (typing(e) || e.ctrlKey || e.metaKey || e.altKey) return;
  const cards = [...document.querySelectorAll("#cards .card")], c = cards[Q.focus];
  if (e.key === "j") focusCard(Q.focus + 1);
  else if (e.key === "k") focusCard(Q.focus - 1);
  else if (!c) return;
  else if (e.key === "y") c.accept();
  else if (e.key === "r") c.reject();
  else if (["1", "2", "3"].includes(e.key)) { c.reason.value = REASONS[Number(e.key) - 1]; c.reject(); }
});
document.addEventListener("visibilitychange", async () => {
  if (document.visibilityState === "visible" && Q.info) { await DRAFT.refresh(); render(); }
});
load().catch(e => status(e.message, true));
