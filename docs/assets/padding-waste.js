// The padding-waste control (chapter 5): turns every <div class="minillm-padding-waste"
// data-query-lens="2000,512,1"> into a live control. Each number is one request's new tokens in this
// step (its query length). A padded batch computes [B, max_len] token positions; a packed (varlen)
// batch computes [N = sum of lengths]. The wasted share is 1 - N / (B * max_len).
// Presets, limits and the summary line are those of minillm/notebook/widgets/padding_waste.py.
(function () {
  "use strict";

  var C = window.minillmControls;
  var MAX_TOKENS = 32768;
  var MAX_REQUESTS = 16;
  var PRESETS = [
    { name: "mixed: 2 prefills + 6 decodes", lens: [2000, 512, 1, 1, 1, 1, 1, 1] },
    { name: "all decode", lens: [1, 1, 1, 1, 1, 1, 1, 1] },
    { name: "all prefill", lens: [512, 384, 640, 256, 768, 448, 320, 576] },
  ];
  var WIDTH = 640;
  var LEFT = 28; // px left of the bars for request numbers
  var ROW = 14; // px per row in both panels: equal areas mean equal work

  function isValidLength(n) {
    return Number.isInteger(n) && n >= 1 && n <= MAX_TOKENS;
  }

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

  // The two layouts' sizes in token positions.
  function layout(lens) {
    var batch = lens.length;
    var maxLen = Math.max.apply(null, lens);
    var packed = lens.reduce(function (a, b) { return a + b; }, 0);
    var padded = batch * maxLen;
    return { batch: batch, maxLen: maxLen, padded: padded, packed: packed, wasted: (padded - packed) / padded };
  }

  // The same line as PaddingWaste.summary() in Python; the percentage is returned apart so it can be bold.
  function summary(lens) {
    var s = layout(lens);
    return {
      before: "padded [B=" + s.batch + ", max_len=" + C.fmtInt(s.maxLen) + "] = " + C.fmtInt(s.padded) +
        " positions; packed [N=" + C.fmtInt(s.packed) + "]: ",
      percent: C.fmtPercent(s.wasted),
      after: " of the padded work is padding",
    };
  }

  // Padded rows on top ([B, max_len]), then the packed [N] tokens wrapped at max_len per row, at the
  // same tokens-per-pixel scale, as the notebook's figure draws them.
  function drawPicture(lens) {
    var s = layout(lens);
    var scale = (WIDTH - LEFT) / s.maxLen;
    var packedRows = Math.ceil(s.packed / s.maxLen);
    var packedTop = 22 + s.batch * ROW + 30;
    var height = packedTop + packedRows * ROW + 4;
    var svg = C.svgEl("svg", {
      class: "mpw-picture", viewBox: "0 0 " + WIDTH + " " + height, width: "100%",
      role: "img", "aria-label": "padded versus packed token layout",
    });
    svg.appendChild(C.svgEl("text", { x: 0, y: 15, class: "mpw-label" },
      "padded [B=" + s.batch + ", max_len=" + C.fmtInt(s.maxLen) + "]: " + C.fmtInt(s.padded) + " positions, " +
      C.fmtInt(s.padded - s.packed) + " of them padding (grey)"));
    lens.forEach(function (len, i) {
      var y = 22 + i * ROW;
      svg.appendChild(C.svgEl("text", { x: LEFT - 4, y: y + ROW - 3, class: "mpw-row", "text-anchor": "end" }, String(i + 1)));
      svg.appendChild(C.svgEl("rect", { x: LEFT, y: y, width: s.maxLen * scale, height: ROW - 1, class: "mpw-pad" }));
      svg.appendChild(C.svgEl("rect", {
        x: LEFT, y: y, width: Math.max(1, len * scale), height: ROW - 1, class: "mpw-tok mpw-c" + (i % 8),
      }));
    });
    svg.appendChild(C.svgEl("text", { x: 0, y: packedTop - 7, class: "mpw-label" },
      "packed [N=" + C.fmtInt(s.packed) + "]: " + C.fmtInt(s.packed) + " tokens, no padding (one row, wrapped at max_len)"));
    var offset = 0; // token index in the packed row
    lens.forEach(function (len, i) {
      var left = len;
      while (left > 0) {
        var row = Math.floor(offset / s.maxLen);
        var col = offset % s.maxLen;
        var take = Math.min(left, s.maxLen - col);
        svg.appendChild(C.svgEl("rect", {
          x: LEFT + col * scale, y: packedTop + row * ROW, width: Math.max(1, take * scale), height: ROW - 1,
          class: "mpw-tok mpw-c" + (i % 8),
        }));
        offset += take;
        left -= take;
      }
    });
    return svg;
  }

  function mount(root) {
    var lens = parseLens(root.getAttribute("data-query-lens"));
    if (!lens) {
      console.warn("minillm-padding-waste: data-query-lens must be 1 to " + MAX_REQUESTS +
        " comma-separated integers in [1, " + MAX_TOKENS + "], got", root.getAttribute("data-query-lens"));
      return false;
    }
    root.textContent = "";

    var presets = C.el("div", { class: "mpw-presets" });
    presets.appendChild(C.el("span", {}, "Presets: "));
    PRESETS.forEach(function (preset) {
      var button = C.el("button", { type: "button", class: "mpw-preset" }, preset.name);
      button.addEventListener("click", function () { lens = preset.lens.slice(); renderAll(); });
      presets.appendChild(button);
    });
    var requests = C.el("div", { class: "mpw-requests" });
    var message = C.el("p", { class: "mpw-message", role: "alert" });
    var pictureBox = C.el("div", { class: "mpw-picture-box" });
    var summaryLine = C.el("p", { class: "mpw-summary" });
    [presets, requests, message, pictureBox, summaryLine].forEach(function (node) { root.appendChild(node); });

    function renderResult() {
      pictureBox.textContent = "";
      pictureBox.appendChild(drawPicture(lens));
      var s = summary(lens);
      summaryLine.textContent = s.before;
      summaryLine.appendChild(C.el("strong", { class: "mpw-wasted" }, s.percent));
      summaryLine.appendChild(document.createTextNode(s.after));
    }

    function renderAll() {
      requests.textContent = "";
      message.textContent = "";
      lens.forEach(function (len, i) {
        var item = C.el("span", { class: "mpw-request" });
        var label = C.el("label", {}, "request " + (i + 1) + " ");
        var input = C.el("input", {
          type: "number", min: "1", max: String(MAX_TOKENS), step: "1", value: String(len),
          class: "mpw-input mpw-c" + (i % 8), "aria-label": "new tokens of request " + (i + 1),
        });
        input.addEventListener("input", function () {
          var n = Number(input.value);
          if (!isValidLength(n)) {
            input.setAttribute("aria-invalid", "true");
            message.textContent = "Request " + (i + 1) + ": new tokens must be a whole number from 1 to " +
              MAX_TOKENS + "; the picture keeps " + C.fmtInt(lens[i]) + ".";
            return;
          }
          input.removeAttribute("aria-invalid");
          message.textContent = "";
          lens[i] = n;
          renderResult();
        });
        label.appendChild(input);
        var remove = C.el("button", { type: "button", class: "mpw-remove", "aria-label": "remove request " + (i + 1) }, "×");
        remove.disabled = lens.length === 1;
        remove.addEventListener("click", function () { lens.splice(i, 1); renderAll(); });
        item.appendChild(label);
        item.appendChild(remove);
        requests.appendChild(item);
      });
      var add = C.el("button", { type: "button", class: "mpw-add" }, "+ add a decode request");
      add.disabled = lens.length >= MAX_REQUESTS;
      add.addEventListener("click", function () { lens.push(1); renderAll(); });
      requests.appendChild(add);
      renderResult();
    }

    renderAll();
  }

  var mountAll = C.register(".minillm-padding-waste", mount);
  window.minillmPaddingWaste = {
    PRESETS: PRESETS, MAX_REQUESTS: MAX_REQUESTS, MAX_TOKENS: MAX_TOKENS,
    layout: layout, parseLens: parseLens, summary: summary, mountAll: mountAll,
  };
})();
