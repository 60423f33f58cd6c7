// The review queue: every item of the benchmark that needs a person (review pairs, specks that keep
// a count unasked, failed units, VMR clips, questions), one at a time, decided from the keyboard and saved at once (rebased onto
// the fix file as it is then); progress per kind, per video and 5-minute segment, per reviewer.
"use strict";
const Z = {items: [], progress: null, current: null, detail: null, selected: new Set(), member: null, player: null, busy: false};
const $ = id => document.getElementById(id);
const SECTORS = ["forward", "forward-right", "right", "backward-right", "backward", "backward-left", "left", "forward-left"];
const REASONS = ["ambiguous", "not answerable from the video", "wrong answer"];
let ACTIONS = 0;  // keys and clicks that acted on the queue (the bench reads it)

function sector(a) { return SECTORS[((Math.floor((a + 22.5) / 45) % 8) + 8) % 8]; }
function shownItems() {
  const f = $("filter").value, k = $("kind").value;
  return Z.items.filter(i => (f === "all" || !i.done || (Z.current && i.id === Z.current)) && (!k || i.kind === k));
}
function crop(vid, best, h) {
  if (!best) return el("span", {class: "muted"}, "no box");
  const [x0, y0, x1, y1] = best.box;
  return el("img", {class: "crop", src: `/api/videos/${encodeURIComponent(vid)}/crop?t=${best.time}&x0=${x0}&y0=${y0}&x1=${x1}&y1=${y1}&h=${h || 120}`,
                    title: `at ${fmtTime(best.time)}`});
}

// ------------------------------------------------------------------ progress
function renderProgress() {
  const p = Z.progress;
  $("progress-all").textContent = `${p.all.done} / ${p.all.total} done`;
  $("progress-bar").max = Math.max(1, p.all.total); $("progress-bar").value = p.all.done;
  const names = {pair: "pairs", speck: "specks", unit: "failed units", clip: "VMR clips", question: "questions"};
  $("progress-kinds").textContent = Object.entries(p.kinds).filter(([, t]) => t.total)
    .map(([k, t]) => `${names[k]} ${t.done}/${t.total}`).join(" · ");
  const who = Object.entries(p.reviewers);
  $("progress-reviewers").textContent = who.length ? "by reviewer: " + who.map(([r, n]) => `${r} ${n}`).join(" · ") : "no decision yet";
  const most = Math.max(1, ...p.videos.map(v => Math.floor(v.duration_s / p.segment_s) + 1));
  $("segments").replaceChildren(
    el("tr", {}, el("th", {}, "video"), el("th", {class: "num"}, "done"),
       ...Array.from({length: most}, (_, s) => el("th", {class: "seg"}, `${fmtTime(s * p.segment_s)}`))),
    ...p.videos.map(v => el("tr", {"data-video": v.video_id}, el("td", {}, v.video_id), el("td", {class: "num"}, `${v.done}/${v.total}`),
      ...Array.from({length: most}, (_, s) => {
        const seg = v.segments.find(x => x.segment === s);
        if (!seg) return el("td", {class: "seg empty"});
        const f = seg.done / seg.total;
        return el("td", {class: "seg", title: `${fmtTime(seg.start)}–: ${seg.done} of ${seg.total} done`,
                         style: `background: hsl(${Math.round(120 * f)}, 55%, ${92 - 20 * f}%)`}, `${seg.done}/${seg.total}`);
      }))));
}

function renderList() {
  const list = shownItems();
  $("items").replaceChildren(...list.slice(0, 400).map(i => el("li", {
    class: `${i.kind}${i.done ? " done" : ""}${i.id === Z.current ? " current" : ""}`, "data-item": i.id,
    onclick: () => { ACTIONS++; open(i.id); }},
    el("span", {class: "kind"}, i.kind), " ", el("span", {class: "muted"}, `${i.video_id.replace(/^.*?_/, "")} ${fmtTime(i.time)}`), " ",
    i.title, i.done ? el("span", {class: "ok"}, ` ✓${i.by ? " " + i.by : ""}`) : null,
    i.provisional ? provisionalNote(i.provisional_reason, "div", i.wrong_answer_bound) : null)));
  if (list.length > 400) $("items").append(el("li", {class: "muted"}, `… ${list.length - 400} more`));
  const cur = $("items").querySelector("li.current");
  if (cur) cur.scrollIntoView({block: "nearest"});
}

const ONLY = new URLSearchParams(location.search).get("video");  // one video's queue
const SECOND = new URLSearchParams(location.search).get("second") === "1";  // a second, blind review

async function reload() {
  const q = await api("/api/queue?" + (ONLY ? `video=${encodeURIComponent(ONLY)}&` : "") + (SECOND ? "second=1" : ""));
  Z.items = q.items; Z.progress = q.progress;
  renderProgress(); renderList();
}

function markDone(id, extra) {
  // a decision saved: the item and the progress as the server will count them (no refetch per item)
  const item = Z.items.find(i => i.id === id), p = Z.progress;
  if (!item || item.done) return;
  Object.assign(item, {done: true, by: REVIEWER}, extra || {});
  p.all.done++; p.kinds[item.kind].done++;
  const v = p.videos.find(x => x.video_id === item.video_id);
  if (v) { v.done++; const seg = v.segments.find(x => x.segment === Math.floor(item.time / p.segment_s)); if (seg) seg.done++; }
  p.reviewers[REVIEWER] = (p.reviewers[REVIEWER] || 0) + 1;
  renderProgress(); renderList();
}

// ------------------------------------------------------------------ one item
function keysFor(kind, d) {
  const k = (key, what) => [el("kbd", {}, key), ` ${what}`];
  const common = [...k("n", "next open"), " · ", ...k("s", "skip"), " · ", ...k("j", "/"), ...k("k", "next / previous"), " · ", ...k("o", "open its page")];
  const own = {
    // a side removed or the two renamed apart: the fixes decided the pair, nothing is left to choose
    pair: d && d.pair && d.pair.decided_apart ? [] : d && d.pair && d.pair.merged ? [...k("m", "keep merged"), " · ", ...k("a", "split apart"), " · "] : [...k("m", "merge"), " · ", ...k("a", "keep apart"), " · "],
    question: [...k("y", "accept"), " · ", ...k("r", "reject (reason below)"), " · ", ...k("1–3", "reject: ambiguous / not answerable / wrong answer"), " · ",
               ...(d && d.instances ? [...k("click", "select instances"), " · ", ...k("m", "merge the selected"), " · ", ...k("d", "remove the selected"), " · "] : []),
               ...(d && d.instances && d.instances.some(i => (i.members || []).length > 1) ? [...k("a", "split the selected clip member out"), " · "] : [])],
    speck: [...k("click", "choose the instance it shows"), " · ", ...k("t", "it shows the chosen one"), " · ", ...k("x", "no object"), " · "],
    clip: [...k("y", "the direction is right: verified"), " · ", ...k("1–8", "set the direction to that sector"), " · ", ...k("x", "no meaningful motion"), " · "],
    unit: [],
  }[kind] || [];
  return [...own, ...common];
}

async function open(id) {
  Z.current = id; Z.selected = new Set(); Z.member = null; $("item-error").textContent = "";
  const item = Z.items.find(i => i.id === id);
  renderList();
  if (!item) { Z.detail = null; $("item").replaceChildren(el("p", {class: "muted done-all"}, "Nothing left to review: every item is done.")); $("keys").textContent = ""; return; }
  history.replaceState(null, "", `/queue?` + (ONLY ? `video=${encodeURIComponent(ONLY)}&` : "") + (SECOND ? "second=1&" : "") + `item=${encodeURIComponent(id)}`);
  try {
    Z.detail = await api(`/api/queue/item?id=${encodeURIComponent(id)}` + (SECOND ? "&second=1" : ""));
  } catch (e) { $("item").replaceChildren(el("p", {class: "error"}, e.message)); return; }
  if (Z.current !== id) return;
  renderItem(item, Z.detail);
}

function header2(item) {
  return el("h2", {}, el("span", {class: "kind"}, item.kind), " ", item.title, " ",
    el("span", {class: "muted"}, `· ${item.video_id} · ${fmtTime(item.time)}`), " ",
    el("a", {href: item.link, class: "open-page"}, "open its page ↗"),
    item.done ? el("span", {class: "ok"}, ` · done${item.by ? " by " + item.by : ""}${item.decision ? ": " + item.decision : item.verdict ? ": " + item.verdict : item.resolved ? ": resolved by the fixes" : ""}`) : null);
}

function playerFor(vid, video, t, highlight, extra) {
  // the view video with its masks at the item's time, the item's instances outlined (and boxes
  // that are no mask's, ``MaskPlayer.extra``: a speck's)
  const wrap = el("div", {class: "player"}, el("video", {preload: "auto", muted: true, playsinline: true}), el("canvas", {class: "overlay"}));
  const box = el("div", {class: "q-item-player"}, wrap);
  const info = {video: {video_id: vid, ...video}, sample_step: 0.5};
  setTimeout(() => {
    Z.player = new MaskPlayer(wrap.querySelector("video"), wrap.querySelector("canvas"), info, {});
    Z.player.highlight = new Set(highlight);
    Z.player.extra = extra || [];
    Z.player.seek(t);
  });
  return box;
}

function renderItem(item, d) {
  const body = [header2(item)];
  if (d.kind === "pair") {
    const p = d.pair, [a, b] = d.sides;
    const now = p.removed ? "a side was removed" : p.decided_apart ? "renamed apart: two objects" : p.merged ? "one instance now" : "two instances now";
    body.push(el("p", {}, `${p.concept}: ${now} — ` +
      `clip ${a.clip} #${a.local_id} (${fmtTime(a.first_time)}–${fmtTime(a.last_time)}) and clip ${b.clip} #${b.local_id} (${fmtTime(b.first_time)}–${fmtTime(b.last_time)})`),
      el("p", {class: "muted"}, p.reason + (p.posterior !== null ? ` · P(same) ${p.posterior.toFixed(2)}` : "") +
        (p.answer_impact ? ` · the other decision changes ${p.answer_impact} answers` : "")),
      el("div", {class: "pair-sides"},
        ...[a, b].map((s, i) => el("figure", {class: "side-fig"}, crop(item.video_id, s.best, 160),
          el("figcaption", {}, `${i ? "B" : "A"}: #${s.instance_id ?? "removed"} · ${s.best ? fmtTime(s.best.time) : ""} `,
             el("button", {onclick: () => Z.player && s.best && Z.player.seek(s.best.time)}, "show"))))),
      playerFor(item.video_id, d.video, (b.best || a.best || {time: b.first_time}).time, [a.instance_id, b.instance_id]));
  } else if (d.kind === "question") {
    const q = d.question;
    const options = q.correct !== null ? [q.correct, ...(q.distractors || [])].sort() : null;
    body.push(q.provisional ? provisionalNote(q.provisional_reason) : null, el("p", {}, q.question),
      options ? el("ol", {type: "A"}, ...options.map(o => el("li", {class: o === q.correct ? "correct" : null}, o))) : null,
      el("p", {}, q.query_times.map((t, i) => `at ${fmtTime(t)}: ${q.answers[i]}`).join(" · ")),
      ...(d.changed || []).map(c => el("p", {class: "stale"}, (c.now !== c.then
        ? `the saved fixes make ${c.now} ${c.concept} instances where this question was derived from ${c.then}`
        : `the saved fixes regroup the ${c.concept} instances this question was derived from`) +
        ": re-derive the video to update its answer")));
    if (d.instances) {
      body.push(el("p", {class: "muted"}, `the ${q.concepts.join(", ")} instances as the saved fixes make them now (click to select; the count is their number); ` +
        "under an instance joined across clips, its clip members: two different objects among them? click one, then split it out"),
        el("div", {class: "instance-strip"}, ...d.instances.map(i => instanceFigure(item.video_id, i))));
    }
    const frames = (q.frame_indices || []).slice(0, 8).map((f, i) => el("figure", {class: "thumb"},
      el("img", {src: `/api/videos/${encodeURIComponent(item.video_id)}/frame?f=${f}`, loading: "lazy"}),
      el("figcaption", {}, (q.task_type === "VPO" ? `Frame ${i + 1} · ` : "") + `frame ${f}`)));
    if (frames.length) body.push(el("div", {class: "strip"}, ...frames));
    body.push(el("p", {}, "reason to reject: ", el("select", {id: "reason"}, ...REASONS.map(r => el("option", {value: r}, r)))));
    body.push(playerFor(item.video_id, d.video, q.query_times[0] || 0, []));
  } else if (d.kind === "clip") {
    const m = d.motion, c = el("canvas", {class: "compass", width: 200, height: 200});
    drawMiniCompass(c, m.angle_deg);
    body.push(el("div", {class: "row"}, c, el("div", {},
      el("p", {}, m.state === "ok" ? `automatic: ${Math.round(m.angle_deg)}° (${sector(m.angle_deg)}) at ${fmtTime(m.pivot_time)}` : `state ${m.state}`),
      el("p", {class: "muted"}, m.reason || ""),
      el("p", {}, ...SECTORS.map((s, k) => [el("button", {class: "sector", onclick: () => { ACTIONS++; setSector(k); }}, `${k + 1} ${s}`), " "]).flat()))),
      playerFor(item.video_id, d.video, m.pivot_time !== null ? m.pivot_time : m.clip_start, []));
  } else if (d.kind === "speck") {
    const s = d.speck, seen = s.sightings, last = seen[seen.length - 1];
    const told = !("told" in s) ? "" : s.told === null ? " · the saved fixes say: no object" : ` · the saved fixes say: #${s.told}`;
    body.push(el("p", {}, `a ${s.concept} mask too small to track: clip ${s.clip} #${s.local_id}, seen ${seen.length} time(s), ` +
        `${fmtTime(seen[0].time)}–${fmtTime(last.time)}, at most ${Math.max(...seen.map(x => x.area))} px${told}`),
      el("p", {}, `${item.counts_kept} count(s) wait on it` + (item.waits_on > 1 ? `, each on ${item.waits_on} or more specks` : ", on it alone")),
      ...s.counts.map(c => el("p", {class: "muted speck-count"}, c)),
      el("figure", {class: "speck-fig"}, speckCrop(item.video_id, s),
        el("figcaption", {}, `ringed: the speck at ${fmtTime(s.best.time)} `,
           el("button", {onclick: () => Z.player && Z.player.seek(s.best.time)}, "show"))),
      el("p", {class: "muted"}, `which ${s.concept} does it show? click its picture, then t; x when it is no ${s.concept} at all`),
      el("div", {class: "instance-strip"}, ...d.instances.map(i => candidateFigure(item.video_id, i))),
      playerFor(item.video_id, d.video, s.best.time, [], seen.map(x => ({
        id: "speck", time: x.time, box: [x.box[0] - 4, x.box[1] - 4, x.box[2] + 4, x.box[3] + 4],
        text: `speck #${s.local_id}`, dashed: true, colour: "#ff00ff"}))));
  } else if (d.kind === "unit") {
    body.push(el("p", {class: "error"}, item.error || ""), el("p", {class: "muted"}, "Mend its cause (e.g. the fix file it names), then re-derive; the item goes when the unit succeeds."));
  }
  $("item").replaceChildren(...body.filter(Boolean));
  $("keys").replaceChildren(...keysFor(d.kind, d));
}

function memberId(m) { return `${m.clip}:${m.local_id}`; }

function speckCrop(vid, s) {
  // the view around the speck (a few pixels wide), the speck itself ringed
  const [x0, y0, x1, y1] = s.context.box, m = s.best.box.join(",");
  return el("img", {class: "crop speck", src: `/api/videos/${encodeURIComponent(vid)}/crop?t=${s.context.time}&x0=${x0}&y0=${y0}&x1=${x1}&y1=${y1}&h=240&mark=${m}`,
                    title: `at ${fmtTime(s.context.time)}`});
}

function candidateFigure(vid, i) {
  // one instance the speck may show: one chosen at a time
  return el("figure", {
    class: "inst" + (Z.selected.has(i.instance_id) ? " selected" : ""), "data-instance": i.instance_id,
    onclick: () => { ACTIONS++; Z.selected = new Set([i.instance_id]);
                     document.querySelectorAll("#item figure.inst").forEach(f => f.classList.toggle("selected", Number(f.dataset.instance) === i.instance_id)); }},
    crop(vid, i.best, 90),
    el("figcaption", {}, `#${i.instance_id} ${i.concept} · ${fmtTime(i.first_time)}–${fmtTime(i.last_time)}`,
       i.fits ? el("br") : null, i.fits ? el("b", {class: "fits"}, "its position fits") : null,
       i.gap_s !== null ? el("br") : null, i.gap_s !== null ? el("span", {class: "muted"}, `seen ${i.gap_s.toFixed(1)} s from it`) : null));
}

function instanceFigure(vid, i) {
  // one instance a question counts or orders: its picture, and when reconciliation joined clip
  // members into it, one picture per member (clip, local id, time) with a split button
  const members = i.members || [];
  const fig = el("figure", {
    class: "inst" + (members.length > 1 ? " joined" : "") + (Z.selected.has(i.instance_id) ? " selected" : ""), "data-instance": i.instance_id,
    onclick: e => { ACTIONS++; Z.selected.has(i.instance_id) ? Z.selected.delete(i.instance_id) : Z.selected.add(i.instance_id); e.currentTarget.classList.toggle("selected"); }},
    crop(vid, i.best, 90),
    el("figcaption", {}, `#${i.instance_id} ${i.concept} · ${fmtTime(i.first_time)}–${fmtTime(i.last_time)}`,
       members.length === 1 ? el("span", {class: "muted"}, ` · clip ${members[0].clip} #${members[0].local_id}`) : null));
  if (members.length < 2) return fig;
  const clips = new Set(members.map(m => m.clip)).size;
  fig.append(el("div", {class: "members", title: `${members.length} clip members reconciliation joined into #${i.instance_id}`},
    ...members.map(m => el("figure", {
      class: "member" + (Z.member === memberId(m) ? " selected" : ""), "data-member": memberId(m),
      title: `clip ${m.clip}, clip-local instance ${m.local_id}: ${fmtTime(m.first_time)}–${fmtTime(m.last_time)}`,
      onclick: e => { e.stopPropagation(); ACTIONS++; selectMember(Z.member === memberId(m) ? null : memberId(m)); }},
      crop(vid, m.best, 64),
      el("figcaption", {}, `clip ${m.clip} · #${m.local_id}`, el("br"), `${fmtTime(m.first_time)}–${fmtTime(m.last_time)}`),
      clips > 1 ? el("button", {class: "split", title: `split clip ${m.clip} #${m.local_id} out of #${i.instance_id} (key a when selected)`,
                                 onclick: e => { e.stopPropagation(); ACTIONS++; splitMember(memberId(m)); }}, "split out") : null))));
  return fig;
}

function selectMember(id) {
  Z.member = id;
  document.querySelectorAll("figure.member").forEach(f => f.classList.toggle("selected", f.dataset.member === id));
}

function drawMiniCompass(c, angle) {
  const g = c.getContext("2d"), W = c.width, R = W / 2 - 18, cx = W / 2, cy = W / 2;
  g.font = "10px system-ui"; g.textAlign = "center"; g.textBaseline = "middle";
  for (let k = 0; k < 8; k++) {
    const a0 = (45 * k - 22.5 - 90) * Math.PI / 180, a1 = (45 * k + 22.5 - 90) * Math.PI / 180;
    g.beginPath(); g.moveTo(cx, cy); g.arc(cx, cy, R, a0, a1); g.closePath();
    g.fillStyle = k % 2 ? "#f3f6f9" : "#e6ecf1"; g.fill(); g.strokeStyle = "#c7d0d8"; g.stroke();
    const am = (45 * k - 90) * Math.PI / 180;
    g.fillStyle = "#45505a"; g.fillText(String(k + 1), cx + (R + 9) * Math.cos(am), cy + (R + 9) * Math.sin(am));
  }
  if (angle === null || angle === undefined) return;
  const a = (angle - 90) * Math.PI / 180;
  g.strokeStyle = "#1565c0"; g.lineWidth = 4; g.beginPath(); g.moveTo(cx, cy); g.lineTo(cx + R * 0.9 * Math.cos(a), cy + R * 0.9 * Math.sin(a)); g.stroke();
}

// ------------------------------------------------------------------ decisions (saved at once)
async function saveFix(vid, fix) {
  const res = await api(`/api/videos/${encodeURIComponent(vid)}/fixes`, {edits: [{kind: "add", fix}]});
  if (res.failed.length) { const e = new Error(res.failed[0].error.error); e.body = res.failed[0].error; throw e; }
  return res;
}

async function decide(work, advance, extra) {
  if (Z.busy) return;
  Z.busy = true; $("item-error").textContent = "";
  try {
    await work();
    if (advance) { markDone(Z.current, extra); await nextOpen(); } else await open(Z.current);
    status("saved");
  } catch (e) { $("item-error").textContent = fixError(e); }
  finally { Z.busy = false; }
}

function pairDecision(decision) {
  const d = Z.detail, p = d.pair;
  return decide(() => saveFix(d.video_id, {op: "review_pair", clip_a: p.clip_a, local_a: p.local_a, clip_b: p.clip_b, local_b: p.local_b, decision}), true, {decision});
}

function verdict(v, reason) {
  const d = Z.detail, q = d.question;
  // the answers the person judged: the accept stands only while the question gives them
  const fix = {op: "review_question", question: q.question_id, verdict: v, answers: q.answers};
  if (v === "reject") fix.reason = reason || $("reason").value;
  return decide(async () => { await saveFix(d.video_id, fix); await saveProgress({question: q.question_id, verdict: v}, d.video_id); }, true, {verdict: v});
}

function instanceFix(kind) {
  const d = Z.detail, sel = [...Z.selected].sort((a, b) => a - b);
  if (kind === "merge" && sel.length < 2) { $("item-error").textContent = "select two or more instances (click their pictures)"; return; }
  if (kind === "remove" && !sel.length) { $("item-error").textContent = "select the instances to remove"; return; }
  return decide(async () => {
    if (kind === "merge") await saveFix(d.video_id, {op: "merge", instances: sel});
    else for (const i of sel) await saveFix(d.video_id, {op: "remove_instance", instance: i});
  }, false);
}

function splitMember(id) {
  // the clip member becomes an instance of its own: the temporal page's split op, saved at once
  const d = Z.detail;
  if (!id) { $("item-error").textContent = "select a clip member first (click its picture under its instance)"; return; }
  const [clip, local_id] = id.split(":").map(Number);
  return decide(() => saveFix(d.video_id, {op: "split", clip, local_id}), false);
}

function tellSpeck(instance) {
  const d = Z.detail, s = d.speck;
  if (instance === undefined) {
    if (Z.selected.size !== 1) { $("item-error").textContent = "choose the instance it shows (click its picture), or x for no object"; return; }
    instance = [...Z.selected][0];
  }
  return decide(() => saveFix(d.video_id, {op: "speck", clip: s.clip, local_id: s.local_id, instance}), true,
                {decision: instance === "none" ? "no object" : `#${instance}`});
}

function clipVerified() {
  const d = Z.detail;
  return decide(() => saveProgress({clip: d.motion.clip_index, clip_verified: true}, d.video_id), true);
}

function setSector(k) {
  // the direction is the sector's centre, at the clip's pivot (the automatic one, or its middle)
  const d = Z.detail, m = d.motion, angle = ((45 * k + 180) % 360) - 180;
  const fix = {op: "motion", clip: m.clip_index, angle_deg: angle === 180 ? -180 : angle};
  if (m.pivot_time === null) fix.pivot_time = Math.round((m.clip_start + m.clip_end) / 2 * 2) / 2;
  return decide(async () => { await saveFix(d.video_id, fix); await saveProgress({clip: m.clip_index, clip_verified: true}, d.video_id); }, true);
}

function clipNone() {
  const d = Z.detail, m = d.motion;
  return decide(async () => { await saveFix(d.video_id, {op: "motion", clip: m.clip_index, state: "none"}); await saveProgress({clip: m.clip_index, clip_verified: true}, d.video_id); }, true);
}

// ------------------------------------------------------------------ moving through the queue
function nextOpen() {
  const list = Z.items, i = list.findIndex(x => x.id === Z.current);
  const after = list.slice(i + 1).concat(list.slice(0, Math.max(0, i + 1)));
  const k = $("kind").value;
  const next = after.find(x => !x.done && (!k || x.kind === k));
  return open(next ? next.id : null);
}

function step(dir) {
  const list = shownItems(), i = list.findIndex(x => x.id === Z.current);
  const next = list[Math.max(0, Math.min(list.length - 1, i + dir))];
  if (next) open(next.id);
}

document.addEventListener("keydown", e => {
  if (typing(e) || e.ctrlKey || e.metaKey || e.altKey || !Z.detail) return;
  const kind = Z.detail.kind, key = e.key;
  const acted = () => { ACTIONS++; e.preventDefault(); };
  if (key === "n" || key === "s") { acted(); nextOpen(); }
  else if (key === "j") { acted(); step(1); }
  else if (key === "k") { acted(); step(-1); }
  else if (key === "o") { acted(); const i = Z.items.find(x => x.id === Z.current); if (i) location.href = i.link; }
  else if (kind === "pair" && (key === "m" || key === "a") && !Z.detail.pair.decided_apart) { acted(); pairDecision(key === "m" ? "merge" : "apart"); }
  else if (kind === "question" && key === "y") { acted(); verdict("accept"); }
  else if (kind === "question" && key === "r") { acted(); verdict("reject"); }
  else if (kind === "question" && ["1", "2", "3"].includes(key)) { acted(); verdict("reject", REASONS[Number(key) - 1]); }
  else if (kind === "question" && key === "m" && Z.detail.instances) { acted(); instanceFix("merge"); }
  else if (kind === "question" && key === "d" && Z.detail.instances) { acted(); instanceFix("remove"); }
  else if (kind === "question" && key === "a" && Z.detail.instances) { acted(); splitMember(Z.member); }
  else if (kind === "speck" && key === "t") { acted(); tellSpeck(); }
  else if (kind === "speck" && key === "x") { acted(); tellSpeck("none"); }
  else if (kind === "clip" && key === "y") { acted(); clipVerified(); }
  else if (kind === "clip" && key === "x") { acted(); clipNone(); }
  else if (kind === "clip" && /^[1-8]$/.test(key)) { acted(); setSector(Number(key) - 1); }
});

let REVIEWER = "";

async function load() {
  header("queue");
  REVIEWER = (await api("/api/reviewer")).reviewer;
  $("filter").onchange = renderList; $("kind").onchange = renderList;
  await reload();
  const want = new URLSearchParams(location.search).get("item");
  const first = (want && Z.items.find(i => i.id === want)) || Z.items.find(i => !i.done);
  await open(first ? first.id : null);
  window.pageReady = true;
}
load().catch(e => status(e.message, true));
