// The KV block map: KvModel applies the server's "kv" frames (snapshot, then deltas; see
// docs/websocket-protocol.md) to a per-block picture, and KvMapView draws one pool on a canvas
// (one cell per block) and explains the block under the pointer.

const FREE = { s: 'free', r: 0, t: 0, h: null, o: [] };

export function requestColor(request) {
  const hue = (Number(request) * 137.508) % 360;
  return `hsl(${hue.toFixed(1)} 62% 58%)`;
}

export class KvModel {
  constructor() {
    this.device = [];
    this.cpu = [];
    this.seqs = new Map(); // seq id -> {seq, request, id}
    this.blockSize = 0;
    this.version = 0;
    this.stats = null;
    this.tMs = 0;
    this.frames = 0;
    this.highestTouched = -1; // highest device block ever not free: big pools show up to it
  }

  apply(frame) {
    if (frame.kind === 'snapshot') {
      this.device = new Array(frame.num_device_blocks).fill(FREE);
      this.cpu = new Array(frame.num_cpu_blocks).fill(FREE);
    }
    for (const b of frame.device) {
      this.device[b.i] = b;
      if (b.s !== 'free' && b.i > this.highestTouched) this.highestTouched = b.i;
    }
    for (const b of frame.cpu) this.cpu[b.i] = b;
    this.seqs = new Map(frame.seqs.map((s) => [s.seq, s]));
    this.blockSize = frame.block_size;
    this.version = frame.version;
    this.stats = frame.stats;
    this.tMs = frame.t_ms;
    this.frames += 1;
  }

  // {free, cached, used, shared} over a pool.
  counts(pool = this.device) {
    const c = { free: 0, cached: 0, used: 0, shared: 0 };
    for (const b of pool) {
      c[b.s] += 1;
      if (b.r > 1) c.shared += 1;
    }
    return c;
  }

  // The request a block is coloured by (its first owner's), or null.
  requestOf(block) {
    if (!block.o.length) return null;
    const seq = this.seqs.get(block.o[0]);
    return seq ? seq.request : null;
  }

  // Owners grouped by request: [{label, request, seqs: [...]}].
  ownersOf(block) {
    const groups = new Map();
    for (const seqId of block.o) {
      const seq = this.seqs.get(seqId);
      const request = seq ? seq.request : 0;
      if (!groups.has(request)) {
        const label = seq && seq.id ? seq.id : request ? `request ${request}` : 'unknown request';
        groups.set(request, { label, request, seqs: [] });
      }
      groups.get(request).seqs.push(seqId);
    }
    return [...groups.values()];
  }

  // Requests holding blocks now: [{request, label, blocks}].
  requests() {
    const byRequest = new Map();
    for (const b of this.device) {
      if (b.s !== 'used') continue;
      for (const g of this.ownersOf(b)) {
        const entry = byRequest.get(g.request) ?? { request: g.request, label: g.label, blocks: 0 };
        entry.blocks += 1;
        byRequest.set(g.request, entry);
      }
    }
    return [...byRequest.values()].sort((a, b) => a.request - b.request);
  }
}

export class KvMapView {
  // `pool`: 'device' or 'cpu'. `maxHeight`: the canvas never grows past it (cells shrink).
  constructor(canvas, model, pool, { maxHeight = 340, minCell = 3, maxCell = 22 } = {}) {
    this.canvas = canvas;
    this.model = model;
    this.pool = pool;
    this.maxHeight = maxHeight;
    this.minCell = minCell;
    this.maxCell = maxCell;
    this.layout = { cell: maxCell, cols: 1, shown: 0 };
  }

  blocks() {
    return this.pool === 'device' ? this.model.device : this.model.cpu;
  }

  // How many blocks to draw: all of a small pool; of a huge one (the default 2 GiB pool of a
  // tiny model holds ~100k blocks) the part up to the highest block ever used, which is where
  // the allocator hands blocks out first.
  shownCount() {
    const n = this.blocks().length;
    if (this.pool === 'cpu' || n <= 4096) return n;
    const touched = this.model.highestTouched + 1;
    return Math.min(n, Math.max(1024, Math.ceil((touched + 256) / 256) * 256));
  }

  computeLayout() {
    const shown = this.shownCount();
    const width = Math.max(60, Math.floor(this.canvas.parentElement.clientWidth));
    let cell = this.maxCell;
    while (cell > this.minCell) {
      const cols = Math.max(1, Math.floor(width / cell));
      if (Math.ceil(shown / cols) * cell <= this.maxHeight) break;
      cell -= 1;
    }
    const cols = Math.max(1, Math.floor(width / cell));
    const rows = Math.max(1, Math.ceil(shown / cols));
    this.layout = { cell, cols, shown, width: cols * cell, height: rows * cell };
  }

  draw() {
    this.computeLayout();
    const { cell, cols, shown, width, height } = this.layout;
    const ratio = window.devicePixelRatio || 1;
    if (this.canvas.width !== width * ratio || this.canvas.height !== height * ratio) {
      this.canvas.width = width * ratio;
      this.canvas.height = height * ratio;
      this.canvas.style.width = `${width}px`;
      this.canvas.style.height = `${height}px`;
    }
    const ctx = this.canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const blocks = this.blocks();
    const gap = cell >= 8 ? 1.5 : cell >= 5 ? 1 : 0.5;
    const size = this.model.blockSize || 16;
    ctx.textAlign = 'center';
    ctx.textBaseline = 'middle';
    ctx.font = `700 ${Math.max(8, Math.floor(cell * 0.55))}px system-ui, sans-serif`;
    for (let i = 0; i < shown; i += 1) {
      const b = blocks[i];
      const x = (i % cols) * cell + gap / 2;
      const y = Math.floor(i / cols) * cell + gap / 2;
      const w = cell - gap;
      if (b.s === 'free') {
        ctx.fillStyle = '#232a33';
        ctx.fillRect(x, y, w, w);
        continue;
      }
      if (b.s === 'cached') {
        ctx.fillStyle = '#4a5566';
        ctx.fillRect(x, y, w, w);
        if (cell >= 6) {
          ctx.strokeStyle = '#8aa0bb';
          ctx.lineWidth = 1;
          ctx.strokeRect(x + 0.5, y + 0.5, w - 1, w - 1);
        }
        continue;
      }
      const request = this.model.requestOf(b);
      const color = request === null ? '#9aa4b1' : requestColor(request);
      // A partly filled block: the filled share at the bottom, the rest dimmed.
      const filled = Math.max(0.15, Math.min(1, b.t / size));
      ctx.fillStyle = '#323b47';
      ctx.fillRect(x, y, w, w);
      ctx.fillStyle = color;
      ctx.fillRect(x, y + w * (1 - filled), w, w * filled);
      if (b.r > 1) {
        if (cell >= 12) {
          ctx.fillStyle = '#0b0e12';
          ctx.fillText(String(b.r), x + w / 2, y + w / 2 + 0.5);
        } else {
          ctx.fillStyle = '#ffffff';
          ctx.fillRect(x + w / 2 - 1, y + w / 2 - 1, 2, 2);
        }
      }
    }
  }

  // The block index under a point in client coordinates, or -1.
  blockAt(clientX, clientY) {
    const rect = this.canvas.getBoundingClientRect();
    const { cell, cols, shown } = this.layout;
    const col = Math.floor((clientX - rect.left) / cell);
    const row = Math.floor((clientY - rect.top) / cell);
    if (col < 0 || col >= cols || row < 0) return -1;
    const i = row * cols + col;
    return i < shown ? i : -1;
  }

  // The centre of block i in client coordinates (tests hover it).
  centerOf(i) {
    const rect = this.canvas.getBoundingClientRect();
    const { cell, cols } = this.layout;
    return { x: rect.left + (i % cols) * cell + cell / 2, y: rect.top + Math.floor(i / cols) * cell + cell / 2 };
  }

  describe(i) {
    const b = this.blocks()[i];
    if (!b) return '';
    const lines = [`${this.pool} block ${i} · ${b.s}`];
    if (b.s !== 'free') lines.push(`ref count ${b.r} · ${b.t}/${this.model.blockSize} tokens`);
    if (b.h) lines.push(`hash ${b.h.slice(0, 12)}`);
    for (const g of this.model.ownersOf(b)) {
      lines.push(`owner ${g.label} (seq ${g.seqs.join(', ')})`);
    }
    if (b.s === 'cached') lines.push('no owner: kept for prefix reuse, evicted last-used first');
    return lines.join('\n');
  }
}
