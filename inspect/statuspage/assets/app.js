// notifier /status: fetches status.json every second and draws, for each
// provider, the sent rate against its contract and the queue delay against
// max_queue_delay on <canvas>, then fills the tables (a provider's tenants
// in their own, shown when any has jobs waiting or sent). Hand-written, no
// library; every value from the server goes into the page as text.
'use strict';

(function () {
  const COLOR = {
    sent: '#2563eb', limit: '#dc2626', delay: '#059669',
    pause: 'rgba(245, 158, 11, 0.22)', grid: '#e5e7eb', axis: '#6b7280', bg: '#ffffff',
  };
  const PAD = { l: 52, r: 12, t: 8, b: 20 };
  const MIN_SPAN = 60000;

  let windowMs = 300000;
  let last = null;

  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // niceStep rounds v up to 1, 2, 2.5 or 5 times a power of ten.
  function niceStep(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5]) {
      if (m * p >= v * (1 - 1e-9)) return m * p;
    }
    return 10 * p;
  }

  function fmtNum(v) {
    if (v === 0) return '0';
    if (Math.abs(v) >= 100) return String(Math.round(v));
    return String(Math.round(v * 100) / 100);
  }

  function fmtAgo(ms) {
    const s = Math.round(ms / 1000);
    if (s === 0) return 'now';
    if (s % 60 === 0) return '-' + s / 60 + 'm';
    if (s > 60) return '-' + Math.floor(s / 60) + 'm' + (s % 60) + 's';
    return '-' + s + 's';
  }

  function maxOf(arr, from) {
    let m = 0;
    for (let i = from; i < arr.length; i++) {
      if (arr[i] !== null && arr[i] > m) m = arr[i];
    }
    return m;
  }

  // drawChart draws one series (solid) and its limit (dashed) over time,
  // shading the samples where the provider was paused by a 429.
  function drawChart(cv, d) {
    const dpr = window.devicePixelRatio || 1;
    const w = cv.clientWidth, h = cv.clientHeight;
    if (cv.width !== Math.round(w * dpr) || cv.height !== Math.round(h * dpr)) {
      cv.width = Math.round(w * dpr);
      cv.height = Math.round(h * dpr);
    }
    const g = cv.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = COLOR.bg;
    g.fillRect(0, 0, w, h);

    const x0 = PAD.l, x1 = w - PAD.r, y0 = PAD.t, y1 = h - PAD.b;
    const tmax = d.now, tmin = d.now - d.span;
    let first = 0;
    while (first < d.t.length && d.t[first] < tmin) first++;
    // The y scale: room above the limit and the series, in 2 to 4 steps
    // of 1, 2, 2.5 or 5 times a power of ten.
    const top = Math.max(maxOf(d.series, first) * 1.1, maxOf(d.limit, first) * 1.25, d.floor);
    const step = niceStep(top / 4);
    const ymax = Math.ceil(top / step - 1e-9) * step;
    const X = (t) => x0 + (t - tmin) / (tmax - tmin) * (x1 - x0);
    const Y = (v) => Math.round(y1 - v / ymax * (y1 - y0));

    // 429 pauses.
    g.fillStyle = COLOR.pause;
    for (let i = first; i < d.t.length; i++) {
      if (d.paused[i] > 0) {
        const a = X(d.t[i] - d.every / 2), b = X(d.t[i] + d.every / 2);
        g.fillRect(Math.max(a, x0), y0, Math.min(b, x1) - Math.max(a, x0), y1 - y0);
      }
    }

    // Grid and axes.
    g.font = '11px system-ui, "DejaVu Sans", sans-serif';
    g.lineWidth = 1;
    g.strokeStyle = COLOR.grid;
    g.fillStyle = COLOR.axis;
    g.textAlign = 'right';
    g.textBaseline = 'middle';
    for (let v = 0; v <= ymax * (1 + 1e-9); v += step) {
      const y = Y(v) + 0.5;
      g.beginPath(); g.moveTo(x0, y); g.lineTo(x1, y); g.stroke();
      g.fillText(fmtNum(v) + d.unit, x0 - 6, y);
    }
    const steps = [10000, 15000, 30000, 60000, 120000, 300000, 600000];
    const tstep = steps.find((s) => d.span / s <= 6) || 600000;
    g.textAlign = 'center';
    g.textBaseline = 'top';
    for (let a = 0; a <= d.span + 1; a += tstep) {
      const x = Math.round(X(tmax - a)) + 0.5;
      g.beginPath(); g.moveTo(x, y0); g.lineTo(x, y1); g.stroke();
      g.fillText(fmtAgo(a), Math.min(Math.max(x, x0 + 12), x1 - 12), y1 + 5);
    }

    // A line through the samples, broken where a value is missing or
    // samples were skipped (the source failed).
    let points = 0;
    function line(values, color, dash) {
      g.save();
      g.beginPath();
      g.rect(x0, y0 - 2, x1 - x0, y1 - y0 + 4);
      g.clip();
      g.strokeStyle = color;
      g.lineWidth = 2;
      g.lineJoin = 'round';
      g.lineCap = dash.length ? 'butt' : 'round';
      g.setLineDash(dash);
      g.beginPath();
      let open = false, prevT = 0;
      const from = Math.max(first - 1, 0);
      for (let i = from; i < d.t.length; i++) {
        const v = values[i];
        if (v === null || v === undefined) { open = false; continue; }
        const x = X(d.t[i]), y = Y(Math.min(v, ymax));
        if (open && d.t[i] - prevT <= 2.5 * d.every) {
          g.lineTo(x, y);
        } else {
          g.moveTo(x, y);
          if (dash.length === 0) g.lineTo(x + 0.01, y);
        }
        open = true; prevT = d.t[i];
        if (dash.length === 0) points++;
      }
      g.stroke();
      g.restore();
    }
    line(d.series, d.color, []);
    line(d.limit, COLOR.limit, [6, 4]);

    // The geometry, for the browser test: CSS pixels.
    Object.assign(cv.dataset, { x0: x0, x1: x1, y0: y0, y1: y1, ymax: ymax, points: points });
  }

  // providerBlock finds or makes the card of one provider.
  function providerBlock(name) {
    const id = 'p-' + name;
    let b = document.getElementById(id);
    if (b) return b;
    b = el('article', 'provider');
    b.id = id;
    b.dataset.provider = name;
    b.append(el('h3', 'title'));
    const charts = el('div', 'charts');
    for (const kind of ['sent', 'delay']) {
      const f = el('figure');
      const cap = el('figcaption');
      if (kind === 'sent') {
        cap.append(el('span', 'key sent', 'sent/s (10 s)'), el('span', 'key limit', 'contract'), el('span', 'key pause', '429 pause'));
      } else {
        cap.append(el('span', 'key delay', 'queue delay'), el('span', 'key limit', 'max_queue_delay'), el('span', 'key pause', '429 pause'));
      }
      const cv = el('canvas', kind);
      cv.setAttribute('role', 'img');
      f.append(cap, cv);
      charts.append(f);
    }
    b.append(charts);
    $('charts').append(b);
    return b;
  }

  function fillTable(id, rows, cols) {
    const body = $(id).tBodies[0];
    const trs = rows.map((r) => {
      const tr = el('tr');
      for (const [key, cls] of cols) {
        const td = el('td', cls || '', String(r[key]));
        if (key === 'pause' && r.pause !== '-') td.classList.add('paused');
        tr.append(td);
      }
      return tr;
    });
    body.replaceChildren(...trs);
  }

  function render(s) {
    const n = s.t.length;
    const latestT = n ? s.t[n - 1] : 0;
    const span = Math.max(MIN_SPAN, Math.min(windowMs, n ? s.now - s.t[0] : MIN_SPAN));
    $('at').textContent = n ? 'as of ' + s.table.at : 'waiting for the first sample…';

    const err = $('error');
    let msg = '';
    if (s.error) msg = 'The last sample failed: ' + s.error;
    else if (n && s.now - latestT > 3 * s.every_ms) msg = 'No sample for ' + Math.round((s.now - latestT) / 1000) + ' s.';
    err.textContent = msg;
    err.hidden = msg === '';

    const byName = new Map(s.table.providers.map((r) => [r.name, r]));
    const seen = new Set();
    for (const p of s.providers) {
      seen.add(p.name);
      const b = providerBlock(p.name);
      const row = byName.get(p.name);
      b.querySelector('.title').textContent = row
        ? p.name + ' (' + p.channel + ') — sent ' + row.sent + ' of ' + row.contract + ', delay ' + row.delay + ' of ' + row.max_delay + (row.pause !== '-' ? ', paused ' + row.pause : '')
        : p.name + ' (' + p.channel + ') — not in the current config';
      const common = { t: s.t, now: s.now, span: span, every: s.every_ms, paused: p.paused };
      drawChart(b.querySelector('canvas.sent'), Object.assign({ series: p.sent, limit: p.contract, color: COLOR.sent, unit: '/s', floor: 1 }, common));
      drawChart(b.querySelector('canvas.delay'), Object.assign({ series: p.delay, limit: p.max_delay, color: COLOR.delay, unit: 's', floor: 0.1 }, common));
    }
    for (const b of Array.from($('charts').children)) {
      if (!seen.has(b.dataset.provider)) b.remove();
    }

    fillTable('providers', s.table.providers, [['name'], ['channel'], ['contract', 'num'], ['sent', 'num'], ['queued', 'num'], ['delay', 'num'], ['max_delay', 'num'], ['pause'], ['breakers']]);
    const tenants = s.table.tenants || [];
    fillTable('tenants', tenants, [['provider'], ['tenant'], ['waiting', 'num'], ['share', 'num'], ['sent', 'num']]);
    $('tenants-section').hidden = tenants.length === 0;
    const shaping = s.table.shaping || [];
    fillTable('shaping', shaping, [['provider'], ['limit'], ['now']]);
    $('shaping-section').hidden = shaping.length === 0;
    fillTable('channels', s.table.channels, [['channel'], ['sent', 'num'], ['suppressed', 'num'], ['dead', 'num']]);
    fillTable('instances', s.table.instances, [['id'], ['host'], ['version'], ['in_flight', 'num'], ['limits'], ['up', 'num'], ['seen', 'num']]);
    const k = s.table.instances.length;
    $('instances-title').textContent = k + ' live instance' + (k === 1 ? '' : 's');
    document.body.dataset.samples = String(n);
  }

  async function refresh() {
    try {
      const r = await fetch('status.json', { cache: 'no-store' });
      if (!r.ok) throw new Error('HTTP ' + r.status);
      last = await r.json();
      render(last);
    } catch (e) {
      const err = $('error');
      err.textContent = 'Cannot read status.json from the notifier: ' + e.message;
      err.hidden = false;
    } finally {
      setTimeout(refresh, 1000);
    }
  }

  function init() {
    const sel = $('window');
    const fromHash = { '#1m': 60000, '#5m': 300000, '#10m': 600000 }[location.hash];
    if (fromHash) sel.value = String(fromHash);
    windowMs = Number(sel.value);
    sel.addEventListener('change', () => {
      windowMs = Number(sel.value);
      if (last) render(last);
    });
    window.addEventListener('resize', () => { if (last) render(last); });
    refresh();
  }

  init();
})();
