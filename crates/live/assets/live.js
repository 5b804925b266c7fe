// The live page: one EventSource, the series appended as they come, three uPlot charts.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const si = (v) => v >= 1e6 ? (v / 1e6).toFixed(2) + "M" : v >= 1e4 ? (v / 1e3).toFixed(1) + "k" : Math.round(v).toString();
  const us = (v) => v >= 1e6 ? (v / 1e6).toFixed(2) + " s" : v >= 1e3 ? (v / 1e3).toFixed(2) + " ms" : v + " \u00b5s";
  const pct = (v) => (100 * v).toFixed(1) + "%";
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  let run = 0, ticks = [], seconds = [], charts = null;

  function width() { return Math.max(320, Math.min(400, (document.body.clientWidth - 40) / 3)); }
  function makeCharts() {
    const w = width(), h = 220;
    const sx = { time: false };
    const y = (v) => ({ size: 64, values: v });
    const num = (u, vs) => vs.map((x) => x == null ? "" : si(x));
    const short = (v) => v >= 1e6 ? +(v / 1e6).toPrecision(3) + "s" : v >= 1e3 ? +(v / 1e3).toPrecision(3) + "ms" : +v.toPrecision(3) + "\u00b5s";
    const lat = (u, vs) => vs.map((x) => x == null ? "" : short(x));
    const rate = new uPlot({ title: "requests/s", width: w, height: h, scales: { x: sx }, legend: { live: false }, axes: [{}, y(num)],
      series: [{ label: "s" }, { label: "all", stroke: "#4285f4" }, { label: "ok", stroke: "#34a853" }, { label: "failed", stroke: "#ea4335" }] },
      [[], [], [], []], $("chart-rate"));
    const latc = new uPlot({ title: "latency of each second (log)", width: w, height: h, scales: { x: sx, y: { distr: 3 } }, legend: { live: false }, axes: [{}, y(lat)],
      series: [{ label: "s" }, { label: "p50", stroke: "#34a853" }, { label: "p90", stroke: "#4285f4" }, { label: "p99", stroke: "#fbbc04" },
        { label: "p99.9", stroke: "#ea4335" }, { label: "max", stroke: "#777" }] },
      [[], [], [], [], [], []], $("chart-latency"));
    const gen = new uPlot({ title: "generator CPU busy, connections open", width: w, height: h, scales: { x: sx, busy: { range: [0, 1] } }, legend: { live: false },
      axes: [{}, { scale: "busy", size: 48, values: (u, v) => v.map((x) => (100 * x).toFixed(0) + "%") }, { scale: "conns", side: 1, size: 56, grid: { show: false }, values: num }],
      series: [{ label: "s" }, { label: "busy", scale: "busy", stroke: "#a142f4" }, { label: "open", scale: "conns", stroke: "#12b5cb" }] },
      [[], [], []], $("chart-gen"));
    return { rate, lat: latc, gen };
  }

  function draw() {
    if (!charts) charts = makeCharts();
    charts.rate.setData([ticks.map((t) => t.t), ticks.map((t) => t.rps), ticks.map((t) => t.ok_ps), ticks.map((t) => t.failed_ps)]);
    let k = seconds.length;
    while (k > 0 && seconds[k - 1].n === 0) k--;  // a run's empty tail is not a second of it
    const shown = seconds.slice(0, k), sx = shown.map((s) => s.i + 1);
    const nz = (v) => v > 0 ? v : null;
    charts.lat.setData([sx, shown.map((s) => nz(s.p50)), shown.map((s) => nz(s.p90)), shown.map((s) => nz(s.p99)),
      shown.map((s) => nz(s.p999)), shown.map((s) => nz(s.max))]);
    charts.gen.setData([ticks.map((t) => t.t), ticks.map((t) => t.busy), ticks.map((t) => t.open)]);
  }

  function row(tr, label, p) {
    tr.innerHTML = "<td>" + label + "</td>" + (p ? "<td>" + p.n + "</td>" + [p.p50, p.p90, p.p99, p.p999, p.max].map((v) => "<td>" + us(v) + "</td>").join("") : "");
  }

  function render(d) {
    if (d.run !== run) { run = d.run; ticks = []; seconds = []; }
    ticks.length = d.ticks_from; ticks.push(...d.ticks);
    seconds.length = d.seconds_from; seconds.push(...d.seconds);
    $("title").textContent = "qpslab live: " + d.info.kind + " " + d.info.target + (d.variant ? " \u00b7 " + d.variant + " #" + d.repeat : "");
    $("command").textContent = d.info.command;
    $("labels").textContent = "run " + d.info.run + " \u00b7 agent " + d.info.agent + " \u00b7 " + d.elapsed_s.toFixed(1) + " s measured";
    const ph = $("phase");
    ph.textContent = d.phase;
    ph.className = "phase" + (d.end ? (d.end.passed ? " ended" : " failed") : "");
    const t = d.totals, last = ticks[ticks.length - 1];
    const full = seconds.filter((s) => s.n > 0), sec = full[full.length - 1];
    $("rps").textContent = last ? si(last.rps) : "-";
    $("ok").textContent = t.ok;
    $("failed").textContent = t.failed;
    $("errors").textContent = Object.entries(t.errors).map(([k, v]) => k + " " + v).join(", ");
    $("p99-second").textContent = sec ? us(sec.p99) : "-";
    $("p99-run").textContent = d.whole.n ? us(d.whole.p99) : "-";
    $("open").textContent = t.open;
    $("reconnects").textContent = t.reconnects;
    $("lag").textContent = last && last.lag_ms != null ? last.lag_ms.toFixed(2) + " ms" : "-";
    // Open loop: whether the schedule is kept (more than 2% of the window's due requests
    // unsent is behind: the rate is then not what was asked).
    const paced = last && last.due_unsent != null;
    $("sched-card").className = "card" + (paced ? "" : " hidden") + (paced && last.behind ? " hot" : "");
    $("sched").textContent = !paced ? "-" : last.behind ? "BEHIND" : "on schedule";
    $("sched-what").textContent = !paced ? "schedule (open loop)" :
      (last.asked_ps != null ? "asked " + si(last.asked_ps) + "/s, " : "") + si(last.due_unsent) + " due unsent";
    $("busy").textContent = last && last.busy != null ? pct(last.busy) : "-";
    $("busy-card").className = "card" + (last && last.busy > 0.9 ? " hot" : "");
    // HTTP/3: the transport's datagrams each way, and the packets QUIC declared lost.
    const q = last && last.quic;
    $("quic-card").className = q ? "card" + (q.lost_packets > 0 ? " hot" : "") : "card hidden";
    $("quic").textContent = q ? si(q.datagrams_in_ps) + " / " + si(q.datagrams_out_ps) : "-";
    $("quic-what").textContent = q ? "UDP datagrams/s in / out (HTTP/3), " + q.lost_packets + " packets lost" : "";
    row($("pct-second"), "last complete second" + (sec ? " (" + (sec.i + 1) + ")" : ""), sec || null);
    row($("pct-run"), "run so far", d.whole.n ? d.whole : null);
    $("agents-box").className = d.agents.length ? "" : "hidden";
    $("agents").tBodies[0].innerHTML = d.agents.map((a) => "<tr><td>" + esc(a.host) + "</td><td>" + a.state + "</td><td>" + si(a.rps) +
      "</td><td>" + a.sent + "</td><td>" + a.completed + "</td><td>" + a.failed + "</td></tr>").join("");
    $("sweep-box").className = d.sweep.length ? "" : "hidden";
    $("sweep-count").textContent = d.sweep_runs ? "(" + d.sweep.length + " of " + d.sweep_runs + " runs)" : "";
    $("sweep").tBodies[0].innerHTML = d.sweep.map((r) => "<tr><td>" + r.run + "</td><td>" + esc(r.variant) + "</td><td>" + r.repeat + "</td><td>" + r.state +
      "</td><td>" + (r.rps != null ? si(r.rps) : "") + "</td><td>" + (r.id != null ? "run " + r.id : "") + "</td></tr>").join("");
    $("findings-box").className = d.findings.length ? "" : "hidden";
    $("findings").innerHTML = d.findings.slice().reverse().map((f) => "<li>" + (f.run ? esc(f.run) + ": " : "") + "<span class=\"sev-" + esc(f.severity) + "\">" + esc(f.severity) + "</span> <b>" + esc(f.name) + "</b>: " + esc(f.summary) + "</li>").join("");
    $("notes-box").className = d.notes.length ? "" : "hidden";
    $("notes").innerHTML = d.notes.map((n) => "<li>" + esc(n) + "</li>").join("");
    $("cpus").innerHTML = d.cpus.map((c, i) => "<div class=\"cpu\">cpu" + i + " <div class=\"bar\"><div class=\"u\" style=\"width:" + (100 * c[0]).toFixed(1) +
      "%\"></div><div class=\"s\" style=\"width:" + (100 * c[1]).toFixed(1) + "%\"></div><div class=\"q\" style=\"width:" + (100 * c[2]).toFixed(1) +
      "%\"></div></div> " + pct(c[0] + c[1] + c[2]) + "</div>").join("");
    draw();
    if (d.end) ended(d.end);
  }

  let over = false;
  function ended(end) {
    if (over) return;
    over = true;
    source.close();
    $("end").style.display = "block";
    $("summary").textContent = end.summary;
    if (!end.report) return;
    // Fetched now, kept in the page: the link works after qpslab has exited.
    fetch("/report").then((r) => r.ok ? r.blob() : null).then((b) => {
      if (!b) return;
      const a = $("report-link");
      a.href = URL.createObjectURL(b);
      a.className = "";
    }).catch(() => {});
  }

  const source = new EventSource("/events");
  source.onmessage = (e) => render(JSON.parse(e.data));
  source.onerror = () => { if (!over) $("phase").textContent = "reconnecting"; };
})();
