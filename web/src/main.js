// Meridian's dashboard: the coordinator's /api/overview and /api/jobs/ID, read with
// the user's token and drawn as a map of sites and links, tables of jobs, nodes and
// the WAN, and a task timeline per job. Everything the server sends is shown through
// textContent or SVG attributes, never parsed as HTML.
import './style.css';

const POLL_MS = 1000;
const SVG = 'http://www.w3.org/2000/svg';
const TOKEN_KEY = 'meridian-token';

const state = { token: '', selectedJob: null, timer: null };

// Approximate places of common cloud regions (latitude, longitude), for the map.
// Sites elsewhere go on a ring around the map's centre.
const REGIONS = {
  'us-east-1': [38.9, -77.4], 'us-east-2': [40.0, -83.0], 'us-west-1': [37.4, -122.0], 'us-west-2': [45.6, -121.2],
  'us-central1': [41.3, -95.9], 'us-east4': [39.0, -77.5], 'us-west1': [45.6, -121.2],
  'eu-west-1': [53.3, -6.3], 'eu-west-2': [51.5, -0.1], 'eu-central-1': [50.1, 8.7], 'eu-north-1': [59.3, 18.1],
  'europe-west1': [50.4, 3.8], 'europe-west4': [53.4, 6.8], 'europe-west3': [50.1, 8.7],
  'ap-northeast-1': [35.7, 139.7], 'ap-southeast-1': [1.35, 103.8], 'ap-south-1': [19.1, 72.9],
  'asia-east1': [24.0, 121.0], 'cn-beijing': [39.9, 116.4], 'cn-shanghai': [31.2, 121.5], 'cn-hangzhou': [30.3, 120.2],
};

function el(tag, attrs = {}, text = '') {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== '') e.textContent = text;
  return e;
}

function svg(tag, attrs = {}, text = '') {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== '') e.textContent = text;
  return e;
}

export function formatBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${n} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

function formatSeconds(s) {
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

async function api(path) {
  const r = await fetch(path, { headers: { Authorization: `Bearer ${state.token}` }, cache: 'no-store' });
  if (r.status === 401 || r.status === 403) {
    const why = (await r.text()).trim();
    const e = new Error(why || `refused (${r.status})`);
    e.refused = true;
    throw e;
  }
  if (!r.ok) throw new Error(`${path}: ${r.status} ${(await r.text()).trim()}`);
  return r.json();
}

function showLogin(message) {
  clearTimeout(state.timer);
  document.getElementById('app').hidden = true;
  document.getElementById('login').hidden = false;
  document.getElementById('login-error').textContent = message || '';
}

// ---- the map

function placeSites(sites, width, height) {
  const pos = new Map();
  const unknown = [];
  for (const s of sites) {
    const ll = REGIONS[s.region] || REGIONS[s.name];
    if (ll) {
      pos.set(s.name, [((ll[1] + 180) / 360) * width, ((90 - ll[0]) / 180) * height * 1.6 - height * 0.35]);
    } else {
      unknown.push(s);
    }
  }
  // Known sites keep their places; the others share a ring, spread evenly.
  unknown.forEach((s, i) => {
    const a = (2 * Math.PI * i) / Math.max(unknown.length, 1) + Math.PI / 2;
    pos.set(s.name, [width / 2 + Math.cos(a) * width * 0.12, height * 0.55 + Math.sin(a) * height * 0.22]);
  });
  // Keep every site inside the picture, apart from the others.
  for (const [name, [x, y]] of pos) {
    pos.set(name, [Math.min(Math.max(x, 90), width - 90), Math.min(Math.max(y, 60), height - 60)]);
  }
  const names = [...pos.keys()];
  for (let pass = 0; pass < 20; pass += 1) {
    for (let i = 0; i < names.length; i += 1) {
      for (let j = i + 1; j < names.length; j += 1) {
        const a = pos.get(names[i]);
        const b = pos.get(names[j]);
        const dx = b[0] - a[0];
        const dy = b[1] - a[1];
        const d = Math.hypot(dx, dy) || 1;
        if (d < 120) {
          const push = (120 - d) / 2;
          a[0] -= (dx / d) * push;
          a[1] -= (dy / d) * push;
          b[0] += (dx / d) * push;
          b[1] += (dy / d) * push;
        }
      }
    }
  }
  return pos;
}

function drawMap(o) {
  const map = document.getElementById('map');
  const W = 960;
  const H = 420;
  map.replaceChildren();
  map.appendChild(svg('rect', { x: 0, y: 0, width: W, height: H, class: 'sea' }));
  const pos = placeSites(o.sites, W, H);
  const sent = new Map();
  for (const t of o.traffic) sent.set(`${t.from}>${t.to}`, t);
  const maxBytes = Math.max(1, ...o.traffic.filter((t) => t.from !== t.to).map((t) => t.bytes));
  o.links.forEach((l, index) => {
    const a = pos.get(l.a);
    const b = pos.get(l.b);
    if (!a || !b) return;
    const ab = sent.get(`${l.a}>${l.b}`);
    const ba = sent.get(`${l.b}>${l.a}`);
    const bytes = (ab ? ab.bytes : 0) + (ba ? ba.bytes : 0);
    const cost = (ab ? ab.egress_usd : 0) + (ba ? ba.egress_usd : 0);
    const g = svg('g', { class: bytes > 0 ? 'link busy' : 'link', 'data-link': `${l.a}-${l.b}` });
    g.appendChild(svg('line', { x1: a[0], y1: a[1], x2: b[0], y2: b[1], 'stroke-width': 1.5 + (6 * bytes) / maxBytes }));
    const label = `${l.rtt_ms}${l.jitter_ms ? ` + 0–${l.jitter_ms}` : ''} ms, ${(l.bandwidth_bps / 1e9).toFixed(l.bandwidth_bps < 1e9 ? 1 : 0)} Gb/s` +
      (bytes > 0 ? ` · ${formatBytes(bytes)} · $${cost.toFixed(2)}` : '');
    // Labels of links that meet sit at different points along them, off the line.
    const t = index % 2 === 0 ? 0.42 : 0.58;
    const len = Math.hypot(b[0] - a[0], b[1] - a[1]) || 1;
    const nx = -(b[1] - a[1]) / len;
    const ny = (b[0] - a[0]) / len;
    g.appendChild(svg('text', {
      x: a[0] + (b[0] - a[0]) * t + nx * 12, y: a[1] + (b[1] - a[1]) * t + ny * 12, class: 'link-label',
    }, label));
    map.appendChild(g);
  });
  for (const s of o.sites) {
    const p = pos.get(s.name);
    const nodes = o.nodes.filter((n) => n.site === s.name);
    const alive = nodes.filter((n) => n.alive).length;
    const devices = nodes.reduce((sum, n) => sum + n.device_count, 0);
    const busy = nodes.reduce((sum, n) => sum + n.devices_busy, 0);
    const running = nodes.reduce((sum, n) => sum + n.running, 0);
    const g = svg('g', { class: `site ${s.kind}`, 'data-site': s.name });
    const dot = svg('circle', { cx: p[0], cy: p[1], r: 16 + Math.min(14, nodes.length) });
    dot.appendChild(svg('title', {}, `${s.name}: ${running} tasks running`));
    g.appendChild(dot);
    g.appendChild(svg('text', { x: p[0], y: p[1] + 4, class: 'site-count' }, String(running)));
    g.appendChild(svg('text', { x: p[0], y: p[1] - 36, class: 'site-name' }, s.name));
    g.appendChild(svg('text', { x: p[0], y: p[1] + 48, class: 'site-detail' },
      `${s.kind} · ${alive}/${nodes.length} nodes · ` +
      (devices > 0 ? `${busy.toFixed(1)}/${devices} devices busy` : 'CPU only')));
    map.appendChild(g);
  }
}

// ---- tables

function bar(fraction, text) {
  const wrap = el('div', { class: 'bar' });
  const fill = el('div', { class: 'fill' });
  fill.style.width = `${Math.round(Math.min(1, Math.max(0, fraction)) * 100)}%`;
  wrap.appendChild(fill);
  wrap.appendChild(el('span', {}, text));
  return wrap;
}

function drawNodes(nodes) {
  const body = document.querySelector('#nodes tbody');
  body.replaceChildren();
  for (const n of nodes) {
    const tr = el('tr', { 'data-node': n.name, class: n.alive ? 'alive' : 'dead' });
    tr.appendChild(el('td', {}, n.name));
    tr.appendChild(el('td', {}, n.site));
    tr.appendChild(el('td', {}, n.alive ? 'alive' : 'dead'));
    tr.appendChild(el('td', {}, (n.devices || 'CPU only') + (n.emulated ? ' (emulated)' : '')));
    const dev = el('td');
    dev.appendChild(n.device_count > 0 ? bar(n.devices_busy / n.device_count, `${n.devices_busy}/${n.device_count}`) : el('span', {}, '-'));
    tr.appendChild(dev);
    const cpu = el('td');
    cpu.appendChild(bar(n.cpu_busy / n.cpu_cores, `${n.cpu_busy}/${n.cpu_cores}`));
    tr.appendChild(cpu);
    tr.appendChild(el('td', { class: 'num' }, String(n.running)));
    tr.appendChild(el('td', { class: 'num' }, n.alive ? `${formatSeconds(n.heartbeat_age_s)} ago` : '-'));
    body.appendChild(tr);
  }
}

function drawWan(o) {
  const table = document.getElementById('wan');
  const head = table.querySelector('thead');
  const body = table.querySelector('tbody');
  const names = o.sites.map((s) => s.name);
  const hr = el('tr');
  hr.appendChild(el('th', {}, 'from \\ to'));
  for (const n of names) hr.appendChild(el('th', {}, n));
  head.replaceChildren(hr);
  body.replaceChildren();
  const sent = new Map();
  for (const t of o.traffic) sent.set(`${t.from}>${t.to}`, t);
  for (const from of names) {
    const tr = el('tr', { 'data-from': from });
    tr.appendChild(el('th', {}, from));
    for (const to of names) {
      const t = sent.get(`${from}>${to}`);
      const td = el('td', { class: 'num', 'data-to': to }, t ? formatBytes(t.bytes) : '-');
      if (t && t.egress_usd > 0) td.appendChild(el('small', {}, ` $${t.egress_usd.toFixed(4)}`));
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

function drawJobs(jobs) {
  const body = document.querySelector('#jobs tbody');
  body.replaceChildren();
  for (const j of jobs) {
    const tr = el('tr', { 'data-job': String(j.id), class: `status-${j.status}` });
    if (state.selectedJob === j.id) tr.classList.add('selected');
    tr.appendChild(el('td', { class: 'num' }, String(j.id)));
    tr.appendChild(el('td', {}, j.name));
    tr.appendChild(el('td', {}, j.tenant));
    tr.appendChild(el('td', { class: 'status' }, j.status));
    const prog = el('td');
    prog.appendChild(bar(j.tasks ? j.succeeded / j.tasks : 0, `${j.succeeded}/${j.tasks}`));
    tr.appendChild(prog);
    tr.appendChild(el('td', { class: 'num' }, String(j.running)));
    tr.appendChild(el('td', { class: 'num' }, String(j.failed)));
    tr.addEventListener('click', () => {
      state.selectedJob = j.id;
      refresh();
    });
    body.appendChild(tr);
  }
}

// ---- one job: where and when each task ran

function drawJob(d) {
  const j = d.job;
  document.getElementById('job').hidden = false;
  document.getElementById('job-title').textContent = `Job ${j.id}: ${j.name}`;
  document.getElementById('job-summary').textContent =
    `${j.status} · ${j.succeeded} of ${j.tasks} tasks succeeded, ${j.running} running, ${j.waiting} waiting, ` +
    `${j.failed} failed` + (j.reason ? ` · ${j.reason}` : '');
  const placed = d.tasks.filter((t) => t.started_us > 0 && t.node);
  const now = Date.now() * 1000;
  const endOf = (t) => (t.finished_us > 0 ? t.finished_us : now);
  const t0 = Math.min(...placed.map((t) => t.started_us), now);
  const t1 = Math.max(...placed.map(endOf), t0 + 1);
  // A row per node, split into lanes so that tasks running at once on it stack.
  const byNode = new Map();
  for (const t of [...placed].sort((a, b) => a.started_us - b.started_us)) {
    if (!byNode.has(t.node)) byNode.set(t.node, []);
    const lanes = byNode.get(t.node);
    let lane = lanes.findIndex((laneEnd) => laneEnd <= t.started_us);
    if (lane < 0) {
      lane = lanes.length;
      lanes.push(0);
    }
    lanes[lane] = endOf(t);
    t.lane = lane;
  }
  const nodes = [...byNode.keys()].sort();
  const lane = 14;
  const left = 150;
  const W = 960;
  const top = 30;
  const rowTop = new Map();
  let y = top;
  for (const n of nodes) {
    rowTop.set(n, y);
    y += byNode.get(n).length * lane + 8;
  }
  const H = y + 10;
  const g = document.getElementById('gantt');
  g.setAttribute('viewBox', `0 0 ${W} ${H}`);
  g.replaceChildren();
  const x = (us) => left + ((us - t0) / (t1 - t0)) * (W - left - 20);
  for (const n of nodes) {
    const yTop = rowTop.get(n);
    const height = byNode.get(n).length * lane;
    g.appendChild(svg('text', { x: left - 8, y: yTop + height / 2 + 4, class: 'gantt-node' }, n));
    g.appendChild(svg('line', { x1: left, x2: W - 20, y1: yTop + height + 4, y2: yTop + height + 4, class: 'gantt-grid' }));
  }
  for (const t of placed) {
    const r = svg('rect', {
      x: x(t.started_us), y: rowTop.get(t.node) + t.lane * lane + 1, width: Math.max(2, x(endOf(t)) - x(t.started_us)),
      height: lane - 2, class: `task ${t.status}`, 'data-task': t.name,
    });
    r.appendChild(svg('title', {}, `${t.name} on ${t.node} (${t.site}, ${t.device || 'CPU'}): ${t.status}`));
    g.appendChild(r);
  }
  const span = (t1 - t0) / 1e6;
  g.appendChild(svg('text', { x: left, y: 18, class: 'gantt-axis' }, '0 s'));
  g.appendChild(svg('text', { x: W - 20, y: 18, class: 'gantt-axis end' }, formatSeconds(span)));
  document.getElementById('job-more').textContent = d.more_tasks ? `(the first ${d.tasks.length} tasks)` : '';
}

// ---- the loop

async function refresh() {
  clearTimeout(state.timer);
  try {
    const o = await api('/api/overview');
    document.getElementById('login').hidden = true;
    document.getElementById('app').hidden = false;
    document.getElementById('who').textContent = o.user;
    drawMap(o);
    drawJobs(o.jobs);
    drawNodes(o.nodes);
    drawWan(o);
    if (state.selectedJob !== null) drawJob(await api(`/api/jobs/${state.selectedJob}`));
    const live = document.getElementById('live');
    live.textContent = `updated ${new Date().toLocaleTimeString()}`;
    live.className = 'ok';
  } catch (e) {
    if (e.refused) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(state.token ? e.message : '');
      state.token = '';
      return;
    }
    const live = document.getElementById('live');
    live.textContent = `cannot reach the coordinator: ${e.message}`;
    live.className = 'error';
  }
  state.timer = setTimeout(refresh, POLL_MS);
}

function start() {
  // A token may come in the URL's fragment (never sent to a server); it is moved
  // into this tab's storage and taken out of the address bar.
  const m = /token=([^&]+)/.exec(window.location.hash);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', window.location.pathname);
  }
  document.getElementById('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = document.getElementById('token').value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    state.token = t;
    refresh();
  });
  state.token = sessionStorage.getItem(TOKEN_KEY) || '';
  // Without a token an insecure coordinator still answers; a secure one refuses and
  // the sign-in form shows.
  refresh();
}

start();
