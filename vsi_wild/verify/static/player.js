// The view video with the masks of the nearest 2 FPS timestamp drawn over it, frame by frame
// (requestVideoFrameCallback). Masks come as one 8-bit label PNG per timestamp plus the list of
// its masks; each instance gets its colour here, and hidden ones are skipped. Below the video, our
// own controls (the browser's would cover the bottom of the frame and its masks): play, a
// scrubber, the time, one-frame steps, the speed. Labels are placed where they do not cover each
// other. A click on a mask picks its instance; with drawing on, a drag draws a box.
"use strict";

function placeLabels(items, W, H, g) {
  // Greedy: each label (largest box first) takes the first free place among above its box,
  // inside its top edge, below it, inside its bottom edge; a label with no free place is left out
  // (its box and colour still show). Returns [{x, y, w, h, text, id}].
  const placed = [], pad = 3, lh = 15;
  const free = r => r.x >= 0 && r.y >= 0 && r.x + r.w <= W && r.y + r.h <= H &&
    !placed.some(p => r.x < p.x + p.w && p.x < r.x + r.w && r.y < p.y + p.h && p.y < r.y + r.h);
  const order = [...items].sort((a, b) => (b.box[2] - b.box[0]) * (b.box[3] - b.box[1]) - (a.box[2] - a.box[0]) * (a.box[3] - a.box[1]));
  for (const it of order) {
    const w = g.measureText(it.text).width + 2 * pad, [x0, y0, x1, y1] = it.box;
    const xs = [x0, x1 - w, Math.min(W - w, Math.max(0, x0))];
    const ys = [y0 - lh - 1, y0 + 1, y1 + 1, y1 - lh - 1];
    let spot = null;
    for (const y of ys) { for (const x of xs) { const r = {x: Math.max(0, Math.min(W - w, x)), y, w, h: lh}; if (free(r)) { spot = r; break; } } if (spot) break; }
    if (spot) placed.push({...spot, text: it.text, id: it.id, colour: it.colour});
  }
  return placed;
}

class MaskPlayer {
  constructor(video, canvas, info, opts) {
    this.video = video; this.canvas = canvas; this.info = info; this.opts = opts || {};
    this.step = info.sample_step; this.cache = new Map(); this.pending = new Map(); this.drawn = null;
    this.hidden = new Set(); this.showMasks = true; this.showBoxes = true; this.labels = [];
    this.highlight = new Set(); this.extra = [];  // instances to outline; drawn boxes (id, time, box, text, dashed, colour)
    canvas.width = info.video.width; canvas.height = info.video.height;
    video.src = `/api/videos/${encodeURIComponent(info.video.video_id)}/media`;
    video.removeAttribute("controls");
    controlBar(video, info.video.duration_s, info.video.fps);
    const tick = (now, meta) => { this.draw(meta.mediaTime); video.requestVideoFrameCallback(tick); };
    video.requestVideoFrameCallback(tick);
    video.addEventListener("seeked", () => this.draw(video.currentTime));
    this.setupPointer();
  }
  // the instance a mask belongs to and its concept: the page maps them to the pending fixes' view
  label(m) { return this.opts.labelOf ? this.opts.labelOf(m) : {instance_id: m.instance_id, concept: m.concept}; }
  sample(t) { return Math.max(0, Math.round(t / this.step)); }
  fetch(k) {
    if (this.cache.has(k)) return Promise.resolve(this.cache.get(k));
    if (!this.pending.has(k)) {
      const p = api(`/api/videos/${encodeURIComponent(this.info.video.video_id)}/masks?k=${k}`).then(async m => {
        m.labels = null;
        if (m.png) {
          const blob = await (await fetch(`data:image/png;base64,${m.png}`)).blob();
          const bmp = await createImageBitmap(blob, {colorSpaceConversion: "none", premultiplyAlpha: "none"});
          const c = new OffscreenCanvas(m.mask_width, m.mask_height), g = c.getContext("2d");
          g.drawImage(bmp, 0, 0);
          m.labels = g.getImageData(0, 0, m.mask_width, m.mask_height).data;
        }
        this.cache.set(k, m); this.pending.delete(k);
        if (this.cache.size > 64) this.cache.delete(this.cache.keys().next().value);
        return m;
      });
      this.pending.set(k, p);
    }
    return this.pending.get(k);
  }
  async draw(t) {
    const k = this.sample(t);
    this.current = k;
    if (this.opts.onTime) this.opts.onTime(t);
    const m = await this.fetch(k);
    if (this.current !== k) return;
    this.paint(m);
    if (!this.video.paused) for (let i = 1; i <= 3; i++) this.fetch(k + i);
  }
  redraw() { const m = this.cache.get(this.current); if (m) this.paint(m); }
  paint(m) {
    const g = this.canvas.getContext("2d"), W = this.canvas.width, H = this.canvas.height;
    g.clearRect(0, 0, W, H);
    const shown = m.masks.map(x => ({...x, ...this.label(x)})).filter(x => x.instance_id !== null && !this.hidden.has(x.instance_id));
    if (this.showMasks && m.labels) {
      const colours = [null], visible = [false];
      for (const x of m.masks) {
        const l = this.label(x);
        colours.push(rgb(l.instance_id)); visible.push(l.instance_id !== null && !this.hidden.has(l.instance_id));
      }
      const img = new ImageData(m.mask_width, m.mask_height), src = m.labels, dst = img.data;
      for (let i = 0, j = 0; i < src.length; i += 4, j += 4) {
        const l = src[i];
        if (l && visible[l]) { const c = colours[l]; dst[j] = c[0]; dst[j + 1] = c[1]; dst[j + 2] = c[2]; dst[j + 3] = 140; }
      }
      const tmp = new OffscreenCanvas(m.mask_width, m.mask_height);
      tmp.getContext("2d").putImageData(img, 0, 0);
      g.drawImage(tmp, 0, 0, W, H);
    }
    const boxes = shown.map(x => ({id: x.instance_id, box: x.box, text: `${x.concept} #${x.instance_id}`}))
      .concat(this.extra.filter(x => Math.abs(x.time - m.time) < this.step / 2 + 1e-6 && !this.hidden.has(x.id)));
    this.labels = [];
    if (this.showBoxes) {
      g.font = "12px system-ui"; g.textBaseline = "top";
      for (const x of boxes) {
        const [x0, y0, x1, y1] = x.box;
        g.lineWidth = this.highlight.has(x.id) ? 4 : 2;
        g.setLineDash(x.dashed ? [6, 4] : []);
        g.strokeStyle = x.colour || colour(x.id); g.strokeRect(x0, y0, x1 - x0, y1 - y0);
      }
      g.setLineDash([]);
      this.labels = placeLabels(boxes, W, H, g);
      for (const l of this.labels) {
        g.fillStyle = "rgba(255,255,255,0.85)"; g.fillRect(l.x, l.y, l.w, l.h);
        g.fillStyle = l.colour || colour(l.id); g.fillText(l.text, l.x + 3, l.y + 1);
      }
    }
    if (this.rubber) { const [x0, y0, x1, y1] = this.rubber; g.lineWidth = 2; g.setLineDash([5, 3]); g.strokeStyle = "#fff"; g.strokeRect(x0, y0, x1 - x0, y1 - y0); g.setLineDash([]); }
    this.drawn = m.sample_index; this.shownMasks = m;
    this.canvas.dataset.sample = m.sample_index;
  }
  // ------------------------------------------------------------------ pointer: pick a mask, draw a box
  at(e) {
    const r = this.canvas.getBoundingClientRect();
    return [(e.clientX - r.left) * this.canvas.width / r.width, (e.clientY - r.top) * this.canvas.height / r.height];
  }
  pick(x, y) {
    // the instance whose mask (else box) is under view pixel (x, y)
    const m = this.shownMasks;
    if (!m) return null;
    if (m.labels) {
      const mx = Math.floor(x * m.mask_width / this.canvas.width), my = Math.floor(y * m.mask_height / this.canvas.height);
      const l = m.labels[4 * (my * m.mask_width + mx)];
      if (l) { const id = this.label(m.masks[l - 1]).instance_id; if (id !== null && !this.hidden.has(id)) return id; }
    }
    const hit = m.masks.map(o => ({...o, ...this.label(o)})).concat(this.extra.filter(b => Math.abs(b.time - m.time) < this.step / 2 + 1e-6).map(b => ({instance_id: b.id, box: b.box})))
      .filter(o => o.instance_id !== null && !this.hidden.has(o.instance_id) && o.box[0] <= x && x <= o.box[2] && o.box[1] <= y && y <= o.box[3]);
    return hit.length ? hit[0].instance_id : null;
  }
  setupPointer() {
    const c = this.canvas;
    let start = null;
    c.addEventListener("pointerdown", e => {
      if (!this.opts.onBox && !this.opts.onPick) return;
      start = this.at(e); c.setPointerCapture(e.pointerId);
    });
    c.addEventListener("pointermove", e => {
      if (!start || !this.drawing) return;
      const [x, y] = this.at(e);
      this.rubber = [Math.min(start[0], x), Math.min(start[1], y), Math.max(start[0], x), Math.max(start[1], y)];
      this.redraw();
    });
    c.addEventListener("pointerup", e => {
      if (!start) return;
      const [x, y] = this.at(e), s = start; start = null;
      const box = [Math.min(s[0], x), Math.min(s[1], y), Math.max(s[0], x), Math.max(s[1], y)].map(v => Math.round(v * 10) / 10);
      this.rubber = null;
      if (this.drawing && box[2] - box[0] >= 4 && box[3] - box[1] >= 4) { this.opts.onBox(box, this.video.currentTime); this.redraw(); return; }
      this.redraw();
      if (this.opts.onPick) { const id = this.pick(x, y); if (id !== null) this.opts.onPick(id, e); }
    });
  }
  setDrawing(on) { this.drawing = on; this.canvas.classList.toggle("drawing", on); }
  seek(t) { this.video.currentTime = Math.max(0, Math.min(t, this.info.video.duration_s)); }
}
