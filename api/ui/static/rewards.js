/* A DPO job's reward metrics on its page, from the same event stream as the loss charts: each training
   step's metrics event carries TRL's `rewards/chosen`, `rewards/rejected`, `rewards/margins` and
   `rewards/accuracies`, each evaluation's the same under `eval_rewards/`. Two charts: the rewards (chosen,
   rejected, margins, train and eval) and the accuracy (the share of pairs whose preferred answer has the
   larger reward). A supervised job has none, and the section stays hidden. */
"use strict";
(function () {
  const KEY = /^(eval_)?rewards\/(chosen|rejected|margins|accuracies)$/;

  /* rewardCharts(section, rewardsDiv, accuracyDiv) -> {add(eventData)}: one series per key, in the order
     the keys first appear ("train margins", "eval margins", ...); accuracy in percent of pairs. */
  function rewardCharts(section, rewardsDiv, accuracyDiv) {
    const series = new Map();  // key -> Map(step -> value)
    let charts = null, keys = [];
    const label = (key) => (key.startsWith("eval_") ? "eval " : "train ") + key.slice(key.indexOf("/") + 1);
    return {
      add(d) {
        if (typeof d.step !== "number") return;
        let seen = false;
        for (const [key, value] of Object.entries(d)) {
          if (!KEY.test(key) || typeof value !== "number") continue;
          if (!series.has(key)) series.set(key, new Map());
          series.get(key).set(d.step, key.endsWith("/accuracies") ? 100 * value : value);
          seen = true;
        }
        if (!seen) return;
        const now = Array.from(series.keys());
        if (!charts || now.length !== keys.length) {  // a new series: charts with one more line
          if (charts) { charts.rewards.destroy(); charts.accuracy.destroy(); }
          section.hidden = false;  // before the charts, which size themselves to the section
          keys = now;
          const acc = keys.filter((k) => k.endsWith("/accuracies")), rew = keys.filter((k) => !k.endsWith("/accuracies"));
          charts = {
            rew: rew, acc: acc,
            rewards: LCSBCharts.lineChart(rewardsDiv, "step", rew.map(label), { label: "reward (nats x beta)" }),
            accuracy: LCSBCharts.lineChart(accuracyDiv, "step", acc.map(label),
              { label: "% of pairs", range: [0, 100], format: (v) => v.toFixed(1) + " %" }),
          };
        }
        const points = (k) => Array.from(series.get(k)).sort((a, b) => a[0] - b[0]);
        charts.rewards.update(charts.rew.map(points));
        charts.accuracy.update(charts.acc.map(points));
      },
    };
  }

  window.LCSBRewards = { rewardCharts };
})();
