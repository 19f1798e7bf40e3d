/* orchestrator report: the examples table and per-example traces.
   Data comes from three JSON blocks in this page: meta, rows (the table, column by column)
   and details (one trace per example, parsed only when first needed). A served report has
   no details block and fetches example/<index>.json instead. All run text is inserted as
   text, never as HTML, so a review containing markup cannot change the page. */
(function () {
  'use strict';

  const $ = (sel, root) => (root || document).querySelector(sel);
  const meta = JSON.parse($('#meta-data').textContent);
  const rows = JSON.parse($('#rows-data').textContent);
  const N = rows.id.length;
  const PAGE = 50;
  const nodeInfo = {};
  (meta.nodes || []).forEach((n) => { nodeInfo[n.name] = n; });
  const indexById = new Map(rows.id.map((id, i) => [id, i]));
  /* Trace records arrive under short keys. The maps come with the page (report/payload.py
     derives them from the trace's models), so no key is spelled here, and a field this
     script has no view for is still listed under "other fields". */
  const K = meta.keys.run;
  const KA = meta.keys.attempt;
  const KRUN = meta.keys.earlier_run;
  const SHOWN = new Set(['item', 'status', 'value', 'error', 'messages', 'raw', 'attempts', 'cached',
    'latency', 'prompt_tokens', 'completion_tokens', 'model', 'tally'].map((f) => K[f]));
  const SHOWN_ATTEMPT = new Set(['number', 'kind', 'error', 'raw', 'finish_reason', 'latency',
    'prompt_tokens', 'completion_tokens', 'cached', 'sample'].map((f) => KA[f]));
  /* The fields of a record this script has no special view for, by their model names. */
  function otherFields(obj, keys, shown) {
    const names = {};
    for (const [field, key] of Object.entries(keys)) names[key] = field;
    const other = {};
    for (const [key, value] of Object.entries(obj)) {
      if (!shown.has(key) && names[key] !== undefined) other[names[key]] = value;
    }
    return other;
  }

  /* -- small helpers --------------------------------------------------------------- */

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === null || v === undefined || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k === 'text') el.textContent = v;
        else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
        else el.setAttribute(k, v === true ? '' : v);
      }
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function num(v) {
    if (v === null || v === undefined) return '—';
    if (typeof v !== 'number') return String(v);
    if (Number.isInteger(v)) return String(v);
    return String(Number(v.toPrecision(4)));
  }

  function json(v, indent) {
    try { return JSON.stringify(v, null, indent === undefined ? 2 : indent); } catch (e) { return String(v); }
  }

  function badge(status) {
    const s = String(status || '');
    return h('span', { class: 'badge ' + s.replace(/\s+/g, '-'), text: s });
  }

  function seconds(l) {
    return l ? (l < 1 ? (l * 1000).toFixed(0) + ' ms' : l.toFixed(2) + ' s') : null;
  }

  /* -- per-example data -------------------------------------------------------------- */

  let details = null;
  const fetched = new Map();

  function embeddedDetails() {
    if (details === null) {
      const node = $('#details-data');
      const text = node ? node.textContent.trim() : '';
      details = text ? JSON.parse(text) : [];
      if (node) node.textContent = '';  // the parsed copy is enough; free the text
    }
    return details;
  }

  async function loadDetail(i) {
    if (meta.mode === 'serve') {
      if (!fetched.has(i)) {
        const reply = await fetch('example/' + i + '.json');
        if (!reply.ok) throw new Error('server answered ' + reply.status + ' for example ' + rows.id[i]);
        fetched.set(i, await reply.json());
      }
      return fetched.get(i);
    }
    return embeddedDetails()[i] || null;
  }

  /* A dataset field is either its text or ["@", node path index, message index, offset,
     length]: where that text sits in a prompt of the same example (stored once). */
  function inputText(d, value) {
    if (!Array.isArray(value)) return String(value);
    const [, p, m, offset, length] = value;
    const msg = d.path[p] && d.path[p].rec && d.path[p].rec[K.messages] && d.path[p].rec[K.messages][m];
    return msg ? msg[2].substr(offset, length) : '';
  }

  /* -- examples table ---------------------------------------------------------------- */

  const scoreCol = meta.score;
  const numCols = meta.numeric || [];
  const txtCols = meta.text || [];
  const state = { q: '', status: 'all', min: null, max: null, sort: null, dir: 1, page: 0, deep: false };
  let view = [];
  let searchText = null;
  let deepText = null;

  function rowSearchText(i) {
    if (searchText === null) {
      searchText = new Array(N);
      for (let j = 0; j < N; j++) {
        const parts = [rows.id[j], rows.error[j] || ''];
        for (const c of txtCols) parts.push(rows.txt[c][j] || '');
        searchText[j] = parts.join('\n').toLowerCase();
      }
    }
    return searchText[i];
  }

  function rowDeepText(i) {
    if (deepText === null) {
      const all = embeddedDetails();
      deepText = new Array(N);
      for (let j = 0; j < N; j++) {
        const d = all[j];
        deepText[j] = d && d.inputs ? Object.values(d.inputs).map((v) => inputText(d, v)).join('\n').toLowerCase() : '';
      }
    }
    return deepText[i];
  }

  function compute() {
    const q = state.q.trim().toLowerCase();
    const score = scoreCol ? rows.num[scoreCol] : null;
    const out = [];
    for (let i = 0; i < N; i++) {
      if (state.status !== 'all' && rows.status[i] !== state.status) continue;
      if (score && (state.min !== null || state.max !== null)) {
        const v = score[i];
        if (v === null) continue;
        if (state.min !== null && v < state.min) continue;
        if (state.max !== null && v > state.max) continue;
      }
      if (q && !rowSearchText(i).includes(q) && !(state.deep && rowDeepText(i).includes(q))) continue;
      out.push(i);
    }
    if (state.sort) {
      const key = state.sort;
      const get = key === 'id' ? (i) => rows.id[i]
        : key === 'status' ? (i) => rows.status[i]
        : key === 'row' ? (i) => rows.row[i]
        : (i) => rows.num[key][i];
      out.sort((a, b) => {
        const x = get(a); const y = get(b);
        if (x === y) return a - b;
        if (x === null || x === undefined) return 1;  // blanks last either way
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * state.dir;
      });
    }
    view = out;
  }

  function header() {
    const cols = [['row', '#'], ['id', 'id'], ['status', 'status']];
    for (const c of numCols) cols.push([c, c]);
    const tr = h('tr');
    for (const [key, label] of cols) {
      const cls = state.sort === key ? (state.dir > 0 ? 'sorted-asc' : 'sorted-desc') : null;
      tr.append(h('th', { class: cls, 'data-sort': key, title: 'sort by ' + label, text: label }));
    }
    tr.append(h('th', { text: txtCols.length ? 'error / ' + txtCols[0] : 'error' }));
    const thead = $('#examples-table thead');
    thead.replaceChildren(tr);
  }

  function renderTable() {
    compute();
    // The search the rows on show answer (typing waits 120 ms before filtering): a reader of
    // the page (a test) can tell the table has caught up before it clicks a row.
    $('#examples-table').dataset.query = state.q;
    const pages = Math.max(1, Math.ceil(view.length / PAGE));
    state.page = Math.min(state.page, pages - 1);
    const start = state.page * PAGE;
    const body = [];
    for (const i of view.slice(start, start + PAGE)) {
      const tr = h('tr', { 'data-index': i, 'data-id': rows.id[i] });
      tr.append(h('td', { class: 'num muted', text: rows.row[i] === null ? '' : rows.row[i] }));
      tr.append(h('td', { class: 'mono', text: rows.id[i] }));
      tr.append(h('td', null, badge(rows.status[i])));
      for (const c of numCols) tr.append(h('td', { class: 'num', text: num(rows.num[c][i]) }));
      const err = rows.error[i];
      const snippet = err || (txtCols.length ? rows.txt[txtCols[0]][i] : '') || '';
      tr.append(h('td', { class: 'snippet' + (err ? ' err' : ''), title: snippet, text: snippet }));
      body.push(tr);
    }
    $('#examples-table tbody').replaceChildren(...body);
    header();
    const filtered = view.length === N ? '' : ' (filtered from ' + N + ')';
    $('#count').textContent = view.length + ' examples' + filtered;
    $('#page-info').textContent = view.length
      ? 'rows ' + (start + 1) + '–' + Math.min(start + PAGE, view.length) + ' of ' + view.length
      : 'no example matches';
    $('#prev-page').disabled = state.page === 0;
    $('#next-page').disabled = state.page >= pages - 1;
  }

  function readNumber(input) {
    const v = input.value.trim();
    return v === '' || Number.isNaN(Number(v)) ? null : Number(v);
  }

  function wireTable() {
    document.querySelectorAll('.score-name').forEach((el) => { el.textContent = scoreCol || 'score'; });
    if (!scoreCol) { $('#min').disabled = true; $('#max').disabled = true; }
    if (meta.mode === 'serve') {
      $('#deep').disabled = true;
      $('#deep').parentElement.title = 'Not available when served: traces load one example at a time';
    }
    let timer = null;
    $('#q').addEventListener('input', () => {
      clearTimeout(timer);
      timer = setTimeout(() => { state.q = $('#q').value; state.page = 0; renderTable(); }, 120);
    });
    $('#status-filter').addEventListener('change', (e) => { state.status = e.target.value; state.page = 0; renderTable(); });
    $('#min').addEventListener('input', () => { state.min = readNumber($('#min')); state.page = 0; renderTable(); });
    $('#max').addEventListener('input', () => { state.max = readNumber($('#max')); state.page = 0; renderTable(); });
    $('#deep').addEventListener('change', (e) => { state.deep = e.target.checked; state.page = 0; renderTable(); });
    $('#reset').addEventListener('click', () => {
      Object.assign(state, { q: '', status: 'all', min: null, max: null, sort: null, dir: 1, page: 0, deep: false });
      $('#q').value = ''; $('#status-filter').value = 'all'; $('#min').value = ''; $('#max').value = '';
      $('#deep').checked = false;
      renderTable();
    });
    $('#prev-page').addEventListener('click', () => { state.page--; renderTable(); });
    $('#next-page').addEventListener('click', () => { state.page++; renderTable(); });
    $('#examples-table thead').addEventListener('click', (e) => {
      const th = e.target.closest('th[data-sort]');
      if (!th) return;
      const key = th.getAttribute('data-sort');
      if (state.sort === key) state.dir = -state.dir; else { state.sort = key; state.dir = 1; }
      renderTable();
    });
    $('#examples-table tbody').addEventListener('click', (e) => {
      const tr = e.target.closest('tr[data-index]');
      if (tr) location.hash = 'example=' + encodeURIComponent(rows.id[Number(tr.getAttribute('data-index'))]);
    });
    document.querySelectorAll('.hist-box svg.hist .col').forEach((bar) => {
      bar.addEventListener('click', () => {
        const lo = Number(bar.getAttribute('data-lo'));
        const hi = Number(bar.getAttribute('data-hi'));
        $('#min').value = String(Number(lo.toPrecision(6)));
        $('#max').value = String(Number(hi.toPrecision(6)));
        state.min = lo; state.max = hi; state.status = 'ok'; $('#status-filter').value = 'ok';
        state.page = 0;
        renderTable();
        $('#examples').scrollIntoView();
      });
    });
  }

  /* -- one example -------------------------------------------------------------------- */

  function isReason(key) { return /(^|_)reason$|^why$|^explanation$/.test(key); }

  function isScalar(v) { return v === null || typeof v !== 'object'; }

  function renderValue(value, depth) {
    depth = depth || 0;
    if (value === null || value === undefined) return h('span', { class: 'muted', text: 'null' });
    if (isScalar(value)) return h('span', { class: 'mono', text: num(value) });
    if (Array.isArray(value)) {
      if (value.length <= 20 && value.every(isScalar)) return h('span', { class: 'mono', text: value.map(num).join(', ') || '[]' });
      return h('pre', { text: json(value) });
    }
    return valueTable(value, depth);
  }

  function valueTable(obj, depth) {
    depth = depth || 0;
    const t = h('table', { class: 'value' });
    for (const [k, v] of Object.entries(obj)) {
      let cell;
      if (isScalar(v)) {
        cell = h('td', { class: 'v ' + (isReason(k) ? 'reason' : 'verdict'), text: v === null ? 'null' : num(v) });
      } else if (depth < 2 && !Array.isArray(v) && Object.keys(v).length <= 40 && Object.values(v).every(isScalar)) {
        cell = h('td', { class: 'v' }, kvGrid(v));
      } else if (depth < 1 && !Array.isArray(v) && Object.values(v).every((x) => isScalar(x) || (!Array.isArray(x) && Object.values(x).every(isScalar)))) {
        cell = h('td', { class: 'v' }, valueTable(v, depth + 1));
      } else {
        cell = h('td', { class: 'v' }, renderValue(v, depth + 1));
      }
      t.append(h('tr', null, h('td', { class: 'k', text: k }), cell));
    }
    return t;
  }

  /* A flat dict of scalars (e.g. a result's 15 scores) as a compact grid of key/value pairs. */
  function kvGrid(obj) {
    const grid = h('div', { class: 'kvgrid' });
    for (const [k, v] of Object.entries(obj)) {
      grid.append(h('div', { class: 'kvcell' }, h('span', { class: 'k', text: k }), h('span', { class: 'v', text: v === null ? 'null' : num(v) })));
    }
    return grid;
  }

  function renderPrompt(messages) {
    let chars = 0;
    const parts = [];
    for (const [role, shared, text] of messages) {
      const pre = h('pre');
      if (shared >= 0 && meta.shared && meta.shared[shared] !== undefined) {
        const head = meta.shared[shared];
        chars += head.length;
        pre.append(h('span', { class: 'shared-mark', text: 'shared by every example of this node:' }));
        pre.append(h('span', { class: 'shared', text: head }));
      }
      chars += text.length;
      pre.append(document.createTextNode(text));
      parts.push(h('div', { class: 'msg-role', text: role }), pre);
    }
    return h('details', { class: 'prompt' },
      h('summary', { text: 'rendered prompt (' + messages.length + ' message' + (messages.length === 1 ? '' : 's') + ', ' + chars + ' characters)' }),
      parts);
  }

  function renderAttempts(attempts) {
    const t = h('table', { class: 'data attempts' });
    /* Numbers are right-aligned, so digits line up down a column. */
    const numeric = new Set(['#', 'sample', 'latency', 'tokens']);
    t.append(h('thead', null, h('tr', null, ['#', 'kind', 'sample', 'error', 'finish', 'latency', 'tokens', 'cache'].map((c) => h('th', { text: c, class: numeric.has(c) ? 'num' : null })))));
    const body = h('tbody');
    for (const a of attempts) {
      const err = h('td');
      if (a[KA.error]) err.append(h('div', { class: 'error-box', text: a[KA.error] }));
      if (a[KA.raw]) err.append(h('details', { class: 'raw' }, h('summary', { text: 'rejected reply' }), h('pre', { text: a[KA.raw] })));
      const other = otherFields(a, KA, SHOWN_ATTEMPT);
      if (Object.keys(other).length) err.append(kvGrid(other));
      body.append(h('tr', null,
        h('td', { class: 'num', text: a[KA.number] }),
        h('td', null, badge(a[KA.kind] === 'ok' || a[KA.kind] === 'cache' ? 'ok' : 'failed'), ' ', a[KA.kind]),
        h('td', { class: 'num', text: a[KA.sample] === undefined ? '' : a[KA.sample] }),
        err,
        h('td', { text: a[KA.finish_reason] || '' }),
        h('td', { class: 'num', text: seconds(a[KA.latency]) || '' }),
        h('td', { class: 'num', text: a[KA.prompt_tokens] || a[KA.completion_tokens] ? a[KA.prompt_tokens] + ' + ' + a[KA.completion_tokens] : '' }),
        h('td', { text: a[KA.cached] ? 'hit' : '' })));
    }
    t.append(body);
    return t;
  }

  function chips(rec) {
    const out = [];
    if (rec[K.cached]) out.push(h('span', { class: 'chip', text: 'cache hit' }));
    const l = seconds(rec[K.latency]);
    if (l) out.push(h('span', { class: 'chip', text: l }));
    if (rec[K.prompt_tokens] || rec[K.completion_tokens]) out.push(h('span', { class: 'chip', text: (rec[K.prompt_tokens] || 0) + ' + ' + (rec[K.completion_tokens] || 0) + ' tokens' }));
    /* Samples and requests as Python tallied them (report/payload.py). */
    if (rec[K.tally]) out.push(h('span', { class: 'chip tally', text: rec[K.tally] }));
    if (rec[K.model]) out.push(h('span', { class: 'chip', text: rec[K.model] }));
    return out;
  }

  function renderRecord(rec, info) {
    const box = h('div', { class: 'record' });
    if (rec[K.status] === 'skipped') {
      box.append(h('p', { class: 'muted', text: 'skipped: `when` was false' + (info && info.when ? ' (' + info.when + ')' : '') }));
      return box;
    }
    if (rec[K.error]) box.append(h('div', { class: 'error-box', text: rec[K.error] }));
    if (rec[K.messages]) box.append(renderPrompt(rec[K.messages]));
    if (rec[K.value] !== undefined) {
      const label = info && info.kind === 'llm' ? 'parsed output' : 'value';
      box.append(h('div', { class: 'parsed' }, h('h4', { text: label }), renderValue(rec[K.value])));
    }
    if (rec[K.raw]) box.append(h('details', { class: 'raw' }, h('summary', { text: 'raw reply' }), h('pre', { text: Array.isArray(rec[K.raw]) ? rec[K.raw].join('\n---\n') : json(rec[K.raw]) })));
    if (rec[K.attempts] && rec[K.attempts].length) box.append(h('h4', { text: 'attempts' }), renderAttempts(rec[K.attempts]));
    const other = otherFields(rec, K, SHOWN);
    if (Object.keys(other).length) box.append(h('div', { class: 'other-fields' }, h('h4', { text: 'other fields' }), kvGrid(other)));
    return box;
  }

  function preview(rec) {
    if (rec[K.status] === 'skipped') return 'skipped';
    if (rec[K.error]) return rec[K.error];
    const text = json(rec[K.value], 0);
    return text && text.length > 140 ? text.slice(0, 140) + '…' : text;
  }

  function nodeCard(entry) {
    const info = nodeInfo[entry.node] || { kind: '?' };
    const st = entry.status.replace(/\s+/g, '-');
    const card = h('section', { class: 'node-card st-' + st, id: 'node-' + entry.node, 'data-node': entry.node, 'data-status': entry.status });
    const title = h('h3', null, h('span', { class: 'name', text: entry.node }),
      h('span', { class: 'badge kind-' + info.kind, text: info.kind === 'compute' && info.function ? 'compute ' + info.function : info.kind }),
      badge(entry.status), entry.rec ? chips(entry.rec) : null);
    card.append(title);
    if (info.foreach) card.append(h('div', { class: 'clause', text: 'foreach ' + info.foreach + (entry.items ? ' → ' + entry.items.length + ' item' + (entry.items.length === 1 ? '' : 's') : '') }));
    if (info.when) card.append(h('div', { class: 'clause', text: 'when ' + info.when }));
    if (entry.status === 'not run') {
      card.append(h('p', { class: 'muted', text: 'not run for this example: a node it depends on failed, or the example stopped before it.' }));
    }
    if (entry.rec && !(info.foreach && entry.items)) card.append(renderRecord(entry.rec, info));
    if (entry.items) {
      const wrap = h('div', { class: 'items' });
      const many = entry.items.length > 4;
      for (const item of entry.items) {
        const open = item[K.status] === 'failed' || !many;
        const d = h('details', { class: 'item', 'data-item': item[K.item], open: open },
          h('summary', null, h('b', { text: 'item ' + item[K.item] }), ' ', badge(item[K.status]), chips(item),
            h('span', { class: 'preview', text: preview(item) })),
          renderRecord(item, info));
        wrap.append(d);
      }
      card.append(wrap);
      if (entry.rec && entry.rec[K.value] !== undefined) {
        card.append(h('details', { class: 'raw' }, h('summary', { text: 'the node\'s value (list of item values)' }), h('pre', { text: json(entry.rec[K.value]) })));
      }
    }
    if (entry.earlier && entry.earlier.length) {
      const list = h('ul');
      for (const e of entry.earlier) {
        list.append(h('li', null, (e[K.item] >= 0 ? 'item ' + e[K.item] + ': ' : ''), badge(e[K.status]), e[KRUN] ? ' run ' + e[KRUN] + ' ' : ' ', e[K.error] ? h('span', { class: 'mono', text: e[K.error] }) : null));
      }
      card.append(h('details', { class: 'raw' }, h('summary', { text: entry.earlier.length + ' earlier execution(s), replaced by the one above' }), list));
    }
    return card;
  }

  function statusDag(path) {
    const src = $('#dag-box svg.dag');
    if (!src) return null;
    const svg = src.cloneNode(true);
    svg.classList.add('by-status');
    const status = {};
    for (const e of path) status[e.node] = e.status;
    svg.querySelectorAll('.dag-node').forEach((g) => {
      const name = g.getAttribute('data-node');
      const s = (status[name] || 'not run').replace(/\s+/g, '-');
      g.classList.add('st-' + s);
      g.addEventListener('click', () => {
        const card = document.getElementById('node-' + name);
        if (card) card.scrollIntoView({ behavior: 'smooth', block: 'start' });
      });
    });
    // The marker id must stay unique in the document.
    const marker = svg.querySelector('marker');
    if (marker) {
      marker.id = 'arrow-example';
      svg.querySelectorAll('path.dag-edge').forEach((p) => p.setAttribute('marker-end', 'url(#arrow-example)'));
    }
    return h('div', { class: 'dag-box' }, svg);
  }

  /* ExPerT: reference aspects (recall side) and output aspects (precision side) with the
     match each one's call chose, drawn as lines, then the P/R/F arithmetic. */
  function aspectCard(entry, index, side) {
    const matched = entry._matched;  // decided by compute/expert.py, as the scores are
    const cls = 'aspect' + (matched ? '' : ' unmatched') + (entry.failed ? ' failed' : '');
    const card = h('div', { class: cls, 'data-side': side, 'data-index': index });
    const label = entry.id !== undefined ? String(entry.id) : (side === 'recall' ? 'R' : 'O') + (index + 1);
    card.append(h('div', null, h('span', { class: 'aid', text: label }), h('span', { class: 'title', text: entry.aspect || entry.title || '(untitled aspect)' })));
    if (entry.description) card.append(h('div', { class: 'desc', text: entry.description }));
    if (Array.isArray(entry.evidence) && entry.evidence.length) {
      card.append(h('details', null, h('summary', { class: 'small', text: entry.evidence.length + ' evidence sentence(s)' }),
        h('ul', null, entry.evidence.map((e) => h('li', { text: typeof e === 'string' ? e : json(e, 0) })))));
    }
    const verdict = h('div', { class: 'verdict' });
    // Older runs name no failed calls: their only failure mark was the matching call's.
    const calls = Array.isArray(entry.failed_calls) ? entry.failed_calls : null;
    if (entry.failed && (!calls || calls.includes('match'))) verdict.append(h('span', { class: 'no', text: 'matching call failed — counted unmatched' }));
    else if (!matched) verdict.append(h('span', { class: 'no', text: 'no match' }));
    else {
      const target = [entry.matched_id, entry.matched_aspect].filter((x) => x !== null && x !== undefined && x !== '');
      verdict.append('matches ', h('b', { text: target.join(' · ') || '?' }), ' · content ',
        h('span', { class: entry.content === true ? 'yes' : 'no', text: entry.content === true ? '✓' : '✗' }), ' · style ',
        h('span', { class: entry.style === true ? 'yes' : 'no', text: entry.style === true ? '✓' : '✗' }));
      if (entry.failed && calls) verdict.append(h('span', { class: 'no', text: ' · failed: ' + calls.join(', ') + ' judgment' }));
    }
    if (entry.judged_on && entry.judged_on !== side) verdict.append(h('span', { class: 'muted', text: ' (pair judged on the ' + entry.judged_on + ' side)' }));
    card.append(verdict);
    if (entry.error) card.append(h('div', { class: 'error-box', text: entry.error }));
    for (const [key, label2] of [['match_reason', 'match'], ['content_reason', 'content'], ['style_reason', 'style']]) {
      if (entry[key]) card.append(h('div', { class: 'why' }, h('b', { text: label2 + ': ' }), entry[key]));
    }
    card.addEventListener('mouseenter', () => card.classList.add('hl'));
    card.addEventListener('mouseleave', () => card.classList.remove('hl'));
    return card;
  }

  const VIEW_RENDERERS = { expert: (ex) => expertSection(ex) };

  function expertSection(ex) {
    const left = h('div', { class: 'side' }, h('h4', { text: 'reference aspects (' + ex.recall.length + ') — recall side' }),
      ex.recall.map((e, i) => aspectCard(e, i, 'recall')));
    const right = h('div', { class: 'side' }, h('h4', { text: 'output aspects (' + ex.precision.length + ') — precision side' }),
      ex.precision.map((e, i) => aspectCard(e, i, 'precision')));
    const svgNS = 'http://www.w3.org/2000/svg';
    const svg = document.createElementNS(svgNS, 'svg');
    svg.setAttribute('class', 'links');
    const mid = h('div', { class: 'mid' }, svg);
    const grid = h('div', { class: 'aspects' }, left, mid, right);

    function draw() {
      const box = mid.getBoundingClientRect();
      if (!box.height) return;
      svg.setAttribute('viewBox', '0 0 ' + box.width + ' ' + box.height);
      svg.replaceChildren();
      const y = (el) => { const r = el.getBoundingClientRect(); return r.top - box.top + Math.min(r.height / 2, 14); };
      const line = (cls, a, b, title) => {
        const ln = document.createElementNS(svgNS, 'line');
        ln.setAttribute('class', cls);
        ln.setAttribute('x1', '0'); ln.setAttribute('y1', a);
        ln.setAttribute('x2', String(box.width)); ln.setAttribute('y2', b);
        const t = document.createElementNS(svgNS, 'title'); t.textContent = title; ln.append(t);
        svg.append(ln);
      };
      const lc = left.querySelectorAll('.aspect'); const rc = right.querySelectorAll('.aspect');
      ex.recall.forEach((e, i) => { if (e._to !== null && e._to !== undefined && rc[e._to]) line('recall', y(lc[i]), y(rc[e._to]) - 4, 'reference aspect ' + (i + 1) + ' → output aspect ' + (e._to + 1)); });
      ex.precision.forEach((e, i) => { if (e._to !== null && e._to !== undefined && lc[e._to]) line('precision', y(lc[e._to]) + 4, y(rc[i]), 'output aspect ' + (i + 1) + ' → reference aspect ' + (e._to + 1)); });
    }
    grid.addEventListener('toggle', () => requestAnimationFrame(draw), true);
    window.addEventListener('resize', () => requestAnimationFrame(draw));
    requestAnimationFrame(draw);

    const t = h('table', { class: 'data prf' });
    t.append(h('thead', null, h('tr', null, ['ε aggregation', 'R = Σε / |reference aspects|', 'P = Σε / |output aspects|', 'F = 2PR / (P + R)', 'in result'].map((c) => h('th', { text: c })))));
    const tb = h('tbody');
    for (const a of ex.aggregations) {
      const sum = (terms) => (terms.length ? terms.map(num).join(' + ') : '0');
      const rep = a.reported;
      const repCell = h('td');
      let any = false;
      for (const [part, value] of [['precision', a.precision], ['recall', a.recall], ['f1', a.f1]]) {
        if (rep[part] === null || rep[part] === undefined) continue;
        any = true;
        const bad = Math.abs(rep[part] - value) > 1e-6;
        repCell.append(h('span', { class: bad ? 'mismatch' : '', title: bad ? 'differs from the value computed from the aspects' : 'agrees',
          text: part[0].toUpperCase() + ' ' + num(rep[part]) + (bad ? ' ≠ ' : ' ✓') + '  ' }));
      }
      if (!any) repCell.append(h('span', { class: 'muted', text: '—' }));
      tb.append(h('tr', { class: a.aggregation === 'content_style_average' ? 'headline' : null },
        h('td', { text: a.aggregation }),
        h('td', { text: '(' + sum(a.recall_terms) + ') / ' + a.recall_terms.length + ' = ' + num(a.recall) }),
        h('td', { text: '(' + sum(a.precision_terms) + ') / ' + a.precision_terms.length + ' = ' + num(a.precision) }),
        h('td', { text: num(a.f1) }),
        repCell));
    }
    t.append(tb);
    return h('section', { class: 'panel expert' },
      h('h3', { text: 'ExPerT aspects' }),
      h('div', { class: 'legend' }, 'Each aspect names its match on the other side: ',
        h('span', { class: 'recall', text: '—— reference → output (recall)' }), ' and ',
        h('span', { class: 'precision', text: '- - output → reference (precision)' }),
        '. ε of an aspect is 0 when unmatched; otherwise it follows from its content and style verdicts.'),
      grid, h('h4', { text: 'How P, R and F follow' }), t);
  }

  async function showExample(id) {
    const i = indexById.get(id);
    const box = $('#example-view');
    $('#list-view').hidden = true;
    box.hidden = false;
    window.scrollTo(0, 0);
    if (i === undefined) {
      box.replaceChildren(h('div', { class: 'panel' }, h('p', { text: 'No example with id ' + id + ' in this run.' }), h('a', { href: '#', text: '← back to the examples' })));
      return;
    }
    $('#nav-example').textContent = '› ' + id;
    const pos = view.indexOf(i);
    const prev = pos > 0 ? view[pos - 1] : null;
    const next = pos >= 0 && pos < view.length - 1 ? view[pos + 1] : null;
    const go = (j) => () => { location.hash = 'example=' + encodeURIComponent(rows.id[j]); };
    const head = h('div', { class: 'ex-head' },
      h('a', { href: '#', text: '← examples' }),
      h('h2', { text: id }), badge(rows.status[i]),
      rows.row[i] !== null ? h('span', { class: 'muted', text: 'dataset row ' + rows.row[i] }) : null,
      h('span', { class: 'spacer' }),
      h('button', { type: 'button', disabled: prev === null, onclick: prev === null ? null : go(prev), text: '‹ previous' }),
      h('button', { type: 'button', disabled: next === null, onclick: next === null ? null : go(next), text: 'next ›' }));
    const top = h('div', { class: 'panel' }, head);
    if (rows.error[i]) top.append(h('h4', { text: 'error' }), h('div', { class: 'error-box example-error', text: rows.error[i] }));
    box.replaceChildren(top, h('div', { class: 'panel muted', text: 'loading trace…' }));
    let d;
    try {
      d = await loadDetail(i);
    } catch (err) {
      box.replaceChildren(top, h('div', { class: 'panel error-box', text: String(err) }));
      return;
    }
    if (!d) {
      box.replaceChildren(top, h('div', { class: 'panel note', text: 'This example\'s trace is not embedded: the run is too large for one file. ' +
        'Open it with `orchestrator report ' + (meta.run_dir || 'RUN_DIR') + ' --serve` to see every trace.' }));
      return;
    }
    const outputs = h('div', null, h('h4', { text: 'outputs' }), Object.keys(d.outputs).length ? valueTable(d.outputs) : h('p', { class: 'muted', text: 'none (the example failed)' }));
    top.append(outputs);
    if (d.inputs) {
      const inputs = h('details', { class: 'inputs' }, h('summary', { text: 'dataset fields (' + Object.keys(d.inputs).join(', ') + ')' }));
      for (const [k, v] of Object.entries(d.inputs)) inputs.append(h('div', { class: 'msg-role', text: k }), h('pre', { text: inputText(d, v) }));
      top.append(inputs);
    }
    const parts = [top];
    // Per-protocol panels, as registered in report/views.py; one renderer per view name.
    for (const [name, data] of Object.entries(d.views || {})) {
      const render = VIEW_RENDERERS[name];
      parts.push(render ? render(data) : h('section', { class: 'panel' }, h('h3', { text: name }), valueTable(data)));
    }
    const path = h('div', { class: 'panel path' }, h('h3', { text: 'decision path' }));
    const dag = statusDag(d.path);
    if (dag) path.append(dag);
    for (const entry of d.path) path.append(nodeCard(entry));
    if (!d.path.length) path.append(h('p', { class: 'muted', text: 'No node executions are recorded for this example (is traces.sqlite missing?).' }));
    parts.push(path);
    box.replaceChildren(...parts);
  }

  function showList() {
    $('#example-view').hidden = true;
    $('#example-view').replaceChildren();
    $('#list-view').hidden = false;
    $('#nav-example').textContent = '';
  }

  function route() {
    // #example=ID opens an example; &node=NAME (orchestrator diff's links) also brings that
    // node's card into view. The id is quoted, so a '&' in it never reads as the separator.
    const m = /^#example=([^&]*)(?:&node=(.*))?$/.exec(location.hash);
    if (!m) { showList(); return; }
    const node = m[2] === undefined ? null : decodeURIComponent(m[2]);
    showExample(decodeURIComponent(m[1])).then(() => {
      const card = node === null ? null : document.getElementById('node-' + node);
      if (!card) return;
      card.classList.add('target');
      card.scrollIntoView({ block: 'start' });
    });
  }

  wireTable();
  renderTable();
  window.addEventListener('hashchange', route);
  route();
  document.body.setAttribute('data-ready', '1');
  window.__reportReady = true;
})();
