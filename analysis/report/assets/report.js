"use strict";
// The report page: everything it shows comes from the JSON in #data.
(function () {
  var errors = [];
  window.addEventListener("error", function (e) { errors.push(String(e.message || e)); });

  var D = JSON.parse(document.getElementById("data").textContent);
  var COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#e15759", "#bab0ac"];
  var STATE = ["active", "free, stranded", "free, releasable"];
  var STATE_COLOR = ["#4e79a7", "#e15759", "#c9ced4"];
  var $ = function (id) { return document.getElementById(id); };

  function fmtBytes(n) {
    var a = Math.abs(n);
    if (a >= 1 << 30) return (n / (1 << 30)).toFixed(2) + " GiB";
    if (a >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
    if (a >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
    return n + " B";
  }
  function pow2(k) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (k >= 10 && i < u.length - 1) { k -= 10; i++; }
    return Math.pow(2, k) + " " + u[i];
  }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text != null) e.textContent = text;
    return e;
  }
  function fmtCount(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }

  // Header.
  function header() {
    var t = D.trace;
    $("trace-name").textContent = t.name || "(unnamed trace)";
    document.title = "fragsim report: " + (t.name || "trace");
    $("trace-meta").textContent = [t.gpu || "unknown GPU", "PyTorch " + (t.torch || "unknown"), t.date || "unknown date",
      fmtCount(t.events) + " events", t.duration_s.toFixed(1) + " s"].concat(t.alloc_conf ? ["PYTORCH_CUDA_ALLOC_CONF=" + t.alloc_conf] : []).join(" · ");
    var r = D.recommendation;
    $("rec-line").textContent = r.line;
    $("rec-saving").textContent = r.saving || "";
    $("rec-why").textContent = r.why || "";
    var k = $("rec-kind");
    k.textContent = r.exact ? "exact replay of PyTorch's allocator" : "modelled policy";
    if (!r.exact) k.className = "badge model";
    if (D.truncated) { $("truncated").hidden = false; $("truncated").textContent = "Trace cut short: " + D.truncated + " (the figures cover the events before the cut)."; }
  }

  // The moment shown by the segment map, the histogram and the timeline's marker.
  var selected = D.selected || 0;
  var listeners = [];
  function select(i) {
    if (!D.layouts.length) return;
    selected = Math.max(0, Math.min(D.layouts.length - 1, i));
    listeners.forEach(function (f) { f(); });
  }
  function nearestLayout(t) {
    var best = 0, bd = Infinity;
    D.layouts.forEach(function (l, i) { var d = Math.abs(l.t_s - t); if (d < bd) { bd = d; best = i; } });
    return best;
  }

  // Timeline.
  var plot = null;
  function timeline() {
    var box = $("timeline");
    var data = [D.timeline.t], series = [{ label: "time (s)" }];
    // A run whose peak is far above the others' would squash them on one
    // axis: it starts hidden, and its legend entry shows it.
    var peaks = D.timeline.runs.map(function (r) { return Math.max.apply(null, r.reserved); });
    var sorted = peaks.slice().sort(function (a, b) { return a - b; }), median = sorted[Math.floor((sorted.length - 1) / 2)];
    var hidden = [];
    D.timeline.runs.forEach(function (r, i) {
      var c = COLORS[i % COLORS.length];
      var main = r.label === D.policy, rec = r.label === D.recommendation.label;
      var outlier = peaks[i] > 1.3 * median && !rec && !main;
      if (outlier) hidden.push(r.label + " (peak " + peaks[i].toFixed(2) + " GiB)");
      // Setting variants start hidden, but for the recommended one.
      var show = !outlier && (!r.setting || rec);
      data.push(r.reserved); series.push({ label: r.label + (r.setting ? "" : " reserved"), stroke: c, width: rec ? 2 : 1.5, show: show, value: gib, run: r });
      if (r.active) { data.push(r.active); series.push({ label: r.label + " active", stroke: c, width: 1, dash: [6, 4], show: main, value: gib, run: r }); }
    });
    if (D.timeline.runs.length) {
      data.push(D.timeline.runs[0].requested);
      series.push({ label: "requested", stroke: "#1d232a", width: 1, dash: [2, 3], show: true, value: gib });
    }
    function gib(u, v) { return v == null ? "-" : v.toFixed(3) + " GiB"; }
    // Memory holds its value between events: draw steps, not ramps.
    var step = uPlot.paths && uPlot.paths.stepped ? uPlot.paths.stepped({ align: 1 }) : null;
    if (step) series.forEach(function (s, i) { if (i > 0) s.paths = step; });
    var downX = 0;
    var opts = {
      width: box.clientWidth || 1100, height: 340,
      scales: { x: { time: false } },
      series: series,
      axes: [{ label: "seconds since the first event" }, { label: "GiB", size: 60 }],
      cursor: { drag: { x: true, y: false } },
      legend: { show: false },
      hooks: {
        draw: [function (u) {
          var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
          ctx.save();
          D.layouts.forEach(function (l, i) {
            var x = Math.round(u.valToPos(l.t_s, "x", true));
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
            ctx.fillStyle = i === selected ? "#e15759" : "#8a939c";
            ctx.fillRect(x - 1, top, 2, i === selected ? h : 6 * devicePixelRatio);
          });
          ctx.restore();
        }],
        ready: [function (u) {
          u.over.addEventListener("mousedown", function (e) { downX = e.clientX; });
          u.over.addEventListener("click", function (e) {
            if (Math.abs(e.clientX - downX) > 3) return;
            select(nearestLayout(u.posToVal(e.offsetX, "x")));
          });
        }]
      }
    };
    opts.hooks.setCursor = [function (u) { readout(u); }];
    plot = new uPlot(opts, data, box);
    legend(series);
    var notes = ["Setting variants (" + D.timeline.runs.filter(function (r) { return r.setting; }).length + ") start hidden but for the recommended one; their legend entries show them."];
    if (hidden.length) notes.push("Hidden at first, as its peak would squash the others: " + hidden.join(", ") + ".");
    $("tl-note").textContent = notes.join(" ");
    listeners.push(function () { plot.redraw(false, false); });
    window.addEventListener("resize", function () { plot.setSize({ width: box.clientWidth, height: 340 }); });
  }

  // The timeline's legend: a checkbox per line, the setting variants
  // folded away; and a readout of the shown lines at the cursor.
  function legend(series) {
    var box = $("tl-legend"), more = el("details"), n = 0;
    more.appendChild(el("summary", null, ""));
    series.forEach(function (s, i) {
      if (i === 0) return;
      var run = s.run;
      var lab = el("label", { "class": "lg" }), cb = el("input", { type: "checkbox" });
      cb.checked = s.show;
      cb.addEventListener("change", function () { plot.setSeries(i, { show: cb.checked }); });
      var sw = el("i", { "class": "line" });
      sw.style.borderTop = (s.dash ? (s.dash[0] > 3 ? "2px dashed " : "2px dotted ") : "3px solid ") + s.stroke;
      lab.appendChild(cb); lab.appendChild(sw); lab.appendChild(document.createTextNode(s.label));
      if (run && run.setting && run.label !== D.recommendation.label) { more.appendChild(lab); n++; } else box.appendChild(lab);
    });
    if (n) { more.firstChild.textContent = n + " setting variants"; box.appendChild(more); }
  }
  function readout(u) {
    var i = u.cursor.idx, out = $("tl-readout");
    if (i == null) { out.textContent = ""; return; }
    var parts = [];
    u.series.forEach(function (s, k) {
      if (k === 0 || !s.show) return;
      var v = u.data[k][i];
      if (v != null) parts.push(s.label + " " + v.toFixed(3));
    });
    out.textContent = "t = " + u.data[0][i].toFixed(2) + " s (GiB): " + parts.join(" · ");
  }

  // A private pool's colour in the segment map, from its ID.
  var POOL_COLORS = ["#7b4fc9", "#c94f8a", "#2f8f9d", "#b8860b", "#5a7d2a", "#a0522d", "#4169e1", "#8b3a3a"];
  function poolColor(id) { return POOL_COLORS[id % POOL_COLORS.length]; }

  // Segment map: a row per segment, its blocks in address order (the
  // default pool's first, then each private pool's).
  var ROW = 16, LABEL = 190, hits = [];
  function segmentMap() {
    var cv = $("map"), sel = $("moment");
    D.layouts.forEach(function (l, i) {
      sel.appendChild(el("option", { value: i }, "event " + fmtCount(l.index) + " at " + l.t_s.toFixed(2) + " s" + (l.what ? " (" + l.what + ")" : "")));
    });
    sel.addEventListener("change", function () { select(+sel.value); });
    $("prev").addEventListener("click", function () { select(selected - 1); });
    $("next").addEventListener("click", function () { select(selected + 1); });
    $("map-policy").textContent = D.policy;
    function draw() {
      var l = D.layouts[selected];
      sel.value = selected;
      hits = [];
      if (!l) { $("map-summary").textContent = "This policy cannot list its segments."; return; }
      var segs = l.segments || [];
      $("map-when").textContent = "at event " + fmtCount(l.index) + ", " + l.t_s.toFixed(2) + " s" + (l.what ? " (" + l.what + ")" : "");
      $("map-summary").textContent = "reserved " + fmtBytes(l.reserved) + ", active " + fmtBytes(l.active) +
        ", free stranded " + fmtBytes(l.stranded) + ", free releasable " + fmtBytes(l.releasable) + "; " +
        segs.length + " segments, largest first" +
        (l.more_segments ? "; " + l.more_segments + " smaller segments (" + fmtBytes(l.more_bytes) + ") not drawn" : "") + ".";
      var dpr = window.devicePixelRatio || 1;
      var w = cv.parentElement.clientWidth || 1100, h = Math.max(ROW, segs.length * ROW);
      cv.width = w * dpr; cv.height = h * dpr; cv.style.height = h + "px";
      var ctx = cv.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, h);
      ctx.font = "11px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      var bw = w - LABEL - 8;
      if (!segs.length) { ctx.fillStyle = "#3d4750"; ctx.fillText("no segments at this moment: nothing reserved", 6, ROW / 2); }
      segs.forEach(function (s, r) {
        var y = r * ROW;
        if (s.pool_id) { // a private pool's rows: tinted, with the pool's colour at the left
          ctx.fillStyle = "#f3eefb"; ctx.fillRect(0, y, w, ROW);
          ctx.fillStyle = poolColor(s.pool_id); ctx.fillRect(0, y + 1, 3, ROW - 2);
        }
        ctx.fillStyle = "#3d4750";
        ctx.fillText(fmtBytes(s.size) + "  " + (s.pool_tag ? s.pool_tag + " " : "") + (s.pool || "") +
          (s.pool_tag ? "" : "  stream " + s.stream), 6, y + ROW / 2);
        var x = LABEL, off = 0;
        (s.blocks || []).forEach(function (b) {
          var x0 = LABEL + bw * off / s.size, x1 = LABEL + bw * (off + b[0]) / s.size;
          off += b[0];
          ctx.fillStyle = STATE_COLOR[b[1]];
          ctx.fillRect(x0, y + 2, Math.max(1, x1 - x0 - (x1 - x0 > 3 ? 1 : 0)), ROW - 4);
          hits.push({ x0: x0, x1: x1, y: y, seg: s, b: b });
          x = x1;
        });
      });
    }
    listeners.push(draw);
    var tip = $("tip");
    cv.addEventListener("mousemove", function (e) {
      var rc = cv.getBoundingClientRect(), x = e.clientX - rc.left, y = e.clientY - rc.top, hit = null;
      for (var i = 0; i < hits.length; i++) {
        var h = hits[i];
        if (y >= h.y && y < h.y + ROW && x >= h.x0 && x < Math.max(h.x1, h.x0 + 1)) { hit = h; break; }
      }
      if (!hit) { tip.hidden = true; return; }
      var b = hit.b, lines = [STATE[b[1]] + ": " + fmtBytes(b[0]) + (b[4] > 1 ? " in " + b[4] + " blocks" : "")];
      if (b[1] === 0 && b[2] > 0) lines.push("requested " + fmtBytes(b[2]));
      lines.push("segment " + fmtBytes(hit.seg.size) + " at 0x" + hit.seg.addr.toString(16) + ", stream " + hit.seg.stream +
        ", " + (hit.seg.pool_tag ? "private pool " + hit.seg.pool_tag : "default pool"));
      if (b[3] >= 0) lines.push("\n" + D.stacks[b[3]]);
      tip.textContent = lines.join("\n");
      tip.style.left = Math.min(e.clientX + 14, window.innerWidth - 540) + "px";
      tip.style.top = (e.clientY + 14) + "px";
      tip.hidden = false;
    });
    cv.addEventListener("mouseleave", function () { tip.hidden = true; });
    window.addEventListener("resize", draw);
  }

  // Free-block histogram of the selected moment, in bytes.
  function histogram() {
    var cv = $("hist");
    function draw() {
      var l = D.layouts[selected], dpr = window.devicePixelRatio || 1;
      var w = cv.clientWidth || 560, h = cv.clientHeight || 260;
      cv.width = w * dpr; cv.height = h * dpr;
      var ctx = cv.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, h);
      ctx.font = "11px system-ui, sans-serif";
      var bins = (l && l.hist) || [];
      var L = 62, B = 36, T = 22, pw = w - L - 10, ph = h - B - T;
      var max = 0;
      bins.forEach(function (b) { max = Math.max(max, b.stranded, b.releasable); });
      ctx.strokeStyle = "#9aa3ab"; ctx.beginPath(); ctx.moveTo(L, T); ctx.lineTo(L, T + ph); ctx.lineTo(L + pw, T + ph); ctx.stroke();
      ctx.fillStyle = "#3d4750";
      if (!bins.length) { ctx.fillText("no free blocks at this moment", L + 10, T + ph / 2); return; }
      for (var g = 0; g <= 4; g++) {
        var v = max * g / 4, y = T + ph - ph * g / 4;
        ctx.textAlign = "right"; ctx.textBaseline = "middle";
        ctx.fillText(fmtBytes(Math.round(v)), L - 4, y);
        ctx.strokeStyle = "#eceef1"; if (g) { ctx.beginPath(); ctx.moveTo(L + 1, y); ctx.lineTo(L + pw, y); ctx.stroke(); }
      }
      var cw = pw / bins.length;
      bins.forEach(function (b, i) {
        var x = L + i * cw, bw = Math.max(1, cw * 0.38);
        [[b.stranded, STATE_COLOR[1]], [b.releasable, STATE_COLOR[2]]].forEach(function (p, j) {
          var bh = max ? ph * p[0] / max : 0;
          ctx.fillStyle = p[1];
          ctx.fillRect(x + cw * 0.1 + j * bw, T + ph - bh, bw, bh);
        });
        ctx.fillStyle = "#3d4750"; ctx.textAlign = "center"; ctx.textBaseline = "top";
        if (bins.length <= 14 || i % 2 === 0) ctx.fillText("≥" + pow2(b.log2), x + cw / 2, T + ph + 4);
      });
      ctx.textAlign = "left"; ctx.textBaseline = "top";
      ctx.fillStyle = STATE_COLOR[1]; ctx.fillRect(L + 8, 4, 10, 10);
      ctx.fillStyle = "#3d4750"; ctx.fillText("stranded " + fmtBytes(l.stranded), L + 22, 4);
      ctx.fillStyle = STATE_COLOR[2]; ctx.fillRect(L + 170, 4, 10, 10);
      ctx.fillStyle = "#3d4750"; ctx.fillText("releasable " + fmtBytes(l.releasable), L + 184, 4);
      ctx.textAlign = "center"; ctx.fillText("free block size", L + pw / 2, h - 14);
    }
    listeners.push(draw);
    window.addEventListener("resize", draw);
  }

  // Where the stranded bytes come from: one table per key.
  function breakdowns() {
    var tabs = $("bd-tabs"), box = $("bd");
    if (!D.breakdowns || !D.breakdowns.length) { box.textContent = "No split segment holds stranded bytes under " + D.policy + "."; return; }
    var buttons = [];
    function show(k) {
      buttons.forEach(function (b, i) { b.className = i === k ? "on" : ""; });
      var bd = D.breakdowns[k];
      box.textContent = "";
      box.appendChild(el("div", { "class": "small" }, fmtBytes(bd.stranded_bytes) + " stranded in " + bd.split_segments +
        " split segments at event " + fmtCount(bd.moment.index) + " (" + bd.moment.t_s.toFixed(2) + " s)"));
      [["by request size", bd.by_size], ["by stream", bd.by_stream], ["by agent or model", bd.by_marker], ["by call stack", bd.by_stack], ["by pool", bd.by_pool]].forEach(function (p) {
        if (!p[1] || !p[1].length) return;
        var d = el("div", { "class": "bdt" });
        d.appendChild(el("h3", null, p[0]));
        var t = el("table");
        p[1].forEach(function (s) {
          var tr = el("tr");
          tr.appendChild(el("td", { "class": "k" }, s.key));
          tr.appendChild(el("td", null, fmtBytes(s.stranded_bytes)));
          tr.appendChild(el("td", null, s.pct.toFixed(1) + "%"));
          var bc = el("td", { style: "width:120px" }), bar = el("div", { "class": "bar" });
          bar.style.width = Math.max(1, s.pct) + "%";
          bc.appendChild(bar); tr.appendChild(bc);
          t.appendChild(tr);
        });
        d.appendChild(t);
        box.appendChild(d);
      });
    }
    D.breakdowns.forEach(function (bd, i) {
      var b = el("button", { type: "button" }, "at " + bd.what);
      b.addEventListener("click", function () { show(i); });
      buttons.push(b); tabs.appendChild(b);
    });
    show(D.breakdowns.length > 1 ? 1 : 0);
  }

  // Memory by pool at peak reserved, with what leaving each private pool
  // out would save (an estimate).
  function pools() {
    if (!D.pools || !D.pools.length) return;
    var box = $("bd"), d = el("div", { "class": "bdt" }), t = el("table"), priv = 0, peak = 0;
    d.appendChild(el("h3", null, "Memory by pool at peak reserved"));
    var tr = el("tr");
    ["pool", "reserved", "active", "stranded", "own peak", "without it (estimate)"].forEach(function (c, i) { tr.appendChild(el("th", i ? null : { "class": "l" }, c)); });
    t.appendChild(tr);
    D.pools.forEach(function (p) {
      peak += p.reserved_at_peak_bytes;
      if (p.id) priv += p.reserved_at_peak_bytes;
      var row = el("tr");
      var without = !p.id ? "" : p.without_error ? "failed: " + p.without_error :
        p.without_peak_reserved_bytes ? fmtBytes(p.without_peak_reserved_bytes) + ", " + (p.saved_bytes < 0 ? "adds " + fmtBytes(-p.saved_bytes) : "saves " + fmtBytes(p.saved_bytes || 0)) : "";
      [p.tag, fmtBytes(p.reserved_at_peak_bytes), fmtBytes(p.active_at_peak_bytes), fmtBytes(p.stranded_at_peak_bytes),
        fmtBytes(p.peak_reserved_bytes), without].forEach(function (c, i) { row.appendChild(el("td", i ? null : { "class": "k", title: p.label }, c)); });
      t.appendChild(row);
    });
    d.appendChild(t);
    d.appendChild(el("div", { "class": "small" }, "The private pools (CUDA graphs, MemPools) hold " + fmtBytes(priv) + " of the " +
      fmtBytes(peak) + " reserved at the peak. Without it: the peak reserved had the pool's captures not happened; an estimate, " +
      "since the dropped graph's replays would then run eagerly and allocate as eager passes do."));
    box.parentElement.appendChild(d);
  }

  // Policies and settings, in the decision's order.
  function runs() {
    var t = $("runs");
    var cols = ["", "peak reserved", "at_peak_pct", "time_weighted_pct", "stranded at peak", "device calls", "OOMs", "kind", "how to get it", "note"];
    var tr = el("tr");
    cols.forEach(function (c, i) { tr.appendChild(el("th", i >= 7 ? { "class": "l" } : null, c)); });
    t.appendChild(tr);
    D.runs.forEach(function (r) {
      var row = el("tr", { "class": r.recommended || r.label === D.recommendation.label ? "best" : (r.limit ? "limit" : "") });
      var kind = r.limit ? "physical limit" : (r.exact ? "exact" : "model ±" + (r.error_pct || 0).toFixed(1) + "%");
      var cells = r.error ? [r.label, "failed: " + r.error] : [r.label, fmtBytes(r.peak_reserved), r.at_peak_pct.toFixed(1) + "%",
        r.time_weighted_pct.toFixed(1) + "%", fmtBytes(r.stranded_at_peak), fmtCount(r.device_calls), fmtCount(r.ooms),
        kind, r.apply, [r.recommended ? "recommended" : "", r.excluded || "", r.note || ""].filter(Boolean).join("; ")];
      cells.forEach(function (c, i) { row.appendChild(el("td", i >= 7 ? { "class": "l" } : null, c)); });
      t.appendChild(row);
    });
    $("fidelity").textContent = D.fidelity;
    $("silent").textContent = D.silent;
    $("verdict").textContent = (D.verdict || []).join("\n");
  }

  // #selftest: checks the page drew and reacts, and writes the results in #selftest.
  function canvasInk(cv) {
    if (!cv.width || !cv.height) return 0;
    var px = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data, n = 0;
    for (var i = 3; i < px.length; i += 4) if (px[i]) n++;
    return n;
  }
  function selftest() {
    var res = { errors: errors, canvases: [], recommendation: $("rec-line").textContent, layouts: D.layouts.length };
    document.querySelectorAll("canvas").forEach(function (cv) {
      res.canvases.push({ id: cv.id || cv.className, ink: canvasInk(cv) });
    });
    // Hover the first block drawn: its tooltip shows.
    var h = hits[0], rc = $("map").getBoundingClientRect();
    if (h) {
      $("map").dispatchEvent(new MouseEvent("mousemove", { clientX: rc.left + (h.x0 + h.x1) / 2, clientY: rc.top + h.y + ROW / 2 }));
      res.tooltip = $("tip").hidden ? "" : $("tip").textContent;
    }
    var before = $("map").toDataURL(), beforeSummary = $("map-summary").textContent, was = selected;
    select(selected === 0 ? D.layouts.length - 1 : 0);
    res.selectedFrom = was; res.selectedTo = selected;
    res.mapChanged = $("map").toDataURL() !== before && $("map-summary").textContent !== beforeSummary;
    // Draw every moment: one with no segments too.
    res.emptyDrawn = 0;
    try {
      D.layouts.forEach(function (l, i) {
        select(i);
        if (!(l.segments || []).length && canvasInk($("map")) > 0 && /^reserved .* 0 segments/.test($("map-summary").textContent)) res.emptyDrawn++;
      });
    } catch (e) {
      errors.push(String(e && e.stack || e));
    }
    select(was);
    var out = $("selftest");
    out.textContent = JSON.stringify(res);
    out.hidden = false;
  }

  try {
    header(); timeline(); segmentMap(); histogram(); breakdowns(); pools(); runs();
    select(selected);
  } catch (e) {
    errors.push(String(e && e.stack || e));
  }
  // uPlot draws on the next frame: check once it has.
  if (location.hash === "#selftest") setTimeout(selftest, 300);
})();
