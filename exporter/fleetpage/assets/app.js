// The fleet page: asks for data every few seconds and draws it. Plain DOM, no
// framework; every text goes in as textContent, never as HTML.
'use strict';

(function () {
  const STATES = ['free', 'busy', 'idle', 'unhealthy', 'isolated'];
  let refreshMs = 5000;
  let lastTime = null;

  // el makes an element with attributes (data-* included) and children: strings
  // become text nodes.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) {
        e.setAttribute(k, v);
      }
    }
    for (const c of children) {
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function cell(col, value, numeric) {
    return el('td', {'data-col': col, class: numeric ? 'n' : null}, value);
  }

  const num = (x, digits) => Number(x).toFixed(digits);
  const money = (x) => num(x, 2);
  const ratio = (x) => (x === undefined || x === null ? '' : num(x * 100, 0) + '%');
  const time = (s) => new Date(s).toLocaleTimeString();
  const dateTime = (s) => new Date(s).toLocaleString();

  function duration(seconds) {
    if (seconds < 60) return num(seconds, 1) + ' s';
    if (seconds < 3600) return num(seconds / 60, 1) + ' min';
    return num(seconds / 3600, 1) + ' h';
  }

  function setStatus(text, stale) {
    const s = document.getElementById('status');
    s.replaceChildren(text);
    s.className = stale ? 'stale' : '';
  }

  function replaceRows(id, rows, empty, columns) {
    const body = document.querySelector('#' + id + ' tbody');
    if (rows.length === 0) {
      body.replaceChildren(el('tr', {class: 'empty'}, el('td', {colspan: columns}, empty)));
    } else {
      body.replaceChildren(...rows);
    }
  }

  function gpuTitle(node, g) {
    const lines = [node.name + ' · GPU ' + g.index + ' · ' + g.state];
    if (g.pod) {
      const owner = [];
      if (g.workload) owner.push('workload ' + g.workload);
      owner.push(g.team ? 'team ' + g.team : 'no team');
      if (g.tier) owner.push('tier ' + g.tier);
      lines.push('pod ' + g.pod + ' (' + owner.join(', ') + ')');
    }
    if (g.utilizationPercent !== undefined) {
      lines.push('utilization ' + num(g.utilizationPercent, 1) + '% (the agent\'s mean over its window)');
    } else {
      lines.push('utilization not reported');
    }
    if (g.idleSince) lines.push('idle since ' + dateTime(g.idleSince));
    lines.push('health ' + g.health + (g.faults ? ': ' + g.faults.join(', ') : ''));
    if (g.uuid) lines.push(g.uuid);
    return lines.join('\n');
  }

  function drawSummary(v) {
    const items = STATES.map((s) => el('li', {'data-state': s},
      el('span', {class: 'swatch s-' + s}), s + ' ', el('b', {}, v.gpus[s])));
    if (v.efficiency !== undefined) {
      items.push(el('li', {id: 'efficiency'}, 'efficiency ', el('b', {}, num(v.efficiency * 100, 1) + '%')));
    }
    items.push(el('li', {id: 'idle-cost'}, 'idle GPUs cost ', el('b', {}, money(v.idleCostPerHour)), ' an hour'));
    document.getElementById('summary').replaceChildren(...items);
  }

  function drawNodes(v) {
    const rows = v.nodes.map((n) => {
      const counts = STATES.filter((s) => n.gpus[s] > 0).map((s) => n.gpus[s] + ' ' + s).join(', ');
      const meta = [n.pool || 'no pool', n.model || 'model unknown', counts];
      if (n.isolation) meta.push('isolated (' + n.isolation + ')');
      const cells = n.gpuList.map((g) => el('span', {
        class: 'gpu s-' + g.state, 'data-state': g.state, 'data-index': g.index, title: gpuTitle(n, g),
      }, g.index));
      return el('div', {class: 'node' + (n.isolation ? ' isolated' : ''), 'data-node': n.name},
        el('div', {class: 'node-name'}, n.name),
        el('div', {class: 'cells'}, ...cells),
        el('div', {class: 'node-meta'}, meta.join(' · ')));
    });
    const nodes = document.getElementById('nodes');
    if (rows.length === 0) {
      nodes.replaceChildren(el('p', {class: 'empty'}, 'No GPU nodes.'));
    } else {
      nodes.replaceChildren(...rows);
    }
  }

  function drawTeams(v) {
    const rows = v.teams.map((t) => el('tr', {'data-team': t.team, 'data-model': t.model},
      cell('team', t.team || '(no team)'), cell('model', t.model || 'unknown'),
      cell('gpus', t.gpus, true), cell('idle', t.idle, true), cell('quota', t.team ? t.quota : '', true),
      cell('borrowed', t.team ? t.borrowed : '', true), cell('lent', t.team ? t.lent : '', true),
      cell('idle-cost-per-hour', money(t.idleCostPerHour), true), cell('gpu-hours', num(t.gpuHours, 2), true),
      cell('efficiency', ratio(t.efficiency), true), cell('mean-utilization', ratio(t.meanUtilization), true),
      cell('cost', money(t.cost), true), cell('idle-cost', money(t.idleCost), true)));
    replaceRows('teams', rows, 'No teams and no GPUs in use.', 13);
    document.getElementById('since').replaceChildren(
      'GPU-hours and cost since ' + dateTime(v.since) + ', when the leading controller\'s fleet model started; ' +
      'cost at each node\'s price per GPU-hour.');
  }

  function drawQueue(v) {
    const rows = v.queue.map((q) => el('tr', {'data-team': q.team, 'data-tier': q.tier},
      cell('team', q.team || '(no team)'), cell('tier', q.tier || '(none)'), cell('pending', q.pending, true),
      cell('pending-gpus', q.pendingGPUs, true), cell('admitted', q.admitted, true),
      cell('mean-wait', q.admitted > 0 ? duration(q.meanWaitSeconds) : '', true)));
    replaceRows('queue', rows, 'No workloads.', 6);
  }

  function drawIsolated(v) {
    const rows = v.nodes.filter((n) => n.isolation).map((n) => el('tr', {'data-node': n.name},
      cell('node', n.name), cell('pool', n.pool || ''), cell('how', n.isolation),
      cell('fault', n.fault || 'not recorded by Chamber (cordoned or tainted by hand?)'),
      cell('since', n.isolatedAt ? dateTime(n.isolatedAt) : ''), cell('unhealthy', n.gpus.unhealthy, true)));
    replaceRows('isolated', rows, 'No node is isolated.', 6);
  }

  function draw(v) {
    drawSummary(v);
    drawNodes(v);
    drawTeams(v);
    drawQueue(v);
    drawIsolated(v);
    lastTime = v.time;
    document.body.dataset.updated = v.time;
    setStatus('Updated ' + time(v.time) + '; every ' + v.refreshSeconds + ' s.', false);
  }

  async function load() {
    try {
      const resp = await fetch('data', {cache: 'no-store', credentials: 'same-origin', headers: {Accept: 'application/json'}});
      if (resp.status === 401 || resp.status === 403) {
        const s = document.getElementById('status');
        s.className = 'stale';
        s.replaceChildren('The controller refused this browser\'s token (HTTP ' + resp.status + '): ',
          el('a', {href: 'sign-in?why=' + (resp.status === 401 ? 'refused' : 'forbidden')}, 'sign in again'), '.');
      } else if (!resp.ok) {
        let why = 'HTTP ' + resp.status;
        try {
          why = (await resp.json()).message || why;
        } catch (e) { /* not JSON: keep the status */ }
        setStatus('No fleet from this controller: ' + why + '.', true);
      } else {
        const v = await resp.json();
        draw(v);
        if (v.refreshSeconds > 0) refreshMs = v.refreshSeconds * 1000;
      }
    } catch (e) {
      setStatus('Could not reach the controller (' + e.message + ')' +
        (lastTime ? '; showing the fleet of ' + time(lastTime) : '') + '. Retrying.', true);
    }
    setTimeout(load, refreshMs);
  }

  load();
})();
