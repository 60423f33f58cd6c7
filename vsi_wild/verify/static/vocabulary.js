// The benchmark's vocabulary: renames and synonyms for every video, kept as a draft like a video's
// fixes, checked against every video's fix file, saved (rebased) to fixes/vocabulary.yaml.
"use strict";
const $ = id => document.getElementById(id);
const V = {preview: null};

class VocabularyDraft extends Draft {
  // the same draft, undo and rebase as a video's, on the vocabulary's endpoints
  async act(body, errorBox) {
    if (errorBox) errorBox.textContent = "";
    try {
      const res = await api("/api/vocabulary/draft", body);
      this.setDraft(res.draft); this.onPreview(res.preview); return true;
    } catch (e) { if (errorBox) errorBox.textContent = fixError(e); else status(fixError(e), true); return false; }
  }
  async save() {
    const res = await api("/api/vocabulary/fixes", {});
    this.file = res.fixes.fixes; this.history = res.history; this.sha = res.sha256;
    this.setDraft(res.draft);
    if (res.preview) this.onPreview(res.preview);
    return res;
  }
}
const DRAFT = new VocabularyDraft("vocabulary", p => { V.preview = p; render(); });
DRAFTS.push(DRAFT);

function render() {
  DRAFT.renderList($("pending"), render);
  if (!DRAFT.file.length && !DRAFT.edits.length) $("pending").replaceChildren(el("li", {class: "muted"}, "no entries yet: every video keeps the names its pipeline gave"));
  $("undo").disabled = !DRAFT.canUndo; $("redo").disabled = !DRAFT.canRedo;
  if (!V.preview) return;
  const concepts = V.preview.concepts, videos = [...new Set(concepts.flatMap(c => Object.keys(c.videos)))].sort();
  const names = [...new Set([...V.preview.names, ...concepts.map(c => c.becomes)])].sort();
  $("names").replaceChildren(...names.map(n => el("option", {value: n})));
  const from = $("rename-from"), keep = from.value, current = [...new Set(concepts.map(c => c.becomes))].sort();
  from.replaceChildren(...current.map(c => el("option", {value: c}, c)));
  if (current.includes(keep)) from.value = keep;
  $("concepts").replaceChildren(
    el("tr", {}, el("th", {}, "name in the videos"), el("th", {}, "concept in the benchmark"), el("th", {class: "num"}, "instances"),
       ...videos.map(v => el("th", {class: "num"}, v))),
    ...concepts.map(c => el("tr", {"data-concept": c.concept, class: c.becomes !== c.concept ? "renamed" : null},
      el("td", {}, c.concept), el("td", {}, c.becomes === c.concept ? c.becomes : `→ ${c.becomes}`), el("td", {class: "num"}, c.instances),
      ...videos.map(v => el("td", {class: "num"}, c.videos[v] || "")))));
}

async function load() {
  header("vocabulary");
  const v = await api("/api/vocabulary");
  DRAFT.file = v.file.fixes; DRAFT.history = v.file.history; DRAFT.sha = v.file.sha256; DRAFT.setDraft(v.draft);
  $("path").textContent = v.file.path;
  if (v.file.error) { $("save-error").textContent = `the vocabulary file has a problem: ${v.file.error.error}`; }
  V.preview = v.preview || null;
  render();
  $("rename-add").onclick = async () => {
    const from = $("rename-from").value, to = $("rename-to").value.trim();
    if (await DRAFT.add([{op: "rename_concept", from, to}], $("rename-error"))) { $("rename-from").value = to; $("rename-to").value = ""; render(); }
  };
  $("syn-add").onclick = async () => {
    const synonyms = $("syn-names").value.split(",").map(s => s.trim()).filter(Boolean);
    if (await DRAFT.add([{op: "synonyms", concept: $("syn-concept").value.trim(), synonyms}], $("syn-error"))) { $("syn-names").value = ""; render(); }
  };
  $("undo").onclick = async () => { if (await DRAFT.undo()) render(); };
  $("redo").onclick = async () => { if (await DRAFT.redo()) render(); };
  undoKeys(DRAFT, render);
  $("save").onclick = async () => {
    $("save-error").textContent = "";
    try {
      const res = await DRAFT.save();
      for (const f of res.failed) $("save-error").textContent += `not saved, no longer applies: ${f.error.error}\n`;
      status(`saved ${res.path}`, res.failed.length > 0); render();
    } catch (e) { $("save-error").textContent = `not saved: ${fixError(e)}`; }
  };
  $("rederive").onclick = async () => {
    $("job").textContent = "re-derive starting…";
    try {
      let job = await api("/api/rederive", {});
      while (job.state === "running") { showJob($("job"), job); await new Promise(r => setTimeout(r, 500)); job = await api(`/api/jobs/${job.id}`); }
      showJob($("job"), job);
    } catch (e) { $("job").textContent = e.message; }
  };
  window.pageReady = true;
}
load().catch(e => status(e.message, true));
