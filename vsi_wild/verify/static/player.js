// The view video with the masks of the nearest 2 FPS timestamp drawn over it, frame by frame
// (requestVideoFrameCallback). Masks come as one 8-bit label PNG per timestamp plus the list of
// its masks; each instance gets its colour here, and hidden ones are skipped.
"use strict";
class MaskPlayer {
  constructor(video, canvas, info, opts) {
    this.video = video; this.canvas = canvas; this.info = info; this.opts = opts || {};
    this.step = info.sample_step; this.cache = new Map(); this.pending = new Map(); this.drawn = null;
    this.hidden = new Set(); this.showMasks = true; this.showBoxes = true;
    canvas.width = info.video.width; canvas.height = info.video.height;
    video.src = `/api/videos/${encodeURIComponent(info.video.video_id)}/media`;
    const tick = (now, meta) => { this.draw(meta.mediaTime); video.requestVideoFrameCallback(tick); };
    video.requestVideoFrameCallback(tick);
    video.addEventListener("seeked", () => this.draw(video.currentTime));
  }
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
    if (this.showMasks && m.labels) {
      const colours = [null], visible = [false];
      for (const x of m.masks) { colours.push(rgb(x.instance_id)); visible.push(!this.hidden.has(x.instance_id)); }
      const img = new ImageData(m.mask_width, m.mask_height), src = m.labels, dst = img.data;
      for (let i = 0, j = 0; i < src.length; i += 4, j += 4) {
        const l = src[i];
        if (l && visible[l]) { const c = colours[l]; dst[j] = c[0]; dst[j + 1] = c[1]; dst[j + 2] = c[2]; dst[j + 3] = 140; }
      }
      const tmp = new OffscreenCanvas(m.mask_width, m.mask_height);
      tmp.getContext("2d").putImageData(img, 0, 0);
      g.drawImage(tmp, 0, 0, W, H);
    }
    if (this.showBoxes) {
      g.lineWidth = 2; g.font = "12px system-ui";
      for (const x of m.masks) {
        if (this.hidden.has(x.instance_id)) continue;
        const [x0, y0, x1, y1] = x.box;
        g.strokeStyle = colour(x.instance_id); g.strokeRect(x0, y0, x1 - x0, y1 - y0);
        g.fillStyle = colour(x.instance_id); g.fillText(`${x.concept} #${x.instance_id}`, x0 + 2, Math.max(12, y0 - 3));
      }
    }
    this.drawn = m.sample_index;
    this.canvas.dataset.sample = m.sample_index;
  }
  seek(t) { this.video.currentTime = Math.max(0, Math.min(t, this.info.video.duration_s)); }
}
