// Small live charts of the engine's gauges, fed by the "kv" frames' stats (about 10 a second).

const HISTORY = 150; // samples kept per gauge (15 s at 10 frames a second)

class Gauge {
  constructor(container, { key, label, format, max }) {
    this.key = key;
    this.format = format;
    this.fixedMax = max;
    this.values = [];
    this.el = document.createElement('div');
    this.el.className = 'gauge';
    this.el.dataset.gauge = key;
    this.el.innerHTML = `<div class="label">${label}</div><div class="value">–</div><canvas></canvas>`;
    this.valueEl = this.el.querySelector('.value');
    this.canvas = this.el.querySelector('canvas');
    container.append(this.el);
  }

  push(value) {
    this.values.push(value);
    if (this.values.length > HISTORY) this.values.shift();
    this.valueEl.textContent = this.format(value);
    this.draw();
  }

  draw() {
    const ratio = window.devicePixelRatio || 1;
    const width = this.canvas.clientWidth || 120;
    const height = this.canvas.clientHeight || 36;
    if (this.canvas.width !== width * ratio) this.canvas.width = width * ratio;
    if (this.canvas.height !== height * ratio) this.canvas.height = height * ratio;
    const ctx = this.canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const max = this.fixedMax ?? Math.max(1, ...this.values);
    const step = width / (HISTORY - 1);
    const x0 = width - (this.values.length - 1) * step;
    ctx.beginPath();
    this.values.forEach((v, i) => {
      const x = x0 + i * step;
      const y = height - 2 - (Math.min(v, max) / max) * (height - 4);
      if (i === 0) ctx.moveTo(x, y);
      else ctx.lineTo(x, y);
    });
    ctx.strokeStyle = '#5aa9ff';
    ctx.lineWidth = 1.5;
    ctx.stroke();
    ctx.lineTo(width, height);
    ctx.lineTo(x0, height);
    ctx.closePath();
    ctx.fillStyle = 'rgba(90, 169, 255, 0.15)';
    ctx.fill();
  }
}

const pct = (v) => `${(v * 100).toFixed(1)}%`;
const int = (v) => String(Math.round(v));

export class Gauges {
  constructor(container) {
    this.gauges = [
      { key: 'running', label: 'running seqs', format: int },
      { key: 'waiting', label: 'waiting seqs', format: int },
      { key: 'swapped', label: 'swapped seqs', format: int },
      { key: 'kv_usage', label: 'KV usage', format: pct, max: 1 },
      { key: 'hit_rate', label: 'prefix hit rate', format: pct, max: 1 },
      { key: 'tokens_per_s', label: 'tokens/s', format: (v) => v.toFixed(0) },
    ].map((spec) => new Gauge(container, spec));
    this.previous = null;
  }

  // stats: a kv frame's "stats"; tMs: its "t_ms".
  update(stats, tMs) {
    const derived = {
      running: stats.running,
      waiting: stats.waiting,
      swapped: stats.swapped,
      kv_usage: stats.kv_usage,
      hit_rate: stats.prefix_queries_tokens ? stats.prefix_hits_tokens / stats.prefix_queries_tokens : 0,
      tokens_per_s: 0,
    };
    if (this.previous && tMs > this.previous.tMs) {
      const tokens = stats.generated_tokens - this.previous.stats.generated_tokens;
      derived.tokens_per_s = (1000 * Math.max(0, tokens)) / (tMs - this.previous.tMs);
    }
    this.previous = { stats, tMs };
    for (const g of this.gauges) g.push(derived[g.key]);
  }
}
