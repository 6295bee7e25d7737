// The padding-waste widget: turns every <div class="minillm-padding-waste" data-query-lens="2000,512,1">
// into a live control. Each number is one request's new tokens in this step (its query length).
// A padded batch stores [B, max_len] token slots; a packed (varlen) batch stores [N = sum of lengths].
// The wasted fraction is the share of padded slots that hold no token: 1 - N / (B * max_len).
(function () {
  "use strict";

  var MAX_TOKENS = 32768;
  var MAX_REQUESTS = 32;
  var PRESETS = [
    { name: "mixed: 2 prefills + 6 decodes", lens: [2000, 512, 1, 1, 1, 1, 1, 1] },
    { name: "all decode", lens: [1, 1, 1, 1, 1, 1, 1, 1] },
    { name: "all prefill", lens: [512, 384, 640, 256, 768, 448, 320, 576] },
  ];
  var SVG = "http://www.w3.org/2000/svg";
  var WIDTH = 640;
  var LABEL = 120; // px left of the bars for row labels

  function parseLens(text) {
    var parts = String(text || "").split(",");
    var lens = [];
    for (var i = 0; i < parts.length; i++) {
      var n = Number(parts[i].trim());
      if (!isValidLength(n)) return null;
      lens.push(n);
    }
    return lens.length > 0 && lens.length <= MAX_REQUESTS ? lens : null;
  }

  function isValidLength(n) {
    return Number.isInteger(n) && n >= 1 && n <= MAX_TOKENS;
  }

  // The two layouts' sizes in token slots.
  function layout(lens) {
    var batch = lens.length;
    var maxLen = Math.max.apply(null, lens);
    var packed = lens.reduce(function (a, b) { return a + b; }, 0);
    var padded = batch * maxLen;
    return { batch: batch, maxLen: maxLen, padded: padded, packed: packed, wasted: (padded - packed) / padded };
  }

  function percent(fraction) {
    return Math.round(fraction * 100) + "%";
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svgEl(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    return node;
  }

  function svgText(x, y, text) {
    var node = svgEl("text", { x: x, y: y, class: "mpw-label" });
    node.textContent = text;
    return node;
  }

  // Padded rows on top ([B, max_len]), then the packed [N] tokens wrapped at max_len per row,
  // at the same tokens-per-pixel scale, so the two areas compare directly.
  function drawPicture(lens) {
    var sizes = layout(lens);
    var scale = (WIDTH - LABEL) / sizes.maxLen;
    var rowH = Math.max(6, Math.min(18, 180 / sizes.batch));
    var packedRows = Math.ceil(sizes.packed / sizes.maxLen);
    var gap = 34;
    var height = 24 + sizes.batch * rowH + gap + packedRows * rowH + 4;
    var svg = svgEl("svg", {
      class: "mpw-picture", viewBox: "0 0 " + WIDTH + " " + height, width: "100%",
      role: "img", "aria-label": "padded versus packed token layout",
    });
    svg.appendChild(svgText(0, 16, "padded [B, max_len]"));
    var y = 24;
    lens.forEach(function (len, i) {
      svg.appendChild(svgEl("rect", { x: LABEL, y: y, width: sizes.maxLen * scale, height: rowH - 1, class: "mpw-pad" }));
      svg.appendChild(svgEl("rect", {
        x: LABEL, y: y, width: Math.max(1, len * scale), height: rowH - 1, class: "mpw-tok mpw-c" + (i % 8),
      }));
      y += rowH;
    });
    svg.appendChild(svgText(0, y + gap / 2 + 4, "packed [N]"));
    y += gap;
    var offset = 0; // token index in the packed buffer
    lens.forEach(function (len, i) {
      var left = len;
      while (left > 0) {
        var row = Math.floor(offset / sizes.maxLen);
        var col = offset % sizes.maxLen;
        var take = Math.min(left, sizes.maxLen - col);
        svg.appendChild(svgEl("rect", {
          x: LABEL + col * scale, y: y + row * rowH, width: Math.max(1, take * scale), height: rowH - 1,
          class: "mpw-tok mpw-c" + (i % 8),
        }));
        offset += take;
        left -= take;
      }
    });
    return svg;
  }

  function summaryText(lens) {
    var s = layout(lens);
    var fmt = function (n) { return n.toLocaleString("en-US"); };
    return "Padded [B=" + s.batch + ", max_len=" + fmt(s.maxLen) + "] = " + fmt(s.padded) +
      " token slots; packed [N] = " + fmt(s.packed) + " tokens. ";
  }

  function mount(root) {
    var lens = parseLens(root.getAttribute("data-query-lens"));
    if (!lens) {
      console.warn("minillm-padding-waste: data-query-lens must be 1 to " + MAX_REQUESTS +
        " comma-separated integers in [1, " + MAX_TOKENS + "], got", root.getAttribute("data-query-lens"));
      return;
    }
    root.textContent = "";
    root.setAttribute("data-live", "true");

    var presets = el("div", { class: "mpw-presets" });
    presets.appendChild(el("span", {}, "Presets: "));
    PRESETS.forEach(function (preset) {
      var button = el("button", { type: "button", class: "mpw-preset" }, preset.name);
      button.addEventListener("click", function () { lens = preset.lens.slice(); renderAll(); });
      presets.appendChild(button);
    });
    var requests = el("div", { class: "mpw-requests" });
    var message = el("p", { class: "mpw-message", role: "alert" });
    var pictureBox = el("div", { class: "mpw-picture-box" });
    var summary = el("p", { class: "mpw-summary" });
    [presets, requests, message, pictureBox, summary].forEach(function (node) { root.appendChild(node); });

    function renderResult() {
      pictureBox.textContent = "";
      pictureBox.appendChild(drawPicture(lens));
      summary.textContent = summaryText(lens) + "Wasted fraction: ";
      summary.appendChild(el("strong", { class: "mpw-wasted" }, percent(layout(lens).wasted)));
    }

    function renderAll() {
      requests.textContent = "";
      message.textContent = "";
      lens.forEach(function (len, i) {
        var item = el("span", { class: "mpw-request" });
        var label = el("label", {}, "request " + (i + 1) + " ");
        var input = el("input", {
          type: "number", min: "1", max: String(MAX_TOKENS), step: "1", value: String(len),
          class: "mpw-input mpw-c" + (i % 8), "aria-label": "new tokens of request " + (i + 1),
        });
        input.addEventListener("input", function () {
          var n = Number(input.value);
          if (!isValidLength(n)) {
            input.setAttribute("aria-invalid", "true");
            message.textContent = "Request " + (i + 1) + ": new tokens must be a whole number from 1 to " +
              MAX_TOKENS + "; the picture keeps " + lens[i] + ".";
            return;
          }
          input.removeAttribute("aria-invalid");
          message.textContent = "";
          lens[i] = n;
          renderResult();
        });
        label.appendChild(input);
        var remove = el("button", { type: "button", class: "mpw-remove", "aria-label": "remove request " + (i + 1) }, "×");
        remove.disabled = lens.length === 1;
        remove.addEventListener("click", function () { lens.splice(i, 1); renderAll(); });
        item.appendChild(label);
        item.appendChild(remove);
        requests.appendChild(item);
      });
      var add = el("button", { type: "button", class: "mpw-add" }, "+ add a decode request");
      add.disabled = lens.length >= MAX_REQUESTS;
      add.addEventListener("click", function () { lens.push(1); renderAll(); });
      requests.appendChild(add);
      renderResult();
    }

    renderAll();
  }

  function mountAll() {
    document.querySelectorAll(".minillm-padding-waste:not([data-live])").forEach(mount);
  }

  window.minillmPaddingWaste = { layout: layout, parseLens: parseLens, mountAll: mountAll };
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", mountAll);
  } else {
    mountAll();
  }
})();
