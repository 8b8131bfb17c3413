// What the page shows and how: metric name prefixes, cache outcomes with their colours, and
// the formatting of figures. `show` writes a figure's raw value into `data-v` beside its text.
"use strict";

const HeadstartView = (() => {
  const G = "headstart_gateway_", E = "headstart_engine_", C = "headstart_cache_";
  const OUTCOMES = [["exact", "#1a7f37"], ["semantic", "#8250df"], ["miss", "#bf8700"], ["bypass", "#57606a"]];
  const $ = (id) => document.getElementById(id);
  const clock = (t) => new Date(t * 1000).toLocaleTimeString([], {hour12: false});
  const ms = (s) => (s == null ? "–" : `${s * 1000 < 10 ? (s * 1000).toFixed(1) : Math.round(s * 1000)} ms`);
  const pct = (r) => (r == null ? "–" : `${(100 * r).toFixed(1)}%`);
  const num = (n) => (n == null ? "–" : String(Math.round(n)));
  const ratio = (a, b) => (b > 0 ? a / b : null);

  function show(el, value, text, cls) {
    el.dataset.v = value == null ? "" : String(value);
    el.textContent = text;
    if (cls !== undefined) el.className = cls;
  }

  return {G, E, C, OUTCOMES, $, clock, ms, pct, num, ratio, show};
})();
