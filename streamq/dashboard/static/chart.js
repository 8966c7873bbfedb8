// The topic page's chart: lag, pending, published/s and read/s over the last minutes.
// The figures are refreshed by htmx (hx-trigger="every 2s" on #live); each refresh brings
// the samples as JSON in the data-series attribute of #samples, drawn here with uPlot.
// No inline script: the Content-Security-Policy allows files from the dashboard only.
(function () {
  "use strict";
  var chart = null;
  var target = document.getElementById("chart");
  if (!target || typeof uPlot === "undefined") { return; }

  function readSamples() {
    var island = document.getElementById("samples");
    if (!island) { return null; }
    try { return JSON.parse(island.getAttribute("data-series")); } catch (e) { return null; }
  }

  function columns(s) { return [s.t, s.lag, s.pending, s.published, s.read]; }

  // The time axis spans at least the last minute up to the newest sample. uPlot alone
  // stretches a single sample (or samples all at one time) over 86400/ms seconds, i.e.
  // 1000 days with times in seconds (2027 to 2029), and hands that to this function:
  // so the span is taken from the samples' times, not from min and max.
  var MIN_SPAN = 60;  // seconds
  function timeRange(u, min, max) {
    var t = u.data[0];
    if (!t || t.length === 0) { return [min, max]; }  // no samples yet
    var first = t[0], last = t[t.length - 1];
    return last - first < MIN_SPAN ? [last - MIN_SPAN, last] : [first, last];
  }

  function options(width) {
    return {
      width: width, height: 260,
      scales: { x: { time: true, range: timeRange }, n: { auto: true }, rate: { auto: true } },
      series: [
        {},
        { label: "lag", scale: "n", stroke: "#1f6feb", width: 2 },
        { label: "pending", scale: "n", stroke: "#bf8700", width: 2 },
        { label: "published/s", scale: "rate", stroke: "#1a7f37", width: 1, dash: [6, 4] },
        { label: "read/s", scale: "rate", stroke: "#8250df", width: 1, dash: [2, 3] }
      ],
      axes: [
        {},
        { scale: "n", label: "entries" },
        { scale: "rate", side: 1, label: "per second", grid: { show: false } }
      ]
    };
  }

  function width() { return Math.max(target.clientWidth, 320); }

  function draw() {
    var samples = readSamples();
    if (!samples) { return; }
    if (chart === null) {
      chart = new uPlot(options(width()), columns(samples), target);
      target.uplot = chart;  // for a browser test to read the axes (drawn on a canvas)
      var hint = document.getElementById("chart-hint");
      if (hint) { hint.remove(); }
    } else {
      chart.setData(columns(samples));
    }
    target.setAttribute("data-points", String(samples.t.length));
  }

  draw();
  document.body.addEventListener("htmx:afterSettle", function (event) {
    if (event.target && event.target.id === "live") { draw(); }
  });
  window.addEventListener("resize", function () {
    if (chart !== null) { chart.setSize({ width: width(), height: 260 }); }
  });
})();
