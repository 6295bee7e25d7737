// The slot-memory control (chapter 3): turns every <div class="minillm-slot-memory"> into a live
// control. Fixed slots reserve max_ctx tokens of K and V in every full-attention layer up front:
//   bytes = slots * context * 2 (K and V) * layers * kv_heads * head_dim * 2 (fp16),
// drawn as one bar against the chapter's 22 GiB per-GPU budget. Optional attributes pick the start:
// data-model="Qwen3-8B" data-slots="4" data-context="65536".
// The model list, ranges and summary line are those of minillm/notebook/widgets/slot_memory.py.
(function () {
  "use strict";

  var C = window.minillmControls;
  var MODELS = [ // name, layers that keep a full-length cache, KV heads on one GPU, head_dim
    { name: "27B-class, TP2", layers: 16, kvHeads: 16, headDim: 128 },
    { name: "Qwen3-0.6B", layers: 28, kvHeads: 8, headDim: 128 },
    { name: "Qwen3-8B", layers: 36, kvHeads: 8, headDim: 128 },
    { name: "Llama-3.1-8B", layers: 32, kvHeads: 8, headDim: 128 },
    { name: "this book's tiny Qwen3", layers: 2, kvHeads: 2, headDim: 32 },
  ];
  var BUDGET_BYTES = 22 * C.GiB;
  var BYTES_PER_ELEMENT = 2;
  var CONTEXTS = [4096, 8192, 16384, 32768, 65536, 131072];
  var MAX_SLOTS = 16;
  var WIDTH = 640;
  var PLOT = { left: 8, right: 624, top: 30, bar: 34 };

  function slotMemory(model, slots, context) {
    var slotBytes = context * 2 * model.layers * model.kvHeads * model.headDim * BYTES_PER_ELEMENT;
    var reserved = slots * slotBytes;
    return {
      model: model, slots: slots, context: context, reserved: reserved,
      fits: reserved <= BUDGET_BYTES, slotsThatFit: Math.floor(BUDGET_BYTES / slotBytes),
    };
  }

  // The same strings as SlotMemory.title() and .summary() in Python.
  function title(m) {
    return m.model.name + ": " + C.count(m.slots, "slot") + " × " + C.fmtInt(m.context) + " tokens = " +
      C.fmtBytes(m.reserved);
  }

  function summary(m) {
    return title(m) + ", " + (m.fits ? "within" : "over") + " the " + BUDGET_BYTES / C.GiB + " GiB budget, " +
      "which holds " + C.count(m.slotsThatFit, "such slot");
  }

  function drawPicture(m) {
    var reserved = m.reserved / C.GiB;
    var budget = BUDGET_BYTES / C.GiB;
    var max = Math.max(1.4 * budget, 1.1 * reserved);
    var x = function (gib) { return PLOT.left + (PLOT.right - PLOT.left) * gib / max; };
    var height = PLOT.top + PLOT.bar + 44;
    var svg = C.svgEl("svg", {
      class: "msm-picture", viewBox: "0 0 " + WIDTH + " " + height, width: "100%",
      role: "img", "aria-label": "reserved KV memory against the budget",
    });
    svg.appendChild(C.svgEl("text", { x: 0, y: 16, class: "msm-title" }, title(m)));
    svg.appendChild(C.svgEl("rect", {
      x: PLOT.left, y: PLOT.top, width: Math.max(1, x(reserved) - PLOT.left), height: PLOT.bar,
      class: m.fits ? "msm-bar msm-fits" : "msm-bar msm-over",
    }));
    var axisY = PLOT.top + PLOT.bar + 6;
    svg.appendChild(C.svgEl("line", { x1: PLOT.left, x2: PLOT.right, y1: axisY, y2: axisY, class: "msm-axis" }));
    C.ticks(max, 6).forEach(function (v) {
      svg.appendChild(C.svgEl("line", { x1: x(v), x2: x(v), y1: axisY, y2: axisY + 4, class: "msm-axis" }));
      svg.appendChild(C.svgEl("text", { x: x(v), y: axisY + 16, class: "msm-tick", "text-anchor": "middle" }, C.fmtInt(v)));
    });
    svg.appendChild(C.svgEl("text", { x: PLOT.right, y: axisY + 32, class: "msm-tick", "text-anchor": "end" },
      "reserved KV per GPU, fp16 (GiB)"));
    svg.appendChild(C.svgEl("line", { x1: x(budget), x2: x(budget), y1: PLOT.top - 8, y2: axisY, class: "msm-budget" }));
    svg.appendChild(C.svgEl("text", { x: x(budget) + 4, y: PLOT.top - 1, class: "msm-tick" }, "budget " + budget + " GiB"));
    return svg;
  }

  function mount(root) {
    var model = MODELS.filter(function (m) { return m.name === root.getAttribute("data-model"); })[0] || MODELS[0];
    var slots = Number(root.getAttribute("data-slots") || 4);
    var contextIndex = CONTEXTS.indexOf(Number(root.getAttribute("data-context") || 65536));
    if (!(Number.isInteger(slots) && slots >= 1 && slots <= MAX_SLOTS) || contextIndex < 0) {
      console.warn("minillm-slot-memory: data-slots must be 1 to " + MAX_SLOTS + " and data-context one of " +
        CONTEXTS.join(", "), root.dataset);
      return false;
    }
    root.textContent = "";

    var controls = C.el("div", { class: "msm-controls" });
    var modelLabel = C.el("label", {}, "model ");
    var select = C.el("select", { class: "msm-model", "aria-label": "model" });
    MODELS.forEach(function (mm) {
      var option = C.el("option", { value: mm.name }, mm.name);
      option.selected = mm === model;
      select.appendChild(option);
    });
    modelLabel.appendChild(select);
    var slotsLabel = C.el("label", {}, "slots ");
    var slotsInput = C.el("input", {
      type: "range", min: "1", max: String(MAX_SLOTS), step: "1", value: String(slots), class: "msm-slots",
      "aria-label": "slots",
    });
    var slotsOut = C.el("output", { class: "msm-readout" });
    slotsLabel.appendChild(slotsInput);
    slotsLabel.appendChild(slotsOut);
    var contextLabel = C.el("label", {}, "context ");
    var contextInput = C.el("input", {
      type: "range", min: "0", max: String(CONTEXTS.length - 1), step: "1", value: String(contextIndex),
      class: "msm-context", "aria-label": "context (tokens per slot)",
    });
    var contextOut = C.el("output", { class: "msm-readout" });
    contextLabel.appendChild(contextInput);
    contextLabel.appendChild(contextOut);
    [modelLabel, slotsLabel, contextLabel].forEach(function (node) { controls.appendChild(node); });
    var pictureBox = C.el("div", { class: "msm-picture-box" });
    var summaryLine = C.el("p", { class: "msm-summary" });
    [controls, pictureBox, summaryLine].forEach(function (node) { root.appendChild(node); });

    function render() {
      var chosen = MODELS.filter(function (mm) { return mm.name === select.value; })[0];
      var m = slotMemory(chosen, Number(slotsInput.value), CONTEXTS[Number(contextInput.value)]);
      slotsOut.textContent = String(m.slots);
      contextOut.textContent = C.fmtInt(m.context);
      contextInput.setAttribute("aria-valuetext", C.fmtInt(m.context) + " tokens");
      pictureBox.textContent = "";
      pictureBox.appendChild(drawPicture(m));
      summaryLine.textContent = summary(m);
    }

    [select, slotsInput, contextInput].forEach(function (control) {
      control.addEventListener("input", render);
      control.addEventListener("change", render);
    });
    render();
  }

  var mountAll = C.register(".minillm-slot-memory", mount);
  window.minillmSlotMemory = {
    MODELS: MODELS, CONTEXTS: CONTEXTS, MAX_SLOTS: MAX_SLOTS, BUDGET_BYTES: BUDGET_BYTES,
    slotMemory: slotMemory, title: title, summary: summary, mountAll: mountAll,
  };
})();
