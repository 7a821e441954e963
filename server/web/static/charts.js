// hiveboard charts: draws each <canvas data-chart> with the vendored Chart.js (VENDOR.md). The server
// writes the numbers (server/web/charts.py, the Spec model); without this script its table is the chart.
(function () {
  "use strict";
  if (window.hiveCharts || !window.Chart) return;  // once per page, and only with Chart.js loaded
  const Chart = window.Chart;
  const css = getComputedStyle(document.documentElement);
  const color = (name, fallback) => (css.getPropertyValue(name) || fallback).trim();
  const accent = color("--accent", "#2f6fde"), mute = color("--mute", "#6b7385"), ink = color("--ink", "#1d2330");
  Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
  Chart.defaults.font.size = 12;
  Chart.defaults.color = mute;
  Chart.defaults.borderColor = color("--line", "#dde1e8");

  const userOpen = {};  // the tables a person opened stay open when a live update redraws the page
  document.addEventListener("toggle", e => {
    const fig = e.target.closest && e.target.closest("figure.chart[data-key]");
    if (fig && e.target.matches("details.data")) userOpen[fig.dataset.key] = e.target.open;
  }, true);

  function shown(spec, v) {
    if (v === null || v === undefined) return "—";
    return (spec.unit === "%" ? Math.round(v) : Number(v.toFixed(2))) + spec.unit;  // as the table shows it
  }

  // each bar's or point's value written beside it: the chart reads without hovering
  const values = {
    id: "hiveValues",
    afterDatasetsDraw(chart, _args, opts) {
      const { ctx } = chart;
      const meta = chart.getDatasetMeta(0);
      ctx.save();
      ctx.fillStyle = ink;
      ctx.font = "600 12px " + Chart.defaults.font.family;
      meta.data.forEach((el, i) => {
        const v = chart.data.datasets[0].data[i];
        if (v === null || v === undefined) return;
        const text = shown(opts.spec, v);
        if (opts.spec.horizontal) {
          ctx.textAlign = "left"; ctx.textBaseline = "middle";
          ctx.fillText(text, el.x + 5, el.y);
        } else {
          ctx.textAlign = "center"; ctx.textBaseline = "bottom";
          ctx.fillText(text, el.x, el.y - (opts.spec.kind === "line" ? 7 : 3));
        }
      });
      ctx.restore();
    },
  };

  function draw(canvas) {
    const spec = JSON.parse(canvas.dataset.chart);
    const plot = canvas.closest(".plot[data-rows]");
    if (plot) plot.style.setProperty("--rows", plot.dataset.rows);  // not a style attribute: the CSP refuses those
    const across = spec.horizontal ? "y" : "x", up = spec.horizontal ? "x" : "y";
    const chart = new Chart(canvas, {
      type: spec.kind,
      data: {
        labels: spec.labels,
        datasets: [{
          label: spec.y, data: spec.values, backgroundColor: accent, borderColor: accent,
          borderRadius: 3, maxBarThickness: 56, pointRadius: 4, pointHoverRadius: 6, borderWidth: spec.kind === "line" ? 2 : 0,
        }],
      },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, indexAxis: across,
        layout: { padding: spec.horizontal ? { right: 44 } : { top: 20 } },
        plugins: {
          legend: { display: false },
          tooltip: { callbacks: { label: item => spec.y + ": " + shown(spec, item.parsed[up]) } },
          hiveValues: { spec: spec },
        },
        scales: {
          [across]: {
            title: { display: !!spec.x, text: spec.x }, grid: { display: false },
            ticks: { autoSkip: true, maxRotation: 0, color: ink },
            offset: true,
          },
          [up]: {
            beginAtZero: true, max: spec.top === null ? undefined : spec.top,
            title: { display: true, text: spec.y },
            ticks: { precision: spec.whole ? 0 : undefined, callback: v => shown(spec, v), maxTicksLimit: 6 },
          },
        },
      },
      plugins: [values],
    });
    canvas.dataset.drawn = "1";
    const fig = canvas.closest("figure.chart");
    const table = fig && fig.querySelector("details.data");
    if (table) table.open = !!userOpen[fig.dataset.key];
    return chart;
  }

  const drawn = [];
  function drawAll(root) {
    for (let i = drawn.length - 1; i >= 0; i--) {  // charts whose canvas a live update replaced
      if (!drawn[i].canvas.isConnected) drawn.splice(i, 1)[0].destroy();
    }
    for (const canvas of root.querySelectorAll("canvas[data-chart]:not([data-drawn])")) {
      try { drawn.push(draw(canvas)); } catch (err) { console.error("hiveboard chart", err); }  // its table stays open
    }
  }

  window.hiveCharts = { drawAll };
  drawAll(document);
  // live updates replace the page's main part (app.js): draw the charts that arrive with it
  const main = document.getElementById("main");
  if (main) new MutationObserver(() => drawAll(main)).observe(main, { childList: true, subtree: true });
})();
