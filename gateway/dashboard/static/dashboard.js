// The live page: polls /dashboard/data every `refresh_s`, keeps the polls of the last few
// minutes, and draws tiles (recent windows), charts (uPlot) and tables (since the gateway
// started). Every figure sits in an element with `data-v` holding its raw value (seconds,
// counts, ratios) beside the text a person reads.
"use strict";

(() => {
  const M = HeadstartMetrics;
  const RATE_S = 10, WINDOW_S = 60, TREND_S = 30, CHART_S = 300;
  const G = "headstart_gateway_", E = "headstart_engine_", C = "headstart_cache_";
  const OUTCOMES = [["exact", "#1a7f37"], ["semantic", "#8250df"], ["miss", "#bf8700"], ["bypass", "#57606a"]];
  const polls = [];  // {t, f: families}, oldest first
  let setup = null, charts = null;

  const $ = (id) => document.getElementById(id);
  const clock = (t) => new Date(t * 1000).toLocaleTimeString([], {hour12: false});
  const lastT = () => (polls.length ? polls[polls.length - 1].t : Date.now() / 1000);
  const ms = (s) => (s == null ? "–" : `${s * 1000 < 10 ? (s * 1000).toFixed(1) : Math.round(s * 1000)} ms`);
  const pct = (r) => (r == null ? "–" : `${(100 * r).toFixed(1)}%`);
  const num = (n) => (n == null ? "–" : String(Math.round(n)));
  const ratio = (a, b) => (b > 0 ? a / b : null);

  function show(el, value, text, cls) {
    el.dataset.v = value == null ? "" : String(value);
    el.textContent = text;
    if (cls !== undefined) el.className = cls;
  }

  // The newest poll at least `seconds` before poll `i` (else the oldest kept).
  function pollBeforeIndex(i, seconds) {
    for (let j = i; j >= 0; j--) if (polls[i].t - polls[j].t >= seconds) return polls[j];
    return polls[0];
  }

  // The same before the newest poll.
  const pollBefore = (seconds) => pollBeforeIndex(polls.length - 1, seconds);

  function ttftOver(newest, older) {
    const h = M.histogram(newest.f, G + "ttft_seconds");
    return M.histogramDelta(h, older && M.histogram(older.f, G + "ttft_seconds"));
  }

  function prefixTokens(f) {  // the engine's own count when it runs in-process, else upstreams'
    if (f[E + "prompt_tokens"]) return [M.total(f, E + "prefix_hit_tokens"), M.total(f, E + "prompt_tokens")];
    return [M.total(f, G + "cached_prompt_tokens"), M.total(f, G + "prompt_tokens")];
  }

  function drawTiles() {
    const now = polls[polls.length - 1], f = now.f;
    const r = pollBefore(RATE_S), w = pollBefore(WINDOW_S);
    const span = now.t - r.t;
    const requests = (p) => M.total(p.f, G + "requests");
    const errors = (p) => M.total(p.f, G + "requests", {outcome: "error"});
    const rate = span > 0 ? (requests(now) - requests(r)) / span : null;
    show($("tile-rate"), rate, rate == null ? "–" : rate.toFixed(2));
    $("tile-rate-sub").textContent = `${num(requests(now) - requests(w))} requests ` +
      `(${num(errors(now) - errors(w))} failed) in the last minute`;

    const h = ttftOver(now, w), p50 = M.quantile(0.5, h), p95 = M.quantile(0.95, h);
    const slo = setup.slo_ms / 1000;
    show($("tile-ttft-p50"), p50, ms(p50));
    show($("tile-ttft-p95"), p95, ms(p95), p95 == null ? "" : p95 <= slo ? "ok" : "over");
    $("tile-ttft-sub").textContent = `SLO p95 ≤ ${setup.slo_ms} ms · ${M.count(h)} first tokens`;

    const outcome = (p, status) => M.total(p.f, G + "cache_lookups", {status});
    const d = Object.fromEntries(OUTCOMES.map(([s]) => [s, outcome(now, s) - outcome(w, s)]));
    const looked = d.exact + d.semantic + d.miss + d.bypass;
    const hits = ratio(d.exact + d.semantic, looked);
    show($("tile-cache"), hits, pct(hits));
    $("tile-cache-sub").textContent = OUTCOMES.map(([s]) => `${s} ${d[s]}`).join(" · ");

    const [hitNow, promptNow] = prefixTokens(f), [hitThen, promptThen] = prefixTokens(w.f);
    const prefix = ratio(hitNow - hitThen, promptNow - promptThen);
    show($("tile-prefix"), prefix, pct(prefix));
    $("tile-prefix-sub").textContent = `since start ${pct(ratio(hitNow, promptNow))} of ${num(promptNow)} tokens`;

    const engine = Boolean(f[E + "kv_blocks_total"]);
    const used = M.total(f, E + "kv_blocks_used"), all = M.total(f, E + "kv_blocks_total");
    show($("tile-kv"), engine ? used : null, engine ? `${used} / ${all}` : "–");
    $("tile-kv-sub").textContent = engine ? `${pct(ratio(used, all))} · ${M.total(f, E + "kv_blocks_cached")} cached for reuse` : "no in-process engine";
    const waiting = M.total(f, E + "num_requests_waiting");
    show($("tile-queue"), engine ? waiting : null, engine ? num(waiting) : "–");
    $("tile-queue-sub").textContent = engine ? `${num(M.total(f, E + "num_requests_running"))} running` : "no in-process engine";
  }

  function cell(row, key, value, text, cls) {
    const td = document.createElement("td");
    td.dataset.k = key;
    show(td, value, text);
    if (cls) td.className = cls;
    row.appendChild(td);
  }

  function fillTable(id, rows) {
    const body = $(id).tBodies[0];
    body.replaceChildren(...rows);
    if (!rows.length) {
      const tr = document.createElement("tr"), td = document.createElement("td");
      td.colSpan = $(id).tHead.rows[0].cells.length;
      td.className = "empty";
      td.textContent = "nothing yet";
      tr.appendChild(td);
      body.appendChild(tr);
    }
  }

  function routeRow(f, name, where, upstream, cls) {
    const tr = document.createElement("tr");
    if (cls) tr.className = cls;
    const k = (what) => `route/${name}/${what}`;
    const h = M.histogram(f, G + "ttft_seconds", where);
    const lookups = Object.fromEntries(OUTCOMES.map(([s]) => [s, M.total(f, G + "cache_lookups", {...where, status: s})]));
    const looked = Object.values(lookups).reduce((a, b) => a + b, 0);
    const hits = ratio(lookups.exact + lookups.semantic, looked);
    const ok = M.total(f, G + "requests", {...where, outcome: "ok"});
    const err = M.total(f, G + "requests", {...where, outcome: "error"});
    const p50 = M.quantile(0.5, h), p95 = M.quantile(0.95, h);
    cell(tr, k("name"), name, name, "text");
    cell(tr, k("upstream"), upstream, upstream, "text");
    cell(tr, k("ok"), ok, num(ok));
    cell(tr, k("errors"), err, num(err), err ? "over" : "");
    cell(tr, k("ttft_p50"), p50, ms(p50));
    cell(tr, k("ttft_p95"), p95, ms(p95), p95 == null ? "" : p95 <= setup.slo_ms / 1000 ? "ok" : "over");
    for (const [s] of OUTCOMES) cell(tr, k(s), lookups[s], num(lookups[s]));
    const rejected = M.total(f, C + "guard_rejections", where);
    cell(tr, k("rejections"), rejected, num(rejected));
    cell(tr, k("hit_ratio"), hits, pct(hits));
    return tr;
  }

  function drawRoutes(f) {
    const rows = setup.routes.map((r) => routeRow(f, r.name, {route: r.name}, r.fallback ? `${r.upstream} → ${r.fallback}` : r.upstream));
    rows.push(routeRow(f, "all", {}, "", "total"));
    fillTable("routes", rows);
  }

  function drawUpstreams(f) {
    const rows = Object.entries(setup.upstreams).map(([name, kind]) => {
      const tr = document.createElement("tr"), k = (what) => `upstream/${name}/${what}`;
      const attempts = (outcome) => M.count(M.histogram(f, G + "upstream_seconds", {upstream: name, outcome}));
      const h = M.histogram(f, G + "upstream_seconds", {upstream: name, outcome: "ok"});
      const p50 = M.quantile(0.5, h), p95 = M.quantile(0.95, h);
      const fallbacks = M.total(f, G + "fallbacks", {upstream: name});
      cell(tr, k("name"), name, name, "text");
      cell(tr, k("kind"), kind, kind, "text");
      for (const outcome of ["ok", "error", "aborted"]) {
        const n = attempts(outcome);
        cell(tr, k(outcome), n, num(n), outcome === "error" && n ? "over" : "");
      }
      cell(tr, k("p50"), p50, ms(p50));
      cell(tr, k("p95"), p95, ms(p95));
      cell(tr, k("fallbacks"), fallbacks, num(fallbacks));
      return tr;
    });
    fillTable("upstreams", rows);
  }

  // headstart_endpoint_* families, whatever they are: one row per (upstream, endpoint), one
  // column per family (and per value of any other label); histograms show count and p95.
  function drawEndpoints(f) {
    const names = Object.keys(f).filter((n) => n.startsWith("headstart_endpoint_")).sort();
    $("endpoints-section").hidden = !names.length;
    if (!names.length) return;
    const columns = [], rows = new Map();
    for (const name of names) {
      const fam = f[name], extra = fam.labels.filter((l) => l !== "upstream" && l !== "endpoint");
      const keys = new Set();
      for (const row of fam.values) {
        const labels = M.labelsOf(fam, row);
        const id = `${labels.upstream || ""}\u0000${labels.endpoint || ""}`;
        rows.set(id, [labels.upstream || "", labels.endpoint || ""]);
        keys.add(JSON.stringify(Object.fromEntries(extra.map((l) => [l, labels[l]]))));
      }
      for (const key of keys) columns.push({name, where: JSON.parse(key), type: fam.type});
    }
    const head = document.createElement("tr");
    for (const title of ["upstream", "endpoint", ...columns.map((c) => {
      const label = c.name.replace("headstart_endpoint_", "");
      const extra = Object.entries(c.where).map(([k, v]) => `${k}=${v}`).join(" ");
      return c.type === "histogram" ? `${label} ${extra} p95 (n)` : `${label} ${extra}`;
    })]) {
      const th = document.createElement("th");
      th.textContent = title.trim();
      if (head.cells.length < 2) th.className = "text";
      head.appendChild(th);
    }
    $("endpoints").tHead.replaceChildren(head);
    fillTable("endpoints", [...rows.values()].map(([upstream, endpoint]) => {
      const tr = document.createElement("tr"), where = {upstream, endpoint};
      cell(tr, `endpoint/${upstream}/${endpoint}/upstream`, upstream, upstream, "text");
      cell(tr, `endpoint/${upstream}/${endpoint}/endpoint`, endpoint, endpoint, "text");
      for (const c of columns) {
        const key = `endpoint/${upstream}/${endpoint}/${c.name}/${JSON.stringify(c.where)}`;
        if (c.type === "histogram") {
          const h = M.histogram(f, c.name, {...where, ...c.where}), p95 = M.quantile(0.95, h);
          cell(tr, key, p95, `${ms(p95)} (${M.count(h)})`);
        } else {
          const v = M.total(f, c.name, {...where, ...c.where});
          cell(tr, key, v, Number.isInteger(v) ? String(v) : v.toFixed(3));
        }
      }
      return tr;
    }));
  }

  function drawEngines(f) {
    const present = Boolean(f[E + "kv_blocks_total"]);
    $("engines-section").hidden = !present;
    if (!present) return;
    const labelled = f[E + "kv_blocks_total"].labels.includes("upstream");
    const engines = labelled ? M.labelValues(f, E + "kv_blocks_total", "upstream") : ["engine"];
    fillTable("engines", engines.map((name) => {
      const where = labelled ? {upstream: name} : {};
      const tr = document.createElement("tr"), k = (what) => `engine/${name}/${what}`;
      const v = (metric) => M.total(f, E + metric, where);
      cell(tr, k("name"), name, name, "text");
      for (const metric of ["num_requests_running", "num_requests_waiting", "kv_blocks_used", "kv_blocks_cached",
        "kv_blocks_total", "prompt_tokens", "prefix_hit_tokens"]) cell(tr, k(metric), v(metric), num(v(metric)));
      const hit = ratio(v("prefix_hit_tokens"), v("prompt_tokens"));
      cell(tr, k("prefix_hit_ratio"), hit, pct(hit));
      cell(tr, k("preemptions"), v("preemptions"), num(v("preemptions")));
      const ttft = M.histogram(f, E + "time_to_first_token_seconds", where);
      const queue = M.histogram(f, E + "queue_time_seconds", where);
      for (const [key, q, h] of [["ttft_p50", 0.5, ttft], ["ttft_p95", 0.95, ttft], ["queue_p95", 0.95, queue]]) {
        const x = M.quantile(q, h);
        cell(tr, k(key), x, ms(x));
      }
      return tr;
    }));
  }

  function makeCharts() {
    // series: [label, colour, dash, scale]; a second scale gets its own axis on the right
    const chart = (id, series, yLabel, right) => {
      const el = $(id), axes = [{space: 90, values: (u, ticks) => ticks.map(clock)}, {label: yLabel, size: 60}];
      if (right) axes.push({scale: right, label: right, side: 1, size: 50, grid: {show: false}});
      return new uPlot({
        width: Math.max(300, el.clientWidth), height: 200, legend: {live: false},
        scales: {x: {time: true, range: () => [lastT() - CHART_S, lastT()]}}, axes,
        series: [{}, ...series.map(([label, stroke, dash, scale]) => ({label, stroke, width: 1.5, dash, scale: scale || "y"}))],
      }, [[], ...series.map(() => [])], el);
    };
    charts = {
      rate: chart("chart-rate", [["requests/s", "#0969da"], ["errors/s", "#cf222e"]], "per second"),
      ttft: chart("chart-ttft", [["p50", "#0969da"], ["p95", "#8250df"], ["SLO", "#cf222e", [6, 4]]], "ms"),
      cache: chart("chart-cache", OUTCOMES.map(([s, c]) => [s, c]), "per second"),
      engine: chart("chart-engine", [["KV used %", "#0969da"], ["KV cached %", "#1a7f37"],
        ["waiting", "#cf222e", null, "requests"], ["running", "#bf8700", null, "requests"]], "% of KV blocks", "requests"),
    };
    window.addEventListener("resize", () => {
      for (const [name, u] of Object.entries(charts)) u.setSize({width: Math.max(300, $(`chart-${name}`).clientWidth), height: 200});
    });
  }

  function drawCharts() {
    const xs = [], rate = [[], []], ttft = [[], [], []], cache = OUTCOMES.map(() => []), engine = [[], [], [], []];
    const slo = setup.slo_ms, start = polls[polls.length - 1].t - CHART_S;
    for (let i = 1; i < polls.length; i++) {
      const p = polls[i];
      if (p.t < start) continue;
      const r = pollBeforeIndex(i, RATE_S), dt = p.t - r.t;
      if (dt <= 0) continue;
      xs.push(p.t);
      const per = (name, where) => (M.total(p.f, name, where) - M.total(r.f, name, where)) / dt;
      rate[0].push(per(G + "requests"));
      rate[1].push(per(G + "requests", {outcome: "error"}));
      const h = ttftOver(p, pollBeforeIndex(i, TREND_S));
      const q = (x) => { const v = M.quantile(x, h); return v == null ? null : v * 1000; };
      ttft[0].push(q(0.5));
      ttft[1].push(q(0.95));
      ttft[2].push(slo);
      OUTCOMES.forEach(([s], k) => cache[k].push(per(G + "cache_lookups", {status: s})));
      const pool = M.total(p.f, E + "kv_blocks_total"), has = pool > 0;
      engine[0].push(has ? 100 * M.total(p.f, E + "kv_blocks_used") / pool : null);
      engine[1].push(has ? 100 * M.total(p.f, E + "kv_blocks_cached") / pool : null);
      engine[2].push(has ? M.total(p.f, E + "num_requests_waiting") : null);
      engine[3].push(has ? M.total(p.f, E + "num_requests_running") : null);
    }
    charts.rate.setData([xs, ...rate]);
    charts.ttft.setData([xs, ...ttft]);
    charts.cache.setData([xs, ...cache]);
    charts.engine.setData([xs, ...engine]);
  }

  function render() {
    const f = polls[polls.length - 1].f;
    drawTiles();
    drawRoutes(f);
    drawUpstreams(f);
    drawEndpoints(f);
    drawEngines(f);
    drawCharts();
  }

  async function poll() {
    let next = setup ? setup.refresh_s * 1000 : 1000;
    try {
      const response = await fetch("/dashboard/data", {cache: "no-store", credentials: "same-origin"});
      if (response.status === 401 || response.status === 403) { location.reload(); return; }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const data = await response.json();
      if (!setup) {
        setup = data;
        next = setup.refresh_s * 1000;
        $("logout").hidden = !data.guarded;
        makeCharts();
      }
      const last = polls[polls.length - 1];
      if (last && M.total(data.families, G + "requests") < M.total(last.f, G + "requests")) polls.length = 0;  // restarted
      polls.push({t: data.t, f: data.families});
      while (polls.length > 2 && polls[1].t < data.t - CHART_S - WINDOW_S) polls.shift();
      render();
      const status = $("status");
      status.className = "status";
      status.textContent = `updated ${clock(data.t)} · every ${setup.refresh_s} s`;
      status.dataset.polls = String((Number(status.dataset.polls) || 0) + 1);
    } catch (e) {
      $("status").className = "status down";
      $("status").textContent = `gateway unreachable (${e.message}); retrying`;
    }
    setTimeout(poll, next);
  }

  poll();
})();
