// The tables, all since the gateway started: per route, per upstream, per endpoint (any
// `headstart_endpoint_*` series, read by its labels) and the in-process engine. Each cell's
// `data-k` names the figure (`route/faq/exact`), for scripts and tests.
"use strict";

const HeadstartTables = (() => {
  const M = HeadstartMetrics;
  const {G, E, C, OUTCOMES, $, ms, pct, num, ratio, show} = HeadstartView;
  let setup = null;

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
      // the second KV tier (`--kv-offload-mb`): what it holds, reloads, bytes both ways
      const tier = Boolean(f[E + "kv_tier_blocks"]);
      const tv = (metric) => (tier ? v(metric) : null);
      cell(tr, k("tier_blocks"), tv("kv_tier_blocks"), num(tv("kv_tier_blocks")));
      cell(tr, k("tier_reloads"), tv("kv_tier_reloaded_blocks"), num(tv("kv_tier_reloaded_blocks")));
      const moved = tier ? v("kv_tier_bytes") / 1048576 : null;
      cell(tr, k("tier_mb_moved"), moved, moved == null ? "–" : moved.toFixed(1));
      return tr;
    }));
  }

  function draw(families, config) {
    setup = config;
    drawRoutes(families);
    drawUpstreams(families);
    drawEndpoints(families);
    drawEngines(families);
  }

  return {draw};
})();
