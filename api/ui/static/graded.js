/* Graded evaluation on a job's page (method.eval): the score of each grader against step, from the same
   event stream as the loss charts (each evaluation's metrics event carries `grader/<name>` in [0, 1],
   step 0 being the base model), and the table of the final evaluation's sample answers against the base
   model's (the `eval_samples.jsonl` artifact: one row per sample with prompt, reference, base_answer,
   answer, grades and base_grades), with a filter to the ones that changed. A job without graders shows
   neither. Model output is inserted as text only. */
"use strict";
(function () {
  const { el } = LCSB;
  const PREFIX = "grader/";
  const PROMPT_TAIL = 160;  // characters of a prompt shown collapsed: its end, where the question is

  /* scoreChart(section, div) -> {add(eventData)}: the section stays hidden until a score arrives; one
     series per grader (in the order they first appear), in percent of samples right. */
  function scoreChart(section, container) {
    const scores = new Map();  // grader name -> Map(step -> percent)
    let chart = null, names = [];
    return {
      add(d) {
        if (typeof d.step !== "number") return;
        let seen = false;
        for (const [key, value] of Object.entries(d)) {
          if (!key.startsWith(PREFIX) || typeof value !== "number") continue;
          const name = key.slice(PREFIX.length);
          if (!scores.has(name)) scores.set(name, new Map());
          scores.get(name).set(d.step, 100 * value);
          seen = true;
        }
        if (!seen) return;
        const now = Array.from(scores.keys());
        if (!chart || now.length !== names.length) {  // a new grader: a chart with one more series
          if (chart) chart.destroy();
          section.hidden = false;  // before the chart, which sizes itself to the section
          names = now;
          chart = LCSBCharts.lineChart(container, "step", names,
            { label: "% of samples right", range: [0, 100], format: (v) => v.toFixed(1) + " %" });
        }
        chart.update(names.map((n) => Array.from(scores.get(n)).sort((a, b) => a[0] - b[0])));
      },
    };
  }

  function textBlock(text) {
    if (text === null || text === undefined || text === "") return el("span", { class: "muted" }, "(empty)");
    return el("div", { class: "sample-text" }, String(text));
  }

  /* The prompt collapsed to its last PROMPT_TAIL characters (whitespace folded), the whole on opening. */
  function promptCell(prompt) {
    const text = String(prompt || "");
    const folded = text.replace(/\s+/g, " ").trim();
    const tail = folded.length > PROMPT_TAIL ? "…" + folded.slice(-PROMPT_TAIL) : folded;
    return el("details", {}, el("summary", {}, tail), el("div", { class: "sample-text" }, text));
  }

  function mark(score) {
    if (typeof score !== "number") return "–";
    return score >= 1 ? "✓" : score <= 0 ? "✗" : score.toFixed(2);
  }

  /* Whether a sample changed from the base model: another answer, or another grade. */
  function changed(row, graders) {
    if (row.answer !== row.base_answer) return true;
    const base = row.base_grades || {}, now = row.grades || {};
    return graders.some((g) => g in base && base[g] !== now[g]);
  }

  /* samplesTable(section) -> {show(rows)}: fills #samples-table, #samples-heading, #samples-count;
     #samples-changed (a checkbox) hides the rows that did not change. */
  function samplesTable(section) {
    const body = section.querySelector("#samples-table tbody");
    const only = section.querySelector("#samples-changed");
    const count = section.querySelector("#samples-count");
    let total = 0, changedCount = 0;

    function filter() {
      let shown = 0;
      for (const tr of body.rows) {
        tr.hidden = only.checked && tr.dataset.changed !== "true";
        if (!tr.hidden) shown++;
      }
      count.textContent = `${changedCount} of ${total} answers changed from the base model; showing ${shown}.`;
      section.dataset.shown = String(shown);
    }
    only.addEventListener("change", filter);

    return {
      show(rows) {
        const graders = [];
        for (const r of rows) for (const g of Object.keys(r.grades || {})) if (!graders.includes(g)) graders.push(g);
        const steps = Array.from(new Set(rows.map((r) => r.step)));
        section.querySelector("#samples-heading").textContent =
          `Sample answers: the base model against step ${steps.join(", ")}`;
        total = rows.length;
        changedCount = 0;
        body.replaceChildren(...rows.map((r) => {
          const differs = changed(r, graders);
          if (differs) changedCount++;
          return el("tr", { class: differs ? "changed" : null, dataset: { line: r.line, changed: String(differs) } },
            el("td", { class: "num" }, r.line),
            el("td", { class: "prompt" }, promptCell(r.prompt)),
            el("td", {}, textBlock(r.reference)),
            el("td", {}, textBlock(r.base_answer)),
            el("td", {}, textBlock(r.answer)),
            el("td", { class: "grades" }, ...graders.map((g) => el("div", { dataset: { grader: g } },
              `${g}: ${mark((r.base_grades || {})[g])} → ${mark((r.grades || {})[g])}`))));
        }));
        section.hidden = false;
        filter();
      },
    };
  }

  window.LCSBGraded = { scoreChart, samplesTable, changed };
})();
