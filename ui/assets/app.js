// Tenure web UI: the lease board, job pages, the anomalies feed and the
// audit page. Plain JavaScript, no framework, no external resource: the
// binary serves this file. Data comes from the JSON API (/api/...) and live
// updates from server-sent events (/api/events).
'use strict';
(() => {
  // ---------- DOM helpers (text always goes through textContent) ----------
  const SVGNS = 'http://www.w3.org/2000/svg';
  function build(ns, tag, attrs, children) {
    const el = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'text') el.textContent = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  const h = (tag, attrs, ...children) => build(null, tag, attrs, children);
  const s = (tag, attrs, ...children) => build(SVGNS, tag, attrs, children);
  const $ = (sel, root) => (root || document).querySelector(sel);

  // ---------- time ----------
  let clockOffset = 0; // server clock minus ours, from the API's "now"
  const now = () => Date.now() + clockOffset;
  const syncClock = (serverNow) => { if (serverNow) clockOffset = serverNow - Date.now(); };
  const pad = (n, w) => String(n).padStart(w || 2, '0');
  function fmtClock(ms, withMs) {
    if (!ms) return '–';
    const d = new Date(ms);
    const t = pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
    return withMs === false ? t : t + '.' + pad(d.getMilliseconds(), 3);
  }
  function fmtDur(ms) {
    const neg = ms < 0;
    let a = Math.abs(ms);
    let out;
    if (a < 10000) out = (a / 1000).toFixed(1) + 's';
    else if (a < 60000) out = Math.floor(a / 1000) + 's';
    else if (a < 3600000) out = Math.floor(a / 60000) + 'm ' + pad(Math.floor(a / 1000) % 60) + 's';
    else if (a < 86400000) out = Math.floor(a / 3600000) + 'h ' + pad(Math.floor(a / 60000) % 60) + 'm';
    else out = Math.floor(a / 86400000) + 'd ' + Math.floor(a / 3600000) % 24 + 'h';
    return neg ? '-' + out : out;
  }
  const fmtAgo = (ms) => (ms ? fmtDur(now() - ms) + ' ago' : '–');
  // RFC 3339 with up to 9 fractional digits -> Unix ms (0 for absent).
  const parseT = (t) => (t ? Date.parse(t.replace(/(\.\d{3})\d+/, '$1')) : 0);

  // ---------- fetch ----------
  async function api(path, opts) {
    const r = await fetch(path, opts);
    if (r.status === 204) return null;
    // The session ended (expired, logged out elsewhere, the server
    // restarted): the page itself now answers the login form.
    if (r.status === 401) { location.reload(); throw new Error('not logged in'); }
    let body;
    try { body = await r.json(); } catch (e) { body = {}; }
    if (!r.ok) {
      const err = new Error(body.error || (r.status + ' ' + r.statusText));
      err.status = r.status;
      err.body = body;
      throw err;
    }
    return body;
  }
  // Every state-changing request carries the session's CSRF token (from
  // /api/config, which no other site can read); the server also checks
  // that it comes from this site (Origin, Sec-Fetch-Site).
  const post = (path, body) => api(path, {
    method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Tenure-CSRF': config.csrf || '' }, body: JSON.stringify(body || {}),
  });

  // ---------- page scope: timers and event sources closed on navigation ----------
  let scope = null;
  function newScope() {
    const sc = { timers: [], sources: [], alive: true };
    sc.every = (ms, fn) => { sc.timers.push(setInterval(fn, ms)); };
    sc.later = (ms, fn) => { const t = setTimeout(fn, ms); sc.timers.push(t); return t; };
    sc.events = (url, handlers) => {
      const es = new EventSource(url);
      sc.sources.push(es);
      for (const [name, fn] of Object.entries(handlers)) {
        es.addEventListener(name, (e) => { if (sc.alive) fn(e.data ? JSON.parse(e.data) : null); });
      }
      es.addEventListener('open', () => setConn(true));
      es.addEventListener('error', () => setConn(false));
      return es;
    };
    sc.close = (es) => { es.close(); sc.sources = sc.sources.filter((x) => x !== es); };
    sc.dispose = () => {
      sc.alive = false;
      sc.timers.forEach((t) => { clearInterval(t); clearTimeout(t); });
      sc.sources.forEach((es) => es.close());
    };
    return sc;
  }
  // setConn shows the state of the page's live updates: true (connected),
  // false (lost, the browser reconnects), null (the page's stream is not
  // open yet). Every page opens one, so that the indicator says something
  // true about the page on screen.
  function setConn(ok) {
    const el = $('#conn');
    el.textContent = ok ? 'live' : ok === null ? 'connecting…' : 'reconnecting…';
    el.className = 'conn' + (ok ? ' ok' : ok === null ? '' : ' bad');
  }

  // ---------- header: health and anomaly badge ----------
  async function pollHealth() {
    const el = $('#health');
    try {
      const r = await fetch('/healthz');
      const hz = await r.json();
      if (hz.ready) {
        el.textContent = 'coordinator ' + hz.coordinator + ': ' + hz.role;
        el.className = 'health ' + hz.role;
      } else {
        el.textContent = 'not ready: ' + (hz.reason || 'unknown');
        el.className = 'health down';
      }
      el.title = JSON.stringify(hz.coordinators || []);
    } catch (e) {
      el.textContent = 'UI unreachable';
      el.className = 'health down';
    }
  }
  function seenFeed() { return Number(localStorage.getItem('tenure.seenFeed') || 0); }
  function setFeedBadge(latest) {
    const b = $('#badge-anomalies');
    const n = Math.max(0, latest - seenFeed());
    b.textContent = n > 999 ? '999+' : String(n);
    b.classList.toggle('hidden', n === 0);
  }

  let config = { role: 'viewer', actions: false, page_size: 50, max_page_size: 500 };
  const operator = () => config.role === 'operator';
  // A lease as the role may see it: a viewer's rows have no lease id.
  const leaseText = (r) => 'g' + r.generation + (r.lease_id ? ' · ' + r.lease_id : '');

  // ---------- shared rendering ----------
  const LIVE = new Set(['OFFERED', 'ACTIVE']);
  const stateBadge = (st) => h('span', { class: 'state st-' + st, text: st });
  // A terminal state already says its result (the fold sets one from the
  // other): the result is shown only where it would add something, so that
  // no label reads "CANCELLED CANCELLED".
  const IMPLIED = { COMPLETED: 'SUCCESS', FAILED: 'FAILED', CANCELLED: 'CANCELLED' };
  // A queue job QUEUED or DEAD keeps the result of its last attempt, which
  // its attempt_reason says: not the job's.
  const extraResult = (st, res) => (res && IMPLIED[st] !== res && st !== 'QUEUED' && st !== 'DEAD' ? res : '');
  const stateText = (st, res) => st + (extraResult(st, res) ? ' ' + res : '');
  const kindBadge = (k) => h('span', { class: 'kind k-' + k, text: k });
  // What a completed decision recorded: "completed/ok" would read as a
  // success whatever the outcome.
  const OUTCOME_LABEL = { SUCCESS: 'succeeded', FAILED: 'failed', CANCELLED: 'cancelled' };
  // A row's last decision: its kind and reason; a completed decision's
  // outcome instead (failed, succeeded, cancelled); "snapshot" for a job
  // the read model restored from the stored snapshot (the decisions before
  // it were archived and removed).
  // The worker's own detail of the job's latest result (why it failed),
  // which the server reads from the result input for an operator's page.
  function resultDetail(r) {
    if (!r.result_detail) return null;
    const t = r.result_detail.length > 80 ? r.result_detail.slice(0, 79) + '…' : r.result_detail;
    return h('div', { class: 'detail result-detail', title: r.result_detail, text: t });
  }
  function lastBadge(r) {
    if (r.restored) {
      return [h('span', { class: 'kind k-snapshot', title: 'no decision read since the stored snapshot: the decisions before it were archived and removed (the archive has them)', text: 'from the snapshot' })];
    }
    if (r.last_kind === 'completed' && OUTCOME_LABEL[r.last_outcome]) {
      const label = OUTCOME_LABEL[r.last_outcome];
      return [h('span', { class: 'kind k-' + label, title: 'completed/' + r.last_reason + ': the result ' + r.last_outcome, text: label })];
    }
    return [kindBadge(r.last_kind), ' ', h('span', { class: 'sub reason', text: r.last_reason })];
  }
  const jobLink = (id) => (id && id !== '_' ? h('a', { href: '/jobs/' + encodeURIComponent(id), class: 'job', text: id }) : h('span', { class: 'muted', text: '(no job)' }));

  // The next deadline of a live lease: [label, time, total ms].
  function deadlineOf(r) {
    if (r.state === 'OFFERED') return ['ack', r.ack_deadline, r.ack_deadline - r.issued_at];
    if (r.state === 'ACTIVE') {
      if (r.cancel_requested && r.cancel_by && r.cancel_by < r.expires_at) return ['cancel by', r.cancel_by, r.cancel_by - r.cancel_at];
      return ['lease', r.expires_at, r.lease_ms];
    }
    return null;
  }
  function leftCell(r) {
    const td = h('td', { class: 'left' });
    updateLeft(td, r);
    return td;
  }
  function updateLeft(td, r) {
    const dl = deadlineOf(r);
    td.replaceChildren();
    if (r.state === 'QUEUED') {
      // A queue job waits for an offer: ready now, or after its backoff.
      const wait = (r.ready_at || 0) - now();
      td.append(h('span', { class: 'dl ready', 'data-ready': r.ready_at || 0, text: wait > 0 ? 'ready in ' + fmtDur(wait) : 'ready' }));
      return;
    }
    if (!dl) {
      td.append(h('span', { class: 'muted', text: r.ended_at ? 'ended ' + fmtAgo(r.ended_at) : '–' }));
      return;
    }
    const left = dl[1] - now();
    const frac = dl[2] > 0 ? Math.max(0, Math.min(1, left / dl[2])) : 0;
    const bar = h('span', { class: 'minibar' + (left < 0 ? ' over' : frac < 0.25 ? ' low' : '') }, h('span', { class: 'fill' }));
    bar.firstChild.style.width = (frac * 100).toFixed(1) + '%';
    td.append(h('span', { class: 'dl', text: dl[0] + ' ' }), h('span', { class: 'secs', 'data-deadline': dl[1], text: left >= 0 ? fmtDur(left) : 'due ' + fmtDur(-left) + ' ago' }), bar);
  }
  function progressCell(r) {
    const td = h('td', { class: 'progress' });
    if (!r.generation) return td;
    const bar = h('span', { class: 'bar' }, h('span', { class: 'fill' }));
    bar.firstChild.style.width = Math.max(0, Math.min(100, r.progress_value)) + '%';
    td.append(bar, h('span', { class: 'pct', text: r.progress_value + '%' + (r.progress_seq ? ' #' + r.progress_seq : '') }));
    return td;
  }
  const num = (n, cls) => h('td', { class: 'num ' + cls + (n > 0 ? ' hot' : ''), text: String(n) });

  // ---------- board ----------
  const STATES = ['LIVE', 'QUEUED', 'OFFERED', 'ACTIVE', 'EXPIRED', 'ACK_MISSED', 'COMPLETED', 'FAILED', 'DEAD', 'CANCELLED', 'RELEASED', 'UNRESOLVED', 'REVOKED'];
  // A queue job's queue and attempts counted of its budget (PROTOCOL.md §22.6).
  const queueInfo = (r) => (r.queue ? h('span', { class: 'sub qinfo', title: 'queue ' + r.queue + ', attempt ' + (r.attempt || 0) + ' of ' + r.max_attempts + (r.attempt_reason ? ', the last ended: ' + r.attempt_reason : ''),
    text: ' ' + r.queue + ' · ' + (r.attempt || 0) + '/' + r.max_attempts }) : null);
  const SORTS = [['id', 'job id'], ['deadline', 'deadline (soonest first)'], ['updated', 'recently updated'], ['holder', 'holder'], ['state', 'state'], ['anomalies', 'most anomalies'], ['-id', 'job id (descending)']];

  // A job that needs an operator: a pending conflict (revoke or affirm),
  // UNRESOLVED (settle), DEAD (retry or discard).
  const needsOperator = (r) => r.conflict || r.state === 'UNRESOLVED' || r.state === 'DEAD';
  // What an operator does about such a job.
  function operatorTask(r) {
    if (r.conflict) return 'ownership conflict: ' + r.conflict_with + ' claims the lease of ' + r.holder + ': revoke or affirm';
    if (r.state === 'UNRESOLVED') return 'cancellation not reconciled: settle it';
    if (r.state === 'DEAD') return 'attempt budget spent (' + (r.attempt || 0) + ' of ' + r.max_attempts + (r.attempt_reason ? ', the last: ' + r.attempt_reason : '') + '): retry or discard it';
    return '';
  }
  function boardRow(r) {
    const tr = h('tr', { 'data-job': r.id, class: needsOperator(r) ? 'blocked' : '' },
      h('td', { class: 'jobcell', title: r.id }, jobLink(r.id)),
      config.partitions ? h('td', { class: 'num part', title: 'partition', text: r.partition || '' }) : null,
      h('td', { class: 'stcell' }, stateBadge(r.state), extraResult(r.state, r.result) ? h('span', { class: 'sub', text: ' ' + r.result }) : null,
        // A cancellation matters while the lease is live or unreconciled;
        // after that the state says how it ended.
        r.cancel_requested && (LIVE.has(r.state) || r.state === 'UNRESOLVED') ? h('span', { class: 'flag', text: r.cancel_acked ? 'cancel acked' : 'cancel requested' }) : null,
        r.conflict ? h('span', { class: 'flag bad', title: 'conflict with ' + r.conflict_with, text: 'CONFLICT' }) : null, queueInfo(r)),
      h('td', { class: 'holder' }, r.holder ? h('span', { class: 'clip', title: r.holder, text: r.holder }) : '–'),
      h('td', { class: 'gen' }, r.generation ? h('span', { class: 'clip', title: 'generation ' + r.generation + (r.lease_id ? ', lease ' + r.lease_id : ''), text: leaseText(r) }) : '–'),
      leftCell(r),
      progressCell(r),
      num(r.stale, 'stale'), num(r.late, 'late'), num(r.duplicates, 'dup'), num(r.conflicts, 'conflicts'),
      h('td', { class: 'last' }, lastBadge(r), resultDetail(r), h('div', { class: 'ago', 'data-at': r.last_at, text: fmtAgo(r.last_at) })));
    return tr;
  }

  function boardPage(main, sc) {
    const params = new URLSearchParams(location.search);
    const q = {
      state: params.get('state') || '', holder: params.get('holder') || '', queue: params.get('queue') || '', q: params.get('q') || '',
      blocked: params.get('blocked') === '1', sort: params.get('sort') || 'id',
      size: Number(params.get('size')) || config.page_size, page: Math.max(1, Number(params.get('page')) || 1),
    };
    const rows = new Map(); // id -> row
    let es = null;
    let watched = '';
    let pending = null;
    let lastLoad = 0;

    const stateSel = h('select', { id: 'f-state', onchange: () => { q.state = stateSel.value; q.page = 1; reload(); } },
      h('option', { value: '', text: 'all states' }), STATES.map((st) => h('option', { value: st, text: st === 'LIVE' ? 'live (offered or active)' : st })));
    stateSel.value = q.state;
    const holderIn = h('input', { id: 'f-holder', type: 'search', placeholder: 'holder', value: q.holder, size: 12 });
    const queueIn = h('input', { id: 'f-queue', type: 'search', placeholder: 'queue', value: q.queue, size: 10 });
    const jobIn = h('input', { id: 'f-job', type: 'search', placeholder: 'job id contains…', value: q.q, size: 18 });
    let typing = null;
    const onType = () => { clearTimeout(typing); typing = setTimeout(() => { q.holder = holderIn.value.trim(); q.queue = queueIn.value.trim(); q.q = jobIn.value.trim(); q.page = 1; reload(); }, 300); };
    holderIn.addEventListener('input', onType);
    queueIn.addEventListener('input', onType);
    jobIn.addEventListener('input', onType);
    const blockedIn = h('input', { id: 'f-blocked', type: 'checkbox', checked: q.blocked, onchange: () => { q.blocked = blockedIn.checked; q.page = 1; reload(); } });
    const sortSel = h('select', { id: 'f-sort', onchange: () => { q.sort = sortSel.value; q.page = 1; reload(); } }, SORTS.map(([v, t]) => h('option', { value: v, text: 'sort: ' + t })));
    sortSel.value = q.sort;
    const sizeSel = h('select', { id: 'f-size', onchange: () => { q.size = Number(sizeSel.value); q.page = 1; reload(); } },
      [25, 50, 100, 200, 500].map((n) => h('option', { value: n, text: n + ' per page' })));
    sizeSel.value = String(q.size);

    const summary = h('div', { class: 'summary', id: 'summary' });
    const queuesBox = h('div', { id: 'queues', class: 'queues hidden' });
    const tbody = h('tbody', { id: 'board-rows' });
    const pager = h('div', { class: 'pager', id: 'pager' });
    main.replaceChildren(
      h('h1', {}, 'Lease board'),
      queuesBox,
      h('div', { class: 'filters' }, stateSel, holderIn, queueIn, jobIn, h('label', { class: 'check' }, blockedIn, ' needs an operator'), sortSel, sizeSel),
      summary,
      h('div', { class: 'tablewrap' }, h('table', { class: 'board', id: 'board' },
        h('thead', {}, h('tr', {}, (config.partitions ? ['Job', 'Part', 'State', 'Holder', 'Lease', 'Time left', 'Progress'] : ['Job', 'State', 'Holder', 'Lease', 'Time left', 'Progress']).map((t) => h('th', { text: t })),
          h('th', { class: 'num', title: 'stale-generation messages (current lease)', text: 'Stale' }),
          h('th', { class: 'num', title: 'late messages (current lease)', text: 'Late' }),
          h('th', { class: 'num', title: 'duplicate messages (current lease)', text: 'Dup' }),
          h('th', { class: 'num', title: 'ownership-conflict claims (current lease)', text: 'Conflict' }),
          h('th', { text: 'Last decision' }))),
        tbody)),
      pager);

    function url() {
      const p = new URLSearchParams();
      if (q.state) p.set('state', q.state);
      if (q.holder) p.set('holder', q.holder);
      if (q.queue) p.set('queue', q.queue);
      if (q.q) p.set('q', q.q);
      if (q.blocked) p.set('blocked', '1');
      if (q.sort !== 'id') p.set('sort', q.sort);
      if (q.size !== config.page_size) p.set('size', q.size);
      if (q.page > 1) p.set('page', q.page);
      return p;
    }
    function reload() {
      const p = url();
      history.replaceState(null, '', '/' + (p.toString() ? '?' + p : ''));
      load();
    }
    async function load() {
      lastLoad = Date.now();
      const p = url();
      p.delete('page'); p.delete('size');
      p.set('offset', (q.page - 1) * q.size);
      p.set('limit', q.size);
      let page;
      try {
        page = await api('/api/jobs?' + p);
      } catch (e) {
        summary.replaceChildren(h('span', { class: 'error', text: 'cannot load the board: ' + e.message }));
        return;
      }
      if (!sc.alive) return;
      syncClock(page.now);
      const pages = Math.max(1, Math.ceil(page.total / q.size));
      if (q.page > pages && page.total > 0) { q.page = pages; reload(); return; }
      rows.clear();
      tbody.replaceChildren(...page.rows.map((r) => { rows.set(r.id, r); return boardRow(r); }));
      if (page.rows.length === 0) tbody.append(h('tr', {}, h('td', { colspan: config.partitions ? 12 : 11, class: 'muted empty', text: page.jobs === 0 ? 'No job yet: the board fills as decisions are stored.' : 'No job matches.' })));
      const st = page.states;
      summary.replaceChildren(
        h('b', { text: page.jobs.toLocaleString() }), ' jobs · ',
        h('span', { class: 'c-active', text: (st.ACTIVE || 0).toLocaleString() + ' active' }), ' · ',
        h('span', { class: 'c-offered', text: (st.OFFERED || 0).toLocaleString() + ' offered' }), ' · ',
        ...(st.QUEUED || st.DEAD ? [h('span', { class: 'c-queued', text: (st.QUEUED || 0).toLocaleString() + ' queued' }), ' · ',
          h('span', { class: st.DEAD ? 'c-dead' : '', text: (st.DEAD || 0).toLocaleString() + ' dead' }), ' · '] : []),
        h('span', { class: page.blocked ? 'c-blocked' : '', text: page.blocked + ' need an operator' }), ' · ',
        h('span', { class: 'muted', text: (page.seqs ? config.partitions + ' partitions, decisions ' + page.seqs.join(' · ') : 'decision ' + page.seq) + (page.caught_up ? '' : ' (catching up…)') }));
      const from = page.total ? page.offset + 1 : 0;
      const to = page.offset + page.rows.length;
      const go = (n) => () => { q.page = n; reload(); };
      pager.replaceChildren(
        h('button', { id: 'pg-first', disabled: q.page <= 1, onclick: go(1), text: '«' }),
        h('button', { id: 'pg-prev', disabled: q.page <= 1, onclick: go(q.page - 1), text: '‹ prev' }),
        h('span', { class: 'pginfo', id: 'pg-info', text: 'page ' + q.page + ' of ' + pages + ' · rows ' + from + '–' + to + ' of ' + page.total.toLocaleString() }),
        h('button', { id: 'pg-next', disabled: q.page >= pages, onclick: go(q.page + 1), text: 'next ›' }),
        h('button', { id: 'pg-last', disabled: q.page >= pages, onclick: go(pages), text: '»' }));
      setFeedBadge(page.feed);
      watch([...rows.keys()]);
    }
    // Follow the jobs on screen; reopen the stream when the set changes.
    function watch(ids) {
      const key = ids.join(',');
      if (es && key === watched) return;
      if (es) sc.close(es);
      watched = key;
      es = sc.events('/api/events?watch=' + encodeURIComponent(key), {
        board: (ev) => {
          for (const r of ev.rows) {
            const prev = rows.get(r.id);
            if (prev && prev.last_seq >= r.last_seq) continue;
            rows.set(r.id, r);
            const old = tbody.querySelector('tr[data-job="' + CSS.escape(r.id) + '"]');
            if (old) { const tr = boardRow(r); tr.classList.add('flash'); old.replaceWith(tr); }
          }
          setFeedBadge(ev.feed);
          // Other jobs changed or appeared: the page may differ; reload it
          // at most once a second.
          // A job that left the board (retired) takes its row with it.
          for (const id of ev.removed || []) {
            rows.delete(id);
            const old = tbody.querySelector('tr[data-job="' + CSS.escape(id) + '"]');
            if (old) old.remove();
          }
          if ((ev.added > 0 || ev.outside > 0 || (ev.removed || []).length > 0) && !pending) {
            pending = sc.later(Math.max(0, 1000 - (Date.now() - lastLoad)), () => { pending = null; load(); });
          }
          if (ev.changed > 0) loadQueuesSoon();
        },
        reset: () => { sc.close(es); es = null; watched = ''; load(); },
      });
    }
    // The queues view: loaded with the board, again when jobs change (at
    // most once a second) and every 3 s (readiness, announcements and
    // rates move with time alone).
    let queuesPending = null;
    let queuesAt = 0;
    // The queues whose workers are shown (their workers cell toggles them).
    const openQueues = new Set();
    function loadQueuesSoon() {
      if (queuesPending) return;
      queuesPending = sc.later(Math.max(0, 1000 - (Date.now() - queuesAt)), () => { queuesPending = null; loadQueues(); });
    }
    async function loadQueues() {
      queuesAt = Date.now();
      let qp;
      try { qp = await api('/api/queues'); } catch (e) { return; }
      // The workers and the limits of the open queues (a queue gone since
      // has none).
      const detailOf = new Map(await Promise.all([...openQueues].map((name) =>
        api('/api/queues?queue=' + encodeURIComponent(name)).then((p) => [name, p.queues[0] &&
          Object.assign(p.queues[0], { schedule_list: p.schedules || [], schedule_total: p.schedule_total || 0 })], () => [name, null]))));
      if (!sc.alive) return;
      queuesBox.classList.toggle('hidden', qp.queues.length === 0);
      if (qp.queues.length === 0) { queuesBox.replaceChildren(); return; }
      const cell = (n, cls, title) => h('td', { class: 'num ' + (cls || '') + (n > 0 && cls ? ' hot' : ''), title, text: String(n) });
      const rate = (x) => (x > 0 ? x.toFixed(2) : '0');
      queuesBox.replaceChildren(
        h('h2', {}, 'Queues ', h('span', { class: 'muted small', text: qp.total > qp.queues.length ? '(the first ' + qp.queues.length + ' of ' + qp.total + ')' : '' })),
        h('div', { class: 'tablewrap' }, h('table', { class: 'board queues-table', id: 'queues-table' },
          h('thead', {}, h('tr', {},
            h('th', { text: 'Queue' }),
            h('th', { class: 'num', title: 'QUEUED jobs that may be offered now', text: 'Ready' }),
            h('th', { class: 'num', title: 'QUEUED jobs waiting out a backoff', text: 'Waiting' }),
            h('th', { class: 'num', title: 'live leases: offered or active', text: 'In flight' }),
            h('th', { class: 'num', title: 'attempt budget spent: awaiting an operator (retry or discard)', text: 'Dead' }),
            h('th', { class: 'num', text: 'Completed' }),
            h('th', { class: 'num', text: 'Failed' }),
            h('th', { title: 'workers announcing capacity on the queue: their slots, and the slots free', text: 'Workers' }),
            h('th', { class: 'num', title: 'completions per second over the last minute', text: 'Done/s' }))),
          h('tbody', { id: 'queues-rows' }, qp.queues.flatMap((x) => [h('tr', { 'data-queue': x.queue },
            h('td', {}, h('a', { href: '/?queue=' + encodeURIComponent(x.queue), class: 'job', text: x.queue }),
              x.limits ? h('span', { class: 'sub limits-count', title: 'limits in force (tenure limit); click the workers cell for them', text: ' · ' + x.limits + (x.limits === 1 ? ' limit' : ' limits') }) : null),
            cell(x.ready, '', 'ready now'),
            cell(x.waiting, '', 'waiting out a backoff' + (x.blocked ? '; ' + x.blocked + ' more blocked by a conflict' : '')),
            cell(x.in_flight, '', x.offered + ' offered, ' + x.active + ' active'),
            cell(x.dead, 'dead'),
            cell(x.completed),
            cell(x.failed, 'failed'),
            h('td', { class: 'workers', title: x.workers + ' standing announcements; click for the workers' },
              h('button', { class: 'linkish', 'aria-expanded': String(openQueues.has(x.queue)), onclick: () => toggleWorkers(x.queue) },
                String(x.workers) + (x.workers ? ' · ' + x.free_slots + ' of ' + x.slots + ' slots free' : ''))),
            h('td', { class: 'num rate', text: rate(x.rates.completed) })),
          openQueues.has(x.queue) ? h('tr', { class: 'queue-workers', 'data-workers-of': x.queue },
            h('td', { colspan: 9 }, workersTable(detailOf.get(x.queue) && (detailOf.get(x.queue).worker_list || []), qp.now),
              limitsTable(detailOf.get(x.queue)), schedulesTable(detailOf.get(x.queue)), bulkPanel(detailOf.get(x.queue)))) : null])))));
    }
    function toggleWorkers(name) {
      if (!openQueues.delete(name)) openQueues.add(name);
      loadQueues();
    }
    // A queue's workers (the state API's queue.get), the held first, then
    // by strikes and refusals: the worker that refuses what it is offered
    // is on top. now is the server's clock.
    function workersTable(ws, serverNow) {
      if (!ws) return h('span', { class: 'muted', text: 'the workers could not be loaded' });
      if (ws.length === 0) return h('span', { class: 'muted', text: 'no worker known on this queue' });
      const heldUntil = (w) => { const t = parseT(w.standing && w.standing.held_until); return t > serverNow ? t : 0; };
      const strikes = (w) => (w.standing ? w.standing.strikes : 0);
      const refusals = (w) => w.declines + w.releases + w.missed_acks + w.expiries;
      const sorted = ws.slice().sort((a, b) => (heldUntil(b) > 0) - (heldUntil(a) > 0) || strikes(b) - strikes(a) ||
        refusals(b) - refusals(a) || (a.worker < b.worker ? -1 : a.worker > b.worker ? 1 : 0) || (a.partition || '').localeCompare(b.partition || ''));
      const num = (n, bad) => h('td', { class: 'num' + (bad && n > 0 ? ' hot' : ''), text: String(n) });
      const th = (text, title) => h('th', { class: text === 'Worker' || text === 'Announced until' || text === 'Held until' ? '' : 'num', title, text });
      return h('table', { class: 'board workers-table' },
        h('thead', {}, h('tr', {},
          th('Worker'), th('Slots', 'slots announced'), th('Leases', 'the queue\'s live leases it holds'),
          th('Announced until', 'when its announcement lapses'),
          th('Window', 'the most of the queue\'s live leases offered to it at once'),
          th('Strikes', 'episodes of refusals since its last success'), th('Held until', 'no offer of the queue before'),
          th('Offers'), th('Declines', 'offers it released'), th('Releases', 'active leases it released'),
          th('Missed ACKs'), th('Expiries', 'leases it let expire'), th('Completions', 'attempts it ended SUCCESS'),
          th('Failures', 'attempts it ended FAILED'))),
        h('tbody', {}, sorted.map((w) => {
          const held = heldUntil(w);
          return h('tr', { 'data-worker': w.worker, class: held ? 'held' : '' },
            h('td', {}, w.worker, w.partition ? h('span', { class: 'sub', text: ' p' + w.partition }) : null,
              held ? h('span', { class: 'flag bad', title: 'held by its standing: offered nothing before ' + new Date(held).toISOString(), text: 'HELD' }) : null),
            num(w.slots), num(w.held),
            h('td', { title: w.until || '', text: w.until ? fmtClock(parseT(w.until), false) : '–' }),
            h('td', { class: 'num', text: w.standing ? String(w.standing.window) : '–' }),
            num(strikes(w), true),
            h('td', { title: (w.standing && w.standing.held_until) || '', text: held ? fmtClock(held) : '–' }),
            num(w.offers), num(w.declines, true), num(w.releases, true), num(w.missed_acks, true), num(w.expiries, true),
            num(w.completions), num(w.failures, true));
        })));
    }
    // The bulk operations on an open queue's DEAD jobs (an operator's):
    // the first click arms a button with the count of DEAD jobs it acts on,
    // the second sends it with that count, which the server checks against
    // the queue's DEAD jobs then (409: look again). Kept across the panel's
    // reloads.
    const bulkArmed = new Map(); // queue -> { action, count }
    const bulkOut = new Map(); // queue -> { ok, text }: the last outcome
    function bulkPanel(q) {
      if (!q || !operator() || !config.actions) return null;
      const out = bulkOut.get(q.queue);
      const msg = out ? h('span', { class: 'bulk-out ' + (out.ok ? 'ok' : 'error'), text: ' ' + out.text }) : null;
      if (!q.dead) return msg ? h('div', { class: 'bulk' }, msg) : null;
      const armed = bulkArmed.get(q.queue);
      const btn = (action, label) => {
        const on = armed && armed.action === action;
        return h('button', { class: 'action' + (on ? ' armed' : ''), 'data-bulk': action, onclick: () => bulkClick(q, action) },
          on ? 'confirm: ' + label.toLowerCase() + ' (' + armed.count + ')' : label);
      };
      return h('div', { class: 'bulk' },
        h('span', { class: 'muted small', text: q.dead + ' DEAD, each its own decision: ' }),
        btn('retry', 'Retry every DEAD job'), btn('discard', 'Discard every DEAD job'), msg);
    }
    async function bulkClick(q, action) {
      const armed = bulkArmed.get(q.queue);
      if (!armed || armed.action !== action) {
        const a = { action, count: q.dead };
        bulkArmed.set(q.queue, a);
        sc.later(8000, () => { if (bulkArmed.get(q.queue) === a) { bulkArmed.delete(q.queue); loadQueues(); } });
        loadQueues();
        return;
      }
      bulkArmed.delete(q.queue);
      try {
        const res = await post('/api/queues/' + encodeURIComponent(q.queue) + '/dead', { action, expect: armed.count });
        const refused = (res.refused || []).map((f) => f.job + ' ' + (f.kind ? f.kind + '/' + f.reason : f.error)).join(', ');
        bulkOut.set(q.queue, { ok: res.refused_count === 0, text: (action === 'retry' ? 'retried ' : 'discarded ') + res.resolved + ' of ' + res.jobs +
          ' DEAD jobs' + (res.refused_count ? '; not resolved (' + res.refused_count + '): ' + refused : '') + (res.more ? '; more remain: again' : '') });
      } catch (e) {
        bulkOut.set(q.queue, { ok: false, text: e.message });
      }
      loadQueues();
    }
    // A queue's limits in force (rules revision 9, tenure limit): each
    // concurrency key's max active beside its live leases now, and rates.
    function limitsTable(q) {
      if (!q || !q.limit_list || q.limit_list.length === 0) return null;
      const period = (ms) => (ms % 86400000 === 0 ? ms / 86400000 + ' d' : ms % 3600000 === 0 ? ms / 3600000 + ' h' :
        ms % 60000 === 0 ? ms / 60000 + ' min' : ms % 1000 === 0 ? ms / 1000 + ' s' : ms + ' ms');
      return h('div', { class: 'limits' },
        h('h3', { class: 'small', text: 'Limits in force' + (q.limits > q.limit_list.length ? ' (the first ' + q.limit_list.length + ' of ' + q.limits + ')' : '') }),
        h('table', { class: 'board limits-table' },
          h('thead', {}, h('tr', {},
            h('th', { text: 'Concurrency key' }),
            h('th', { class: 'num', title: 'at most this many of the key\'s jobs live (offered or active) at once', text: 'Max active' }),
            h('th', { class: 'num', title: 'the key\'s jobs live now', text: 'Live' }),
            h('th', { title: 'at most this many offers per period (a token bucket)', text: 'Rate' }))),
          h('tbody', {}, q.limit_list.map((l) => {
            const full = l.key !== '' && l.max_active !== undefined && l.live >= l.max_active;
            return h('tr', { 'data-key': l.key, class: full ? 'held' : '' },
              h('td', {}, l.key === '' ? h('span', { class: 'muted', text: '(the queue)' }) : l.key,
                l.partition ? h('span', { class: 'sub', text: ' p' + l.partition }) : null),
              h('td', { class: 'num', text: l.max_active === undefined ? '–' : String(l.max_active) }),
              h('td', { class: 'num' + (full ? ' hot' : ''), text: l.key === '' ? '–' : String(l.live) }),
              h('td', { text: l.rate ? l.rate + ' per ' + period(l.period_ms) : '–' }));
          }))));
    }
    // The cron schedules whose jobs go to a queue (rules revision 10,
    // tenure schedule): when each fires next, in its zone, and what its
    // fires were.
    function schedulesTable(q) {
      if (!q || !q.schedule_list || q.schedule_list.length === 0) return null;
      return h('div', { class: 'schedules' },
        h('h3', { class: 'small', text: 'Schedules' + (q.schedule_total > q.schedule_list.length ? ' (the first ' + q.schedule_list.length + ' of ' + q.schedule_total + ')' : '') }),
        h('table', { class: 'board schedules-table' },
          h('thead', {}, h('tr', {},
            h('th', { text: 'Schedule' }),
            h('th', { text: 'Cron' }),
            h('th', { text: 'Zone' }),
            h('th', { title: 'its next due time (UTC); paused: none until it is resumed', text: 'Next' }),
            h('th', { class: 'num', title: 'fires that submitted a job, in the decisions read', text: 'Fires' }),
            h('th', { class: 'num', title: 'fires refused (a unique key held, a job of that id): recorded, not lost', text: 'Refused' }),
            h('th', { class: 'num', title: 'due times passed unfired (the deployment down, the schedule paused): recorded', text: 'Missed' }),
            h('th', { text: 'Last job' }))),
          h('tbody', {}, q.schedule_list.map((s) => h('tr', { 'data-schedule': s.id, class: s.paused ? 'muted' : '' },
            h('td', {}, s.id, h('span', { class: 'sub', text: ' by ' + s.actor + (s.missed === 'once' ? ' · missed: once' : '') })),
            h('td', { class: 'mono', text: s.cron }),
            h('td', { title: s.tz || 'UTC0', text: s.zone || s.tz || 'UTC' }),
            h('td', { text: s.paused ? 'paused' : (s.next || '–') }),
            h('td', { class: 'num', text: String(s.fires) }),
            h('td', { class: 'num' + (s.refused ? ' hot' : ''), text: String(s.refused) }),
            h('td', { class: 'num' + (s.skipped ? ' hot' : ''), text: String(s.skipped) }),
            h('td', {}, s.last_job ? jobLink(s.last_job) : '–',
              s.last_reason && s.last_reason !== 'ok' ? h('span', { class: 'sub', text: ' ' + s.last_reason }) : null))))));
    }
    loadQueues();
    sc.every(3000, loadQueues);
    // Count down without reloading.
    sc.every(200, () => {
      for (const tr of tbody.rows) {
        const r = rows.get(tr.dataset.job);
        if (!r) continue;
        if (LIVE.has(r.state) || r.state === 'QUEUED') updateLeft(tr.cells[config.partitions ? 5 : 4], r);
        const ago = tr.querySelector('.ago');
        if (ago) ago.textContent = fmtAgo(r.last_at);
      }
    });
    load();
  }

  // ---------- job page ----------
  const MARK_KINDS = {
    offered: 'start', granted: 'start', acked: 'ack', renewed: 'renew', progressed: 'progress',
    cancel_requested: 'cancel', cancel_acked: 'cancel', completed: 'result', released: 'end', resolved: 'resolve',
    expired: 'deadline', ack_missed: 'deadline', unresolved: 'deadline',
  };
  const REJECTED = new Set(['duplicate', 'stale', 'late', 'conflict', 'lost_authority', 'rejected']);

  // Generations of the job: one band each, from offer to end.
  function generations(hist) {
    const gens = new Map();
    for (const d of hist.decisions) {
      const j = d.decision.job;
      if (!j || !j.generation) continue;
      let g = gens.get(j.generation);
      if (!g) {
        g = { gen: j.generation, lease: j.lease_id, holder: j.holder, issued: parseT(j.issued_at) || d.at };
        gens.set(j.generation, g);
      }
      g.state = j.state; g.ack = j.ack_state; g.result = j.result;
      g.acked = parseT(j.acked_at); g.expires = parseT(j.expires_at); g.ackDeadline = parseT(j.ack_deadline);
      g.ended = parseT(j.ended_at); g.cancelBy = parseT(j.cancel_by); g.cancelAt = parseT(j.cancel_at);
      g.last = d.at;
    }
    return [...gens.values()].sort((a, b) => a.gen - b.gen);
  }

  // Where a decision is drawn: its band (generation) and authoritative time.
  function placeOf(d, inputs) {
    const j = d.decision.job || {};
    let gen = d.generation;
    let t = d.at;
    if (d.kind === 'expired') t = parseT(j.expires_at) || t;
    else if (d.kind === 'ack_missed') t = parseT(j.ack_deadline) || t;
    else if (d.kind === 'unresolved') t = (d.reason === 'cancel_timeout' ? parseT(j.cancel_by) : parseT(j.expires_at)) || t;
    if (REJECTED.has(d.kind)) {
      const inp = inputs.get(d.cause);
      if (inp && inp.generation) gen = inp.generation;
    }
    return { gen, t };
  }

  const cut = (str, n) => (str && str.length > n ? str.slice(0, n - 1) + '…' : str || '');

  function niceStep(span, target) {
    const raw = span / target;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (raw <= m * p) return m * p;
    return 10 * p;
  }

  // The zoom control of the timeline: every generation, or one of them.
  function zoomControl(gens, zoom, onZoom) {
    const sel = h('select', { id: 'tl-zoom', title: 'zoom the timeline to one generation (or click its band)' },
      h('option', { value: '0', text: 'zoom: all generations' }),
      gens.map((g) => h('option', { value: g.gen, text: 'zoom: g' + g.gen + ' · ' + g.holder + ' · ' + fmtDur((LIVE.has(g.state) ? now() : (g.ended || g.last)) - g.issued) })));
    sel.value = String(zoom);
    sel.addEventListener('change', () => onZoom(Number(sel.value)));
    return sel;
  }

  // drawTimeline draws the job's generations, one band each, on one time
  // axis; zoom > 0 draws generation zoom alone, its axis spanning its life
  // from offer to end (now while live), so that a short generation is
  // readable next to a long one. Its marks outside that span (a stale
  // message long after its end) are counted, not drawn.
  function drawTimeline(box, hist, inputs, zoom, onZoom) {
    const all = generations(hist);
    const zg = zoom ? all.find((g) => g.gen === zoom) : null;
    const gens = zg ? [zg] : all;
    const width = Math.max(640, box.clientWidth || 960);
    const left = 150, right = 90, top = 30, rowH = 60;
    const height = top + Math.max(1, gens.length) * rowH + 34;
    const svg = s('svg', { id: 'timeline-svg', class: 'timeline', width, height, viewBox: '0 0 ' + width + ' ' + height, role: 'img', 'aria-label': 'timeline of the leases of job ' + hist.row.id,
      'data-zoom': zg ? zg.gen : 'all', 'data-plot-left': left, 'data-plot-right': width - right });
    if (gens.length === 0) {
      svg.append(s('text', { x: 10, y: 30, class: 'muted', text: 'This job never had a lease: nothing to draw.' }));
      box.replaceChildren(svg);
      return;
    }
    const tNow = now();
    const anyLive = gens.some((g) => LIVE.has(g.state));
    let t0 = Infinity, t1 = -Infinity;
    if (zg) {
      t0 = zg.issued;
      t1 = LIVE.has(zg.state) ? tNow : (zg.ended || zg.last);
    } else {
      for (const g of gens) { t0 = Math.min(t0, g.issued); t1 = Math.max(t1, g.ended || g.last); }
      for (const d of hist.decisions) { const p = placeOf(d, inputs); t0 = Math.min(t0, p.t); t1 = Math.max(t1, p.t); }
      if (anyLive) t1 = Math.max(t1, tNow);
    }
    // (times are in milliseconds: a zoomed life of less than one is drawn as one)
    let span = Math.max(t1 - t0, zg ? 1 : 1000);
    const lo = t0, hi = t0 + span; // what the drawing must show
    t0 -= span * 0.02;
    t1 = t0 + span * 1.14;
    span = t1 - t0;
    const x = (t) => left + ((t - t0) / span) * (width - left - right);
    // Bands and marks stay inside the plot (a zoomed band starts or ends
    // outside it); the labels on the left do not.
    const clipId = 'tl-clip';
    svg.append(s('defs', {}, s('clipPath', { id: clipId }, s('rect', { x: left - 8, y: 0, width: width - left + 8, height }))));
    const yOf = new Map(gens.map((g, i) => [g.gen, top + i * rowH]));

    // axis
    const step = Math.max(1, niceStep(span, 7));
    const axisY = top + gens.length * rowH + 6;
    const axis = s('g', { class: 'axis' }, s('line', { x1: left, x2: width - right, y1: axisY, y2: axisY }));
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      axis.append(s('line', { x1: x(t), x2: x(t), y1: top - 6, y2: axisY + 4, class: 'grid' }),
        s('text', { x: x(t), y: axisY + 18, 'text-anchor': 'middle', text: fmtClock(t, step < 1000) }));
    }
    svg.append(axis);

    // bands
    for (const g of gens) {
      const y = yOf.get(g.gen);
      const live = LIVE.has(g.state);
      const end = live ? tNow : (g.ended || g.last);
      const plot = s('g', { 'clip-path': 'url(#' + clipId + ')' });
      const grp = s('g', { class: 'band st-' + g.state + (zg ? '' : ' zoomable'), 'data-gen': g.gen },
        // Three short lines that fit left of the plot (lease ids and
        // holders can be long: cut, the title has them whole).
        s('text', { x: 8, y: y + 27, class: 'bandlabel', text: 'g' + g.gen + ' · ' + cut(g.holder, 12) }, s('title', { text: 'generation ' + g.gen + ', lease ' + g.lease + ', holder ' + g.holder })),
        s('text', { x: 8, y: y + 40, class: 'bandstate', text: stateText(g.state, g.result) }),
        s('text', { x: 8, y: y + 52, class: 'bandlease', text: cut(g.lease, 16) }), plot);
      if (!zg && onZoom) {
        grp.append(s('title', { text: 'click to zoom to generation ' + g.gen }));
        grp.addEventListener('click', () => onZoom(g.gen));
      }
      const activeFrom = g.acked || (g.ack === 'ACQUIRED' ? g.issued : 0);
      if (activeFrom && activeFrom > g.issued) {
        plot.append(s('rect', { x: x(g.issued), y: y + 20, width: Math.max(1, x(activeFrom) - x(g.issued)), height: 14, class: 'offerpart' },
          s('title', { text: 'offered ' + fmtClock(g.issued) + ', ACKed ' + fmtClock(activeFrom) })));
      }
      const from = activeFrom && activeFrom > g.issued ? activeFrom : g.issued;
      plot.append(s('rect', { x: x(from), y: y + 20, width: Math.max(2, x(end) - x(from)), height: 14, class: activeFrom ? 'leasepart' : 'offerpart' },
        s('title', { text: 'g' + g.gen + ' ' + g.lease + ' held by ' + g.holder + ': ' + fmtClock(g.issued) + ' → ' + (live ? 'now' : fmtClock(end)) })));
      if (live) {
        const dl = g.state === 'OFFERED' ? g.ackDeadline : g.expires;
        if (dl) {
          const xe = Math.min(x(dl), width - right + 40);
          plot.append(s('rect', { x: x(tNow), y: y + 20, width: Math.max(0, xe - x(tNow)), height: 14, class: 'future' },
            s('title', { text: (g.state === 'OFFERED' ? 'ACK deadline ' : 'expires ') + fmtClock(dl) })));
          plot.append(s('text', { x: Math.min(xe + 4, width - 4), y: y + 17, class: 'futurelabel', 'text-anchor': xe + 4 > width - right ? 'end' : 'start', text: (g.state === 'OFFERED' ? 'ack in ' : 'expires in ') + fmtDur(dl - tNow) }));
        }
      }
      svg.append(grp);
    }
    // now line
    if (anyLive) {
      svg.append(s('line', { class: 'now', x1: x(tNow), x2: x(tNow), y1: top - 10, y2: axisY }),
        s('text', { class: 'nowlabel', x: x(tNow), y: top - 12, 'text-anchor': 'middle', text: 'now' }));
    }
    // marks: rejected messages in a lane above their band, the others on
    // it; marks that would overlap are stacked (above, or below the band).
    const marks = s('g', { 'clip-path': 'url(#' + clipId + ')' });
    let outside = 0;
    const placed = new Map();
    const level = (key, cx, max) => {
      const xs = placed.get(key) || [];
      placed.set(key, xs);
      for (let l = 0; l < max; l++) {
        if (!xs.some((p) => p.l === l && Math.abs(p.x - cx) < 10)) { xs.push({ x: cx, l }); return l; }
      }
      xs.push({ x: cx, l: max - 1 });
      return max - 1;
    };
    for (const d of hist.decisions) {
      const cls = MARK_KINDS[d.kind];
      const rejected = REJECTED.has(d.kind);
      if (!cls && !rejected) continue;
      const p = placeOf(d, inputs);
      const y0 = yOf.get(p.gen);
      if (y0 === undefined) continue;
      if (zg && (p.t < lo || p.t > hi)) { outside++; continue; }
      const cx = x(p.t);
      const cy = rejected ? y0 + 8 - 9 * level('r' + p.gen, cx, 2) : y0 + 27 + 17 * level('a' + p.gen, cx, 2);
      const g = s('g', { class: 'mark k-' + d.kind + (rejected ? ' rejected' : ''), 'data-kind': d.kind, 'data-reason': d.reason, 'data-cause': d.cause, 'data-gen': p.gen, 'data-seq': d.seq },
        s('title', { text: '#' + d.cause + '.' + d.n + ' ' + d.kind + '/' + d.reason + ' at ' + fmtClock(p.t) + (d.detail ? ' (' + d.detail + ')' : '') + '\n' + d.describe }));
      switch (rejected ? 'rejected' : cls) {
        case 'start': g.append(s('circle', { cx, cy, r: 6 })); break;
        case 'ack': g.append(s('path', { d: `M${cx - 5},${cy} l4,4 l7,-8` })); break;
        case 'renew': g.append(s('path', { d: `M${cx},${cy - 7} l5,8 h-10 z` })); break;
        case 'progress': g.append(s('path', { d: `M${cx},${cy - 5} l5,5 l-5,5 l-5,-5 z` })); break;
        case 'cancel': g.append(s('rect', { x: cx - 4.5, y: cy - 4.5, width: 9, height: 9, rx: 2 })); break;
        case 'result': g.append(s('rect', { x: cx - 6, y: cy - 6, width: 12, height: 12 })); break;
        case 'end': g.append(s('path', { d: `M${cx + 5},${cy - 6} v12 l-9,-6 z` })); break;
        case 'resolve': g.append(s('path', { d: `M${cx},${cy - 7} l2,5 h5 l-4,3 l2,6 l-5,-4 l-5,4 l2,-6 l-4,-3 h5 z` })); break;
        case 'deadline': g.append(s('path', { d: `M${cx - 6},${cy - 6} l12,12 M${cx + 6},${cy - 6} l-12,12` })); break;
        case 'rejected': g.append(s('path', { d: `M${cx - 6},${cy - 7} h12 l-6,10 z` })); break;
      }
      marks.append(g);
    }
    svg.append(marks);
    if (outside) {
      svg.append(s('text', { x: width - 4, y: 12, 'text-anchor': 'end', class: 'outside', id: 'tl-outside',
        text: outside + ' mark' + (outside > 1 ? 's' : '') + ' of g' + zg.gen + ' outside its life, not drawn (zoom: all generations shows ' + (outside > 1 ? 'them' : 'it') + ')' }));
    }
    box.replaceChildren(svg);
  }

  function legend() {
    const item = (cls, kind, label) => {
      const sv = s('svg', { width: 16, height: 16, viewBox: '0 0 16 16', class: 'timeline' });
      const g = s('g', { class: 'mark k-' + kind + (cls === 'rejected' ? ' rejected' : '') });
      const paths = {
        start: s('circle', { cx: 8, cy: 8, r: 5 }), ack: s('path', { d: 'M3,8 l4,4 l7,-8' }), renew: s('path', { d: 'M8,2 l5,9 h-10 z' }),
        progress: s('path', { d: 'M8,3 l5,5 l-5,5 l-5,-5 z' }), cancel: s('rect', { x: 4, y: 4, width: 8, height: 8, rx: 2 }),
        result: s('rect', { x: 3, y: 3, width: 10, height: 10 }), deadline: s('path', { d: 'M3,3 l10,10 M13,3 l-10,10' }),
        rejected: s('path', { d: 'M2,3 h12 l-6,10 z' }), end: s('path', { d: 'M12,2 v12 l-9,-6 z' }),
        resolve: s('path', { d: 'M8,1 l2,5 h5 l-4,3 l2,6 l-5,-4 l-5,4 l2,-6 l-4,-3 h5 z' }),
      };
      g.append(paths[cls]);
      sv.append(g);
      return h('span', { class: 'lg' }, sv, ' ' + label);
    };
    return h('div', { class: 'legend' },
      item('start', 'granted', 'offer / grant'), item('ack', 'acked', 'ACK'), item('renew', 'renewed', 'renewal'),
      item('progress', 'progressed', 'progress'), item('cancel', 'cancel_requested', 'cancel request / ACK'),
      item('result', 'completed', 'result'), item('end', 'released', 'release'), item('resolve', 'resolved', 'operator'),
      item('deadline', 'expired', 'expiry / ACK missed / unresolved'),
      item('rejected', 'stale', 'stale'), item('rejected', 'late', 'late'), item('rejected', 'duplicate', 'duplicate'),
      item('rejected', 'conflict', 'conflict'), item('rejected', 'lost_authority', 'lost authority'), item('rejected', 'rejected', 'rejected'));
  }

  function jobCards(r) {
    const card = (label, value, id) => h('div', { class: 'card' }, h('div', { class: 'label', text: label }), h('div', { class: 'value', id }, value));
    const leftTd = h('span', { id: 'job-left' });
    const dl = deadlineOf(r);
    const bar = h('span', { class: 'bar' }, h('span', { class: 'fill' }));
    bar.firstChild.style.width = Math.max(0, Math.min(100, r.progress_value || 0)) + '%';
    return h('div', { class: 'cards' },
      config.partitions ? card('Partition', r.partition + ' of ' + config.partitions, 'job-partition') : null,
      card('State', [stateBadge(r.state), extraResult(r.state, r.result) ? ' ' + r.result : '', r.conflict ? h('span', { class: 'flag bad', text: ' CONFLICT with ' + r.conflict_with }) : ''], 'job-state'),
      card('Holder', r.holder || '–', 'job-holder'),
      card('Lease', r.generation ? leaseText(r) : '–', 'job-lease'),
      card('ACK', r.ack_state || '–'),
      card(dl ? (dl[0] === 'ack' ? 'ACK deadline in' : dl[0] === 'lease' ? 'Lease expires in' : 'Cancel deadline in') : 'Time left', leftTd, 'job-left-card'),
      card('Progress', [bar, ' ' + (r.progress_value || 0) + '% (#' + (r.progress_seq || 0) + ')']),
      card('Renewals', String(r.renew_seq || 0)),
      card('Cancel', r.cancel_requested ? (r.cancel_acked ? 'requested, ACKed' : 'requested') : 'no'),
      card('Stale / late / dup / conflict', r.stale + ' / ' + r.late + ' / ' + r.duplicates + ' / ' + r.conflicts, 'job-counters'),
      card('Decisions', r.restored ? 'none since the stored snapshot' : String(r.decisions)),
      r.result_input ? card('Latest result (input ' + r.result_input + ')', operator() ? (r.result_detail || '(no detail)') : '(hidden: an operator\'s to see)', 'job-result-detail') : null,
      // A queue job's (PROTOCOL.md §22.6).
      r.queue ? [
        card('Queue', h('a', { href: '/?queue=' + encodeURIComponent(r.queue), text: r.queue }), 'job-queue'),
        card('Attempt', (r.attempt || 0) + ' of ' + r.max_attempts, 'job-attempt'),
        card('Ready at', r.state === 'QUEUED' ? h('span', { id: 'job-ready-at', title: new Date(r.ready_at).toISOString(), text: fmtClock(r.ready_at) }) : '–', 'job-ready'),
        r.scheduled_for ? card('Scheduled for', h('span', { id: 'job-scheduled-for', title: new Date(r.scheduled_for).toISOString(), text: fmtClock(r.scheduled_for) }), 'job-scheduled') : null,
        r.unique_key ? card('Unique key', h('span', { id: 'job-unique-key', text: r.unique_key }), 'job-unique') : null,
        r.concurrency_key ? card('Concurrency key', h('span', { id: 'job-concurrency-key', text: r.concurrency_key }), 'job-concurrency') : null,
        card('Last attempt ended', r.attempt_reason || '–', 'job-attempt-reason'),
        card('Priority · submitter', (r.priority || 0) + ' · ' + r.submitter, 'job-submit')] : null);
  }
  function tickJobLeft(r) {
    const el = $('#job-left');
    if (!el) return;
    const dl = deadlineOf(r);
    if (!dl) { el.textContent = r.ended_at ? 'ended ' + fmtAgo(r.ended_at) : '–'; return; }
    const left = dl[1] - now();
    el.textContent = left >= 0 ? fmtDur(left) : 'due ' + fmtDur(-left) + ' ago';
  }

  // The operator actions that apply to the job now. reason and out are
  // kept by the page across live updates.
  function actionsPanel(r, reload, reason, out) {
    if (!operator()) {
      return h('p', { class: 'muted small', text: 'Read-only: a viewer\'s session (operator actions need an operator token).' });
    }
    if (!config.actions) {
      return h('p', { class: 'muted small', text: 'Read-only: operator actions are off (start the UI with --ui-actions to allow them).' });
    }
    const btn = (label, body, id) => {
      const b = h('button', { class: 'action', id });
      let armed = false;
      b.textContent = label;
      b.addEventListener('click', async () => {
        if (!armed) {
          armed = true; b.textContent = 'confirm: ' + label; b.classList.add('armed');
          setTimeout(() => { if (armed && !b.disabled) { armed = false; b.textContent = label; b.classList.remove('armed'); } }, 8000);
          return;
        }
        b.disabled = true;
        try {
          const res = await post('/api/jobs/' + encodeURIComponent(r.id) + '/action', Object.assign({ reason: reason.value }, body));
          out.replaceChildren(h('span', { class: res.accepted ? 'ok' : 'error', text: (res.accepted ? 'accepted: ' : 'not accepted: ') + res.kind + '/' + res.reason + (res.detail ? ' (' + res.detail + ')' : '') + ' — input ' + res.cause }));
          if (res.accepted && res.reason === 'discarded') {
            // Retired at once: nothing more to load.
            out.append(h('span', { class: 'muted', id: 'action-gone', text: ' The job is removed from the board; its decisions stay in the log.' }));
            return;
          }
          reload();
        } catch (e) {
          out.replaceChildren(h('span', { class: 'error', text: e.message }));
        } finally { b.disabled = false; armed = false; b.textContent = label; b.classList.remove('armed'); }
      });
      return b;
    };
    const btns = [];
    const live = LIVE.has(r.state);
    if (live && !r.cancel_requested) btns.push(btn('Request cancel', { action: 'cancel', lease_id: r.lease_id, generation: r.generation }, 'act-cancel'));
    if (live || r.conflict) btns.push(btn('Revoke lease', { action: 'revoke' }, 'act-revoke'));
    if (r.conflict && live) btns.push(btn('Affirm ' + r.holder, { action: 'affirm', holder: r.holder, lease_id: r.lease_id, generation: r.generation }, 'act-affirm'));
    if (r.state === 'UNRESOLVED') {
      btns.push(btn('Settle FAILED', { action: 'settle', outcome: 'FAILED' }, 'act-settle-failed'));
      btns.push(btn('Settle CANCELLED', { action: 'settle', outcome: 'CANCELLED' }, 'act-settle-cancelled'));
    }
    // A DEAD queue job: its attempt budget is spent (PROTOCOL.md §22.5).
    if (r.state === 'DEAD' && r.queue) {
      btns.push(btn('Retry (queue it again, ' + r.max_attempts + ' fresh attempts)', { action: 'retry' }, 'act-retry'));
      btns.push(btn('Discard (remove the job)', { action: 'discard' }, 'act-discard'));
    }
    if (btns.length === 0) return h('div', {}, h('p', { class: 'muted small', text: 'No operator action applies to this job now.' }), out);
    return h('div', { class: 'actions' }, h('span', { class: 'muted small', text: 'Operator (' + config.actor + '): each action is an input the coordinator judges. ' }), reason, btns, out);
  }

  function matrixTable(columns, rows, id, accepted) {
    return h('div', { class: 'tablewrap' }, h('table', { class: 'matrix', id },
      h('thead', {}, h('tr', {}, columns.map((c) => h('th', { text: c })))),
      h('tbody', {}, rows.map((r, i) => h('tr', { class: accepted && !accepted[i] ? 'notaccepted' : '' }, r.map((c) => h('td', { text: c })))))));
  }

  function interleaved(hist) {
    const byCause = new Map();
    for (const d of hist.decisions) {
      if (!byCause.has(d.cause)) byCause.set(d.cause, []);
      byCause.get(d.cause).push(d);
    }
    const list = h('ol', { class: 'interleaved', id: 'interleaved' });
    for (const inp of hist.inputs) {
      const ds = byCause.get(inp.seq) || [];
      list.append(h('li', { 'data-input': inp.seq },
        h('div', { class: 'input' },
          h('span', { class: 'seq', text: 'input ' + inp.seq }), ' ',
          h('span', { class: 'at', title: inp.at_text, text: fmtClock(inp.at) }), ' ',
          inp.missing ? h('span', { class: 'error', text: 'not found in the input stream' }) : [
            h('span', { class: 'who', text: inp.role + '/' + inp.actor + ' ' + inp.verb }), ' ',
            inp.redacted ? h('span', { class: 'muted small body-hidden', text: '(body hidden from viewers)' }) : h('code', { class: 'body', text: inp.body })]),
        h('ul', { class: 'verdicts' }, ds.map((d) => h('li', { class: d.accepted ? 'acc' : d.derived ? 'der' : 'rej' },
          kindBadge(d.kind), ' ', h('b', { text: d.reason }), d.detail ? h('span', { class: 'detail', text: ' (' + d.detail + ')' }) : null,
          h('div', { class: 'describe', text: d.describe }))))));
    }
    return list;
  }

  function jobPage(main, sc, id) {
    let hist = null;
    let followed = false; // the page has shown the job once (refresh)
    let inputs = new Map();
    let loading = false;
    let again = false;
    const head = h('div', { id: 'job-head' });
    const tlBox = h('div', { class: 'tlbox', id: 'timeline' });
    const matrixBox = h('div', { id: 'matrix-box' });
    const listBox = h('div', { id: 'list-box' });
    const auditBox = h('div', { id: 'job-audit' });
    const auditBtn = h('button', { id: 'job-audit-run', text: 'Audit this job (tenure audit --job ' + id + ')' });
    const reason = h('input', { id: 'action-reason', type: 'text', placeholder: 'reason (recorded with the input)', size: 36, maxlength: 256 });
    const verdict = h('div', { class: 'verdict', id: 'action-verdict' });
    let panel = null;
    let panelKey = '';
    // The generation the timeline is zoomed to (0: all), kept in the URL
    // (?gen=N) so that a zoomed view can be linked.
    let zoom = Math.max(0, Math.floor(Number(new URLSearchParams(location.search).get('gen')) || 0));
    const zoomBox = h('span', { class: 'tlzoom' });
    let zoomKey = '';
    const setZoom = (g) => {
      zoom = g;
      history.replaceState(null, '', '/jobs/' + encodeURIComponent(id) + (g ? '?gen=' + g : ''));
      zoomKey = '';
      if (hist) { renderZoom(); drawTimeline(tlBox, hist, inputs, zoom, setZoom); }
    };
    function renderZoom() {
      const gens = generations(hist);
      if (zoom && !gens.some((g) => g.gen === zoom)) zoom = 0;
      // Rebuilt only when it changes (an open list survives live updates).
      const key = zoom + '|' + gens.map((g) => g.gen + g.state).join(',');
      if (key === zoomKey) return;
      zoomKey = key;
      zoomBox.replaceChildren(gens.length > 1 || zoom ? zoomControl(gens, zoom, setZoom) : '');
    }
    main.replaceChildren(
      h('p', { class: 'crumbs' }, h('a', { href: '/', text: '← board' })),
      h('h1', {}, 'Job ', h('span', { class: 'mono', id: 'job-id', text: id })),
      head,
      h('h2', {}, 'Leases ', zoomBox), legend(), tlBox,
      h('h2', {}, 'Evidence matrix ', h('span', { class: 'muted small', text: '(seed 000 §13: one row per decision about the job, as stored)' })), matrixBox,
      operator() ? h('div', { class: 'auditrow' }, auditBtn, auditBox) : null,
      h('h2', {}, 'Inputs and verdicts'), listBox);

    function renderAll() {
      const r = hist.row;
      // Rebuild the actions only when what applies changes (an armed button
      // and a typed reason survive live updates).
      const key = [r.state, r.generation, r.holder, r.conflict, r.cancel_requested].join('|');
      if (!panel || key !== panelKey) { panel = actionsPanel(r, () => refresh(), reason, verdict); panelKey = key; }
      head.replaceChildren(jobCards(r), panel,
        hist.skipped ? h('p', { class: 'muted small', text: hist.skipped + ' older decisions are not shown (the page keeps the latest).' }) : '');
      tickJobLeft(r);
      renderZoom();
      drawTimeline(tlBox, hist, inputs, zoom, setZoom);
      matrixBox.replaceChildren(matrixTable(hist.columns, hist.decisions.map((d) => d.matrix), 'matrix', hist.decisions.map((d) => d.accepted || d.derived)));
      listBox.replaceChildren(interleaved(hist));
    }
    // The job is not on the board: the verdict of an action stays (a
    // discarded job leaves the board).
    function showGone() {
      head.replaceChildren(h('p', { class: 'muted', id: 'job-none', text: 'No job ' + id + ' on the board: no decision about it yet, or it was retired (a discarded job is). The page updates when one is stored.' }), verdict);
    }
    async function refresh() {
      if (loading) { again = true; return; }
      loading = true;
      try {
        if (!hist) {
          // Once the page has shown the job, a reload (after a reset, or
          // once it came back) asks with after=0: the server then answers
          // a job gone from the board with {"gone":true}, not a 404.
          const got = await api('/api/jobs/' + encodeURIComponent(id) + (followed ? '?after=0' : ''));
          if (got.gone) {
            if (sc.alive) showGone();
            return;
          }
          hist = got;
          followed = true;
          inputs = new Map(hist.inputs.map((i) => [i.seq, i]));
        } else {
          const last = hist.decisions.length ? hist.decisions[hist.decisions.length - 1].seq : 0;
          const more = await api('/api/jobs/' + encodeURIComponent(id) + '?after=' + last);
          if (more.gone) { // it left the board since the page loaded it
            hist = null;
            if (sc.alive) showGone();
            return;
          }
          hist.row = more.row;
          hist.decisions.push(...more.decisions);
          for (const i of more.inputs) if (!inputs.has(i.seq)) { inputs.set(i.seq, i); hist.inputs.push(i); }
          hist.inputs.sort((a, b) => a.seq - b.seq);
          hist.now = more.now;
        }
        if (!sc.alive) return;
        syncClock(hist.now);
        renderAll();
      } catch (e) {
        if (e.status === 404) {
          hist = null;
          showGone();
        } else head.replaceChildren(h('p', { class: 'error', text: 'cannot load the job: ' + e.message }));
      } finally {
        loading = false;
        if (again) { again = false; refresh(); }
      }
    }
    auditBtn.addEventListener('click', async () => {
      auditBtn.disabled = true;
      auditBox.replaceChildren(h('span', { class: 'muted', text: 'auditing: replaying the whole log…' }));
      try {
        const res = await post('/api/audit', { job: id });
        const mine = hist ? hist.decisions.map((d) => d.matrix) : [];
        const same = res.matrix && JSON.stringify(res.matrix) === JSON.stringify(mine);
        auditBox.replaceChildren(
          h('span', { class: res.ok ? 'ok' : 'error', id: 'job-audit-result', text: res.ok ? 'audit OK: every decision reproduced' : 'audit FAILED: ' + res.problems + ' problems' }), ' · ',
          h('span', { class: same ? 'ok' : 'error', id: 'job-audit-match', text: same ? 'the matrix above matches tenure audit --job (' + mine.length + ' rows)' : 'the matrix above differs from tenure audit --job (' + (res.matrix || []).length + ' rows there, ' + mine.length + ' here)' }),
          same ? '' : matrixTable(res.columns || [], res.matrix || [], 'audit-matrix'));
      } catch (e) {
        auditBox.replaceChildren(h('span', { class: 'error', text: e.message }));
      } finally { auditBtn.disabled = false; }
    });
    sc.events('/api/events?job=' + encodeURIComponent(id), {
      job: (ev) => {
        if (!hist || ev.row.last_seq > hist.row.last_seq) refresh();
      },
      reset: () => { hist = null; refresh(); },
    });
    let ticks = 0;
    sc.every(250, () => {
      if (!hist) return;
      tickJobLeft(hist.row);
      // Redraw the timeline every second while a lease is live (the "now" line moves).
      if (++ticks % 4 === 0 && LIVE.has(hist.row.state) && hist.decisions.length <= 2000) drawTimeline(tlBox, hist, inputs, zoom, setZoom);
    });
    refresh();
  }

  // ---------- anomalies ----------
  const ANOMALY_KINDS = ['stale', 'late', 'duplicate', 'conflict', 'lost_authority', 'rejected', 'unresolved'];
  function anomalyRow(a, fresh) {
    return h('tr', { 'data-n': a.n, 'data-job': a.job, 'data-kind': a.kind, 'data-reason': a.reason, class: fresh ? 'flash' : '' },
      h('td', { class: 'at', title: a.at_text, text: fmtClock(a.at) }),
      h('td', {}, kindBadge(a.kind)),
      h('td', { class: 'mono', text: a.reason }),
      h('td', {}, jobLink(a.job)),
      config.partitions ? h('td', { class: 'num part', title: 'the partition whose streams hold it', text: a.partition || '' }) : null,
      h('td', { class: 'gen', title: "the job's current generation when it was judged", text: a.generation ? 'g' + a.generation : '–' }),
      h('td', { text: a.role + '/' + a.actor + ' ' + a.verb }),
      h('td', { class: 'num', text: '#' + a.cause }),
      h('td', { class: 'detail', text: a.detail || '' }));
  }
  function anomaliesPage(main, sc) {
    const params = new URLSearchParams(location.search);
    let kind = params.get('kind') || '';
    const tbody = h('tbody', { id: 'feed-rows' });
    const blockedBox = h('div', { id: 'blocked' });
    const more = h('button', { id: 'feed-more', text: 'load older' });
    const info = h('p', { class: 'muted small', id: 'feed-info' });
    const kindSel = h('select', { id: 'f-kind' }, h('option', { value: '', text: 'every kind' }), ANOMALY_KINDS.map((k) => h('option', { value: k, text: k })));
    kindSel.value = kind;
    let oldest = 0;
    let latest = 0;
    let blockedN = -1;
    main.replaceChildren(
      h('h1', {}, 'Anomalies'),
      h('h2', {}, 'Needs an operator ', h('span', { class: 'muted small', text: '(pending ownership conflicts, UNRESOLVED and DEAD jobs: open one to act)' })), blockedBox,
      h('h2', {}, 'Live feed ', h('span', { class: 'muted small', text: '(every verdict that was not accepted, newest first)' })),
      h('div', { class: 'filters' }, kindSel), info,
      h('div', { class: 'tablewrap' }, h('table', { class: 'feed', id: 'feed' },
        h('thead', {}, h('tr', {}, (config.partitions ? ['At', 'Kind', 'Reason', 'Job', 'Part', 'Job gen', 'Input', 'Input seq', 'Detail'] : ['At', 'Kind', 'Reason', 'Job', 'Job gen', 'Input', 'Input seq', 'Detail']).map((t) => h('th', { text: t })))), tbody)),
      more);
    function renderBlocked(rows, total) {
      blockedN = total;
      if (!rows.length) { blockedBox.replaceChildren(h('p', { class: 'muted', text: 'None: no conflict pending, no unresolved or dead job.' })); return; }
      blockedBox.replaceChildren(h('table', { class: 'board', id: 'blocked-table' }, h('tbody', {}, rows.map((r) => h('tr', { 'data-job': r.id },
        h('td', {}, jobLink(r.id)), h('td', {}, stateBadge(r.state)),
        h('td', { class: 'task' }, operatorTask(r), resultDetail(r)),
        h('td', { class: 'gen', text: leaseText(r) })))),
        total > rows.length ? h('tr', {}, h('td', { colspan: 4, class: 'muted', text: (total - rows.length) + ' more' })) : null));
    }
    async function load(before) {
      const p = new URLSearchParams({ limit: 100 });
      if (before) p.set('before', before);
      if (kind) p.set('kind', kind);
      const page = await api('/api/anomalies?' + p);
      if (!sc.alive) return null;
      syncClock(page.now);
      if (!before) {
        tbody.replaceChildren();
        latest = page.latest;
        renderBlocked(page.blocked, page.blocked_total);
      }
      for (const a of page.items) tbody.append(anomalyRow(a));
      if (page.items.length) oldest = page.items[page.items.length - 1].n;
      more.disabled = !page.more;
      info.textContent = page.latest.toLocaleString() + ' anomalies recorded' + (page.oldest > 1 ? ' (the feed keeps the latest from #' + page.oldest + ')' : '') + '.';
      localStorage.setItem('tenure.seenFeed', String(page.latest));
      setFeedBadge(page.latest);
      return page;
    }
    more.addEventListener('click', () => load(oldest));
    kindSel.addEventListener('change', () => {
      kind = kindSel.value;
      history.replaceState(null, '', '/anomalies' + (kind ? '?kind=' + kind : ''));
      load(0);
    });
    load(0).then((page) => {
      if (!page) return;
      let refetch = null;
      sc.events('/api/events?feed=' + page.latest, {
        anomalies: (ev) => {
          for (const a of ev.items) {
            if (a.n <= latest) continue;
            latest = a.n;
            if (kind && a.kind !== kind) continue;
            tbody.prepend(anomalyRow(a, true));
          }
          while (tbody.rows.length > 1000) tbody.deleteRow(-1);
          localStorage.setItem('tenure.seenFeed', String(ev.latest));
          setFeedBadge(ev.latest);
          info.textContent = ev.latest.toLocaleString() + ' anomalies recorded.' + (ev.skipped ? ' ' + ev.skipped + ' arrived too fast to show here: reload for all.' : '');
        },
        board: (ev) => {
          if (ev.blocked !== blockedN && !refetch) {
            refetch = sc.later(500, async () => {
              refetch = null;
              const p = await api('/api/anomalies?limit=1');
              if (sc.alive) renderBlocked(p.blocked, p.blocked_total);
            });
          }
        },
        reset: () => load(0),
      });
      sc.every(5000, async () => {
        const p = await api('/api/anomalies?limit=1');
        if (sc.alive) renderBlocked(p.blocked, p.blocked_total);
      });
    });
  }

  // ---------- audit ----------
  function auditResult(res) {
    if (res.error) return h('p', { class: 'error', id: 'audit-error', text: 'the audit could not be carried out: ' + res.error });
    const cnt = (x) => (x && x.count) || 0;
    // A partitioned deployment: the sums over the partitions' reports.
    const parts = res.partitions || [];
    const r = res.report || parts.reduce((t, p) => {
      const q = p.report || {};
      const add = (k) => { t[k] = { count: cnt(t[k]) + cnt(q[k]) }; };
      t.inputs += q.inputs || 0; t.decisions += q.decisions || 0; t.verified += q.verified || 0;
      ['mismatches', 'missing', 'extra', 'orphans', 'holes', 'chain', 'pending'].forEach(add);
      if (q.fold_hash !== q.stored_hash || p.error) t.stored_hash = 'different';
      return t;
    }, { inputs: 0, decisions: 0, verified: 0, fold_hash: '', stored_hash: '' });
    const notAudited = parts.filter((p) => p.error).map((p) => p.partition);
    const stat = (label, v, bad) => h('div', { class: 'card' + (bad ? ' badcard' : '') }, h('div', { class: 'label', text: label }), h('div', { class: 'value', text: String(v) }));
    return h('div', { class: 'auditres' },
      h('p', {}, h('span', { class: 'verdictbig ' + (res.ok ? 'ok' : 'error'), id: 'audit-verdict', text: res.ok ? 'OK: every decision was reproduced' + (parts.length ? ' in ' + parts.length + ' partition' + (parts.length > 1 ? 's' : '') : '') : 'FAILED: ' + res.problems + ' problems' + (notAudited.length ? ', partition ' + notAudited.join(', ') + ' not audited' : '') }),
        h('span', { class: 'muted small', text: ' started ' + new Date(res.started_at).toLocaleString() + ', took ' + fmtDur(res.elapsed_ms) + (res.job ? ', job ' + res.job : '') + (res.strict ? ', strict' : '') })),
      h('div', { class: 'cards' },
        stat('Inputs replayed', r.inputs), stat('Decisions read', r.decisions), stat('Verified', r.verified),
        stat('Mismatches', cnt(r.mismatches), cnt(r.mismatches)), stat('Missing', cnt(r.missing), cnt(r.missing)),
        stat('Extra', cnt(r.extra), cnt(r.extra)), stat('Orphans', cnt(r.orphans), cnt(r.orphans)),
        stat('Holes', cnt(r.holes), cnt(r.holes)), stat('Chain breaks', cnt(r.chain), cnt(r.chain)),
        stat('Pending', (r.pending && r.pending.count) || 0), stat('Hashes', r.fold_hash === r.stored_hash ? 'equal' : 'different', r.fold_hash !== r.stored_hash)),
      h('h3', {}, 'Summary (as tenure audit prints it)'), h('pre', { class: 'summarytext', id: 'audit-summary', text: res.summary }),
      res.job ? [h('h3', {}, 'Evidence matrix of ', jobLink(res.job)), matrixTable(res.columns, res.matrix, 'audit-matrix'),
        h('h3', {}, 'Timeline'), h('pre', { class: 'summarytext', text: res.timeline || '' })] : null);
  }
  function auditPage(main, sc) {
    const jobIn = h('input', { id: 'audit-job', type: 'text', placeholder: 'job id (optional)', size: 20 });
    const strictIn = h('input', { id: 'audit-strict', type: 'checkbox' });
    const run = h('button', { id: 'audit-run', class: 'primary', text: 'Run audit' });
    const out = h('div', { id: 'audit-out' });
    // The log moves on while the page is open: say how far, and how much
    // was stored since the audit on screen began (live updates, so that
    // the page is as live as the others and its indicator says so).
    const liveLine = h('p', { class: 'muted small', id: 'audit-live' });
    let stored = -1;
    let atRun = -1;
    const showLive = () => {
      if (stored < 0) return;
      liveLine.textContent = 'the board has read ' + stored.toLocaleString() + ' decisions' +
        (atRun >= 0 ? ', ' + (stored - atRun).toLocaleString() + ' of them since the audit below began' : '');
    };
    main.replaceChildren(
      h('h1', {}, 'Audit'),
      h('p', { class: 'muted' }, 'Replays the input stream through the fold and checks every stored decision, byte for byte (', h('code', { text: 'tenure audit' }), '). Read-only: nothing is written to the streams.'),
      h('div', { class: 'filters' }, jobIn, h('label', { class: 'check' }, strictIn, ' strict (count pending inputs as problems)'), run),
      liveLine, out);
    const listen = () => {
      const es = sc.events('/api/events', {
        board: (ev) => { stored = ev.seq; setFeedBadge(ev.feed); showLive(); },
        reset: () => { sc.close(es); listen(); },
      });
    };
    listen();
    run.addEventListener('click', async () => {
      atRun = stored;
      showLive();
      run.disabled = true;
      out.replaceChildren(h('p', { class: 'muted', id: 'audit-running', text: 'auditing: replaying the log…' }));
      const body = { strict: strictIn.checked };
      if (jobIn.value.trim()) body.job = jobIn.value.trim();
      try {
        const res = await post('/api/audit', body);
        if (sc.alive) out.replaceChildren(auditResult(res));
      } catch (e) {
        if (sc.alive) out.replaceChildren(e.body && e.body.started_at ? auditResult(e.body) : h('p', { class: 'error', text: e.message }));
      } finally { run.disabled = false; }
    });
    api('/api/audit').then((res) => {
      if (res && sc.alive && !out.firstChild) out.replaceChildren(h('p', { class: 'muted small', text: 'Last audit:' }), auditResult(res));
    }).catch(() => {});
  }

  // ---------- router ----------
  function route() {
    if (scope) scope.dispose();
    scope = newScope();
    setConn(null); // the last page's stream is closed; this page's is not open yet
    const main = $('#main');
    const p = location.pathname;
    let nav = '';
    if (p === '/' || p === '') { nav = 'board'; boardPage(main, scope); }
    else if (p.startsWith('/jobs/')) { nav = 'board'; jobPage(main, scope, decodeURIComponent(p.slice(6))); }
    else if (p === '/anomalies') { nav = 'anomalies'; anomaliesPage(main, scope); }
    else if (p === '/audit' && !operator()) { nav = 'audit'; main.replaceChildren(h('h1', { text: 'Audit' }), h('p', { class: 'muted', id: 'audit-viewer', text: 'Audits need the operator role: their reports name lease ids and input bodies. Log in with an operator token, or run tenure audit.' })); }
    else if (p === '/audit') { nav = 'audit'; auditPage(main, scope); }
    else main.replaceChildren(h('h1', { text: 'Not found' }), h('p', {}, h('a', { href: '/', text: 'back to the board' })));
    document.querySelectorAll('nav a').forEach((a) => a.classList.toggle('on', a.dataset.nav === nav));
    document.title = 'Tenure · ' + (p.startsWith('/jobs/') ? decodeURIComponent(p.slice(6)) : nav || 'not found');
    window.scrollTo(0, 0);
  }
  document.addEventListener('click', (e) => {
    const a = e.target.closest('a');
    if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    if (a.origin !== location.origin || /^\/(api|assets|metrics|healthz)/.test(a.pathname)) return;
    e.preventDefault();
    if (a.pathname + a.search !== location.pathname + location.search) history.pushState(null, '', a.pathname + a.search);
    route();
  });
  window.addEventListener('popstate', route);

  async function start() {
    try { config = await api('/api/config'); } catch (e) { /* keep the defaults */ }
    // Who is logged in, and the way out (a cookie session has a CSRF
    // token; a bearer token has no session to end).
    $('#who').textContent = config.role;
    $('#who').title = config.role === 'operator' ? 'operator: sees lease ids and payloads' : 'viewer: no lease id, no payload, no input body';
    const nav = document.querySelector('nav a[data-nav="audit"]');
    if (nav && !operator()) nav.classList.add('hidden');
    const out = $('#logout');
    if (config.csrf) {
      out.classList.remove('hidden');
      out.addEventListener('click', async () => {
        try { await post('/logout', {}); } finally { location.href = '/login'; }
      });
    }
    route();
    pollHealth();
    setInterval(pollHealth, 5000);
  }
  start();
})();
