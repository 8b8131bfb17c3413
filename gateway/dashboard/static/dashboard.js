// The live page: polls /dashboard/data every `refresh_s` and draws tiles (recent windows),
// charts (uPlot) and the tables (tables.js, since the gateway started). The windows and
// charts read the gateway's own per-second samples of the last 15 minutes (the first poll
// asks for all of them, later ones for those after the newest held), then the newest poll:
// a page opened after traffic shows it at once. Every figure sits in an element with
// `data-v` holding its raw value (seconds, counts, ratios) beside the text a person reads.
"use strict";

(() => {
  const M = HeadstartMetrics;
  const {G, E, OUTCOMES, $, clock, ms, pct, num, ratio, show} = HeadstartView;
  const RATE_S = 10, WINDOW_S = 60, TREND_S = 30;
  const samples = [];  // the gateway's samples, {t, f: the families the charts read}, oldest first
  let polls = [];  // what tiles and charts read: the samples before the newest poll, then that poll
  let setup = null, charts = null, span = 900;  // span: seconds of samples the gateway keeps
  let endpointsKey = "[]";  // the replicas the endpoint chart was made for
  const ENDPOINT_REQUESTS = "headstart_endpoint_requests";
  const PALETTE = ["#0969da", "#1a7f37", "#8250df", "#bf8700", "#cf222e", "#57606a", "#0a7ea4", "#953800"];
  const lastT = () => (polls.length ? polls[polls.length - 1].t : Date.now() / 1000);
  // the charts' time axis: the samples held (at least a minute), up to the gateway's span
  const xRange = () => [Math.max(lastT() - span, Math.min(polls.length ? polls[0].t : 0, lastT() - 60)), lastT()];

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

  // series: [label, colour, dash, scale]; a second scale gets its own axis on the right
  function chart(id, series, yLabel, right) {
    const el = $(id), axes = [{space: 90, values: (u, ticks) => ticks.map(clock)}, {label: yLabel, size: 60}];
    if (right) axes.push({scale: right, label: right, side: 1, size: 50, grid: {show: false}});
    return new uPlot({
      width: Math.max(300, el.clientWidth), height: 200, legend: {live: false},
      scales: {x: {time: true, range: xRange}}, axes,
      series: [{}, ...series.map(([label, stroke, dash, scale]) => ({label, stroke, width: 1.5, dash, scale: scale || "y"}))],
    }, [[], ...series.map(() => [])], el);
  }

  // A fleet's replicas (`headstart_endpoint_requests` rows) in the newest poll: [{upstream, endpoint}].
  function endpointsOf(f) {
    const family = f[ENDPOINT_REQUESTS];
    if (!family) return [];
    const seen = new Map();
    for (const row of family.values) {
      const l = M.labelsOf(family, row);
      seen.set(`${l.upstream} ${l.endpoint}`, {upstream: l.upstream, endpoint: l.endpoint});
    }
    return [...seen.values()];
  }

  // The endpoint chart has a line pair per replica: (re)made when the replicas change.
  function endpointChart(endpoints) {
    const key = JSON.stringify(endpoints);
    $("endpoints-figure").hidden = !endpoints.length;
    if (key === endpointsKey) return charts.endpoints;
    endpointsKey = key;
    if (charts.endpoints) charts.endpoints.destroy();
    delete charts.endpoints;
    if (!endpoints.length) return null;
    const series = endpoints.flatMap(({endpoint}, k) => {
      const colour = PALETTE[k % PALETTE.length];
      return [[endpoint, colour], [`${endpoint} failed`, colour, [4, 3]]];
    });
    charts.endpoints = chart("chart-endpoints", series, "attempts per second");
    return charts.endpoints;
  }

  function makeCharts() {
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
    const endpoints = endpointsOf(polls[polls.length - 1].f), perEndpoint = endpoints.flatMap(() => [[], []]);
    const slo = setup.slo_ms, start = polls[polls.length - 1].t - span;
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
      endpoints.forEach((where, k) => {
        perEndpoint[2 * k].push(per(ENDPOINT_REQUESTS, where));
        perEndpoint[2 * k + 1].push(per(ENDPOINT_REQUESTS, {...where, outcome: "error"}));
      });
    }
    charts.rate.setData([xs, ...rate]);
    charts.ttft.setData([xs, ...ttft]);
    charts.cache.setData([xs, ...cache]);
    charts.engine.setData([xs, ...engine]);
    const byEndpoint = endpointChart(endpoints);
    if (byEndpoint) byEndpoint.setData([xs, ...perEndpoint]);
    for (const name of Object.keys(charts)) $(`chart-${name}`).dataset.points = String(xs.length);
  }

  function render() {
    const f = polls[polls.length - 1].f;
    drawTiles();
    HeadstartTables.draw(f, setup);
    drawCharts();
  }

  async function poll() {
    let next = setup ? setup.refresh_s * 1000 : 1000;
    try {
      const since = samples.length ? samples[samples.length - 1].t : 0;
      const response = await fetch(`/dashboard/data?since=${since}`, {cache: "no-store", credentials: "same-origin"});
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
      if (last && M.total(data.families, G + "requests") < M.total(last.f, G + "requests")) samples.length = 0;  // restarted
      if (data.history) {
        span = data.history.seconds;
        samples.push(...M.expandHistory(data.history));
        while (samples.length && samples[0].t <= data.t - span) samples.shift();
      }
      polls = samples.filter((p) => p.t < data.t);
      polls.push({t: data.t, f: data.families});
      render();
      const status = $("status");
      status.className = "status";
      status.textContent = `updated ${clock(data.t)} · every ${setup.refresh_s} s`;
      status.dataset.polls = String((Number(status.dataset.polls) || 0) + 1);
      status.dataset.samples = String(samples.length);
    } catch (e) {
      $("status").className = "status down";
      $("status").textContent = `gateway unreachable (${e.message}); retrying`;
    }
    setTimeout(poll, next);
  }

  poll();
})();
