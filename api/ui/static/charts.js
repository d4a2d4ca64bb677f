/* Charts: uPlot line charts (several series over one x axis, gaps where a series has no point) and
   the layer x step selection heatmap on a canvas. */
"use strict";
(function () {
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

  /* lineChart(div, "step", ["train loss", "eval loss"]) -> {update(points)}, points[i] = [[x, y], ...].
     `y`: {label (default "loss"), range ([min, max] fixed; default fitted to the data), format (a value
     -> the legend's text)}. The uPlot instance is also `div.uplot` (tests read the drawn values). */
  function lineChart(container, xLabel, names, y) {
    const width = Math.max(320, container.clientWidth || 440);
    const yOpts = y || {};
    const opts = {
      width: width, height: 240,
      scales: { x: { time: false }, y: yOpts.range ? { range: yOpts.range } : {} },
      axes: [{ label: xLabel }, { label: yOpts.label || "loss" }],
      series: [{ label: xLabel }].concat(names.map((name, i) => ({
        label: name, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true,
        points: { show: true, size: 4 },
        ...(yOpts.format ? { value: (u, v) => (v === null || v === undefined ? "--" : yOpts.format(v)) } : {}),
      }))),
    };
    const plot = new uPlot(opts, [[]].concat(names.map(() => [])), container);
    container.uplot = plot;
    let pending = null;
    return {
      plot: plot,
      destroy() {
        clearTimeout(this.timer);
        plot.destroy();
        container.uplot = null;
      },
      update(points) {
        pending = points;
        if (this.timer) return;
        this.timer = setTimeout(() => {
          this.timer = null;
          this.now(pending);
        }, 200);
      },
      now(points) {
        plot.setData(align(points));
        container.dataset.points = points.map((p) => p.length).join(",");  // per series, for tests
      },
    };
  }

  /* [[x, y], ...] per series -> uPlot's [xs, ys1, ys2, ...] over the union of xs (null: no point). */
  function align(points) {
    const xs = Array.from(new Set(points.flat().map((p) => p[0]))).sort((a, b) => a - b);
    const index = new Map(xs.map((x, i) => [x, i]));
    const ys = points.map((series) => {
      const col = new Array(xs.length).fill(null);
      for (const [x, y] of series) col[index.get(x)] = y;
      return col;
    });
    return [xs].concat(ys);
  }

  /* heatmap(canvas): add(step, layers) for each step's selected layers; draws layer (y, last on top)
     by step (x, from 1 as the events count); cells shrink to fit the planned step count. */
  function heatmap(canvas, caption) {
    const ctx = canvas.getContext("2d");
    const state = { layers: 0, steps: 0, columns: new Map(), filled: 0, norms: null, maxNorm: 0 };
    const PAD_LEFT = 34, PAD_BOTTOM = 18;

    function draw() {
      const W = canvas.width, H = canvas.height;
      ctx.clearRect(0, 0, W, H);
      ctx.fillStyle = "#f4f4f6";
      ctx.fillRect(PAD_LEFT, 0, W - PAD_LEFT, H - PAD_BOTTOM);
      const layers = Math.max(state.layers, 1);
      const maxStep = Math.max(state.steps, ...state.columns.keys(), 1);
      const cw = (W - PAD_LEFT) / maxStep, ch = (H - PAD_BOTTOM) / layers;
      for (const [step, selected] of state.columns) {
        const norms = state.norms && state.norms.get(step);
        for (const layer of selected) {
          const y = (layers - 1 - layer) * ch;
          const g = norms ? norms[layer] : null;  // shade by gradient norm once the history is read
          ctx.fillStyle = typeof g === "number" && state.maxNorm > 0
            ? `rgba(59, 111, 212, ${(0.15 + 0.85 * g / state.maxNorm).toFixed(3)})` : "#3b6fd4";
          ctx.fillRect(PAD_LEFT + (step - 1) * cw, y, Math.max(cw - (cw > 3 ? 1 : 0), 1), Math.max(ch - 1, 1));
        }
      }
      ctx.fillStyle = "#333";
      ctx.font = "11px sans-serif";
      ctx.textBaseline = "middle";
      for (const layer of [0, layers - 1]) ctx.fillText("L" + layer, 2, (layers - 1 - layer + 0.5) * ch);
      ctx.textBaseline = "alphabetic";
      ctx.fillText("step 1", PAD_LEFT, H - 4);
      ctx.fillText(String(maxStep), W - 30, H - 4);
      canvas.dataset.filled = String(state.filled);
      canvas.dataset.steps = String(state.columns.size);
      if (caption) {
        caption.textContent = `${state.columns.size} steps, ${state.layers} layers.` + (state.norms
          ? ` Shaded by each trained layer's LoRA gradient norm (selection_history.jsonl; darkest ${state.maxNorm.toPrecision(3)}).` : "");
      }
      if (state.norms) canvas.dataset.shaded = String(state.norms.size);
    }

    let timer = null;
    function later() { if (!timer) timer = setTimeout(() => { timer = null; draw(); }, 200); }
    return {
      setShape(layers, steps) {
        if (layers) state.layers = Math.max(state.layers, layers);
        if (steps) state.steps = Math.max(state.steps, steps);
        later();
      },
      add(step, selected) {
        if (state.columns.has(step)) return;
        state.columns.set(step, selected);
        state.filled += selected.length;
        state.layers = Math.max(state.layers, ...selected.map((l) => l + 1));
        later();
      },
      /* rows of selection_history.jsonl ({step from 0, selected, grad_norm per layer}). */
      shade(rows) {
        state.norms = new Map();
        for (const row of rows) {
          const step = row.step + 1;  // the history counts from 0, the events from 1
          if (!state.columns.has(step)) { state.columns.set(step, row.selected); state.filled += row.selected.length; }
          state.norms.set(step, row.grad_norm || []);
          for (const g of row.grad_norm || []) if (typeof g === "number") state.maxNorm = Math.max(state.maxNorm, g);
        }
        draw();
      },
      draw: draw,
    };
  }

  window.LCSBCharts = { lineChart, align, heatmap, COLORS };
})();
