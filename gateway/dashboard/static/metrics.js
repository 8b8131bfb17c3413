// Reading /dashboard/data (gateway/dashboard/data.py): sums over label sets, differences
// between two polls, and quantiles from cumulative histogram buckets the way Prometheus's
// histogram_quantile() computes them, so the page agrees with a PromQL query of /metrics.
"use strict";

const HeadstartMetrics = (() => {
  // Label values of one compact row as an object: {route: "faq", outcome: "ok"}.
  function labelsOf(family, row) {
    const out = {};
    family.labels.forEach((name, i) => { out[name] = row[i]; });
    return out;
  }

  function matches(family, row, where) {
    for (const [name, want] of Object.entries(where || {})) {
      const i = family.labels.indexOf(name);
      if (i < 0 || row[i] !== want) return false;
    }
    return true;
  }

  // Sum of a counter or gauge over the rows matching `where` (0 when absent).
  function total(families, name, where) {
    const family = families[name];
    if (!family || family.type === "histogram") return 0;
    let sum = 0;
    for (const row of family.values) if (matches(family, row, where)) sum += row[row.length - 1];
    return sum;
  }

  // Cumulative bucket counts summed over the rows matching `where`: {le, counts, sum}.
  function histogram(families, name, where) {
    const family = families[name];
    if (!family || family.type !== "histogram") return null;
    const counts = new Array(family.le.length + 1).fill(0);
    let sum = 0;
    for (const row of family.values) {
      if (!matches(family, row, where)) continue;
      const n = family.labels.length;
      sum += row[n];
      row[n + 1].forEach((c, i) => { counts[i] += c; });
    }
    return {le: family.le, counts, sum};
  }

  // b - a, bucket by bucket (a = null: b itself); a counter reset counts from zero.
  function histogramDelta(b, a) {
    if (!b) return null;
    if (!a || a.counts.length !== b.counts.length || a.counts[a.counts.length - 1] > b.counts[b.counts.length - 1]) return b;
    return {le: b.le, counts: b.counts.map((c, i) => c - a.counts[i]), sum: b.sum - a.sum};
  }

  function count(h) { return h ? h.counts[h.counts.length - 1] : 0; }

  // Prometheus's histogram_quantile: linear within the bucket holding rank q * count; the
  // first bucket starts at 0; a rank in the +Inf bucket gives the highest finite bound.
  function quantile(q, h) {
    const n = count(h);
    if (!n) return null;
    const rank = q * n;
    let b = h.counts.findIndex((c) => c >= rank);
    if (b < 0) b = h.counts.length - 1;
    if (b === h.le.length) return h.le[h.le.length - 1];
    const end = h.le[b];
    if (b === 0 && end <= 0) return end;
    const start = b === 0 ? 0 : h.le[b - 1];
    const below = b === 0 ? 0 : h.counts[b - 1];
    const inBucket = h.counts[b] - below;
    return inBucket > 0 ? start + (end - start) * ((rank - below) / inBucket) : end;
  }

  // Distinct values of label `name` in a family, in order of first appearance.
  function labelValues(families, family, name) {
    const f = families[family];
    if (!f) return [];
    const i = f.labels.indexOf(name);
    if (i < 0) return [];
    return [...new Set(f.values.map((row) => row[i]))];
  }

  // The per-second samples of `/dashboard/data?since=T` (gateway/dashboard/history.py) as
  // polls, oldest first: [{t, f: families}], each family shaped like those of a poll. Every
  // series is the value at the first sample, then the changes: added back up here.
  function expandHistory(history) {
    const n = history.t.length, out = history.t.map((t) => ({t, f: {}}));
    const running = (changes) => { let x = 0; return changes.map((d) => (x += d)); };
    for (const [name, family] of Object.entries(history.families)) {
      const k = family.labels.length, rows = out.map(() => []);
      for (const row of family.values) {
        const labels = row.slice(0, k);
        if (family.type === "histogram") {
          const sum = running(row[k]), buckets = row[k + 1].map(running);
          for (let i = 0; i < n; i++) rows[i].push([...labels, sum[i], buckets.map((b) => b[i])]);
        } else {
          const values = running(row[k]);
          for (let i = 0; i < n; i++) rows[i].push([...labels, values[i]]);
        }
      }
      out.forEach((p, i) => { p.f[name] = {type: family.type, labels: family.labels, le: family.le, values: rows[i]}; });
    }
    return out;
  }

  return {labelsOf, total, histogram, histogramDelta, count, quantile, labelValues, expandHistory};
})();
