// What the book's live controls share (padding-waste.js, slot-memory.js): DOM and SVG helpers, number
// formats that match minillm/notebook/widgets/live.py character for character, and mounting.
//
// A control is a <div class="minillm-..."> written into a chapter's text; its script turns every such
// div into a live control once, and marks it data-live="true". Rounding is half-up on the float
// value, Math.floor(x + 0.5), the same expression the Python side uses, so both print the same digits.
(function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  var MiB = 1048576;
  var GiB = 1073741824;

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svgEl(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fmtInt(n) { // 65536 -> "65,536"
    return Math.round(n).toLocaleString("en-US");
  }

  function fmtPercent(fraction) { // 0.8426 -> "84%"
    return Math.floor(fraction * 100 + 0.5) + "%";
  }

  function fmtBytes(n) { // GiB with one decimal from 1 GiB up, whole MiB below
    if (n >= GiB) return (Math.floor(n / GiB * 10 + 0.5) / 10).toFixed(1) + " GiB";
    return fmtInt(Math.floor(n / MiB + 0.5)) + " MiB";
  }

  function count(n, noun) { // 1 -> "1 slot", 2 -> "2 slots"
    return fmtInt(n) + " " + noun + (n === 1 ? "" : "s");
  }

  // Tick values for an axis from 0 to max: steps of 1, 2 or 5 times a power of ten, about `target` of them.
  function ticks(max, target) {
    var raw = max / (target || 5);
    var power = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * power; }).filter(function (s) { return s >= raw; })[0];
    step = Math.max(1, step);
    var values = [];
    for (var v = 0; v <= max + 1e-9; v += step) values.push(v);
    return values;
  }

  // Mount every not-yet-live div matching `selector` now, and again whenever the page's content changes
  // (mkdocs-material's instant navigation swaps pages without a new DOMContentLoaded).
  function register(selector, mount) {
    function mountAll() {
      document.querySelectorAll(selector + ":not([data-live])").forEach(function (root) {
        if (mount(root) !== false) root.setAttribute("data-live", "true");
      });
    }
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mountAll);
    else mountAll();
    if (window.document$ && typeof window.document$.subscribe === "function") window.document$.subscribe(mountAll);
    return mountAll;
  }

  window.minillmControls = {
    el: el, svgEl: svgEl, fmtInt: fmtInt, fmtPercent: fmtPercent, fmtBytes: fmtBytes, count: count,
    ticks: ticks, register: register, MiB: MiB, GiB: GiB,
  };
})();
