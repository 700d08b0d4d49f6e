// Sluice inspector page: draws the pipeline from api/graph, updates it from
// the api/events stream, and pages the dead letters from api/deadletters.
// Hand-written, no dependencies; every URL is relative so that the page
// works wherever the program mounts the handler.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const W = 230, H = 84, GX = 16, GY = 34, PAD = 12, SPARK = 60;
  // The layers as a dead letter's history names them (resilience.RetryKind's text).
  const LAYERS = { item_retry: "item retry", node_restart: "node restart", node_retry: "node retry" };
  // state.reason of the group of the reasons past those kept apart.
  const OTHER = {};
  const state = { graph: null, boxes: {}, hist: {}, ticks: 0, reason: null, offset: 0, limit: 50, lastDead: -1, running: false };
  const $ = (id) => document.getElementById(id);

  function el(name, attrs, parent) {
    const e = document.createElementNS(SVG, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, cls, s) {
    const t = el("text", { x: x, y: y, class: cls }, parent);
    t.textContent = s;
    return t;
  }
  function fmtRate(r) { return r >= 100 ? Math.round(r) + "/s" : r.toFixed(1) + "/s"; }

  // layout puts each node in the row of its longest path from a source,
  // top to bottom, side by side with the others of its row.
  function layout(g) {
    const depth = g.nodes.map(() => 0);
    for (let pass = 0; pass < g.nodes.length; pass++) {
      let changed = false;
      for (const e of g.edges) {
        if (depth[e.to] < depth[e.from] + 1) { depth[e.to] = depth[e.from] + 1; changed = true; }
      }
      if (!changed) break;
    }
    const rows = {};
    return g.nodes.map((n, i) => {
      const d = depth[i];
      const r = rows[d] = (rows[d] || 0) + 1;
      return { x: PAD + (r - 1) * (W + GX), y: PAD + d * (H + GY) };
    });
  }

  function drawGraph(g) {
    const svg = $("graph");
    svg.textContent = "";
    const pos = layout(g);
    let maxX = 0, maxY = 0;
    for (const p of pos) { maxX = Math.max(maxX, p.x + W); maxY = Math.max(maxY, p.y + H); }
    svg.setAttribute("width", maxX + PAD);
    svg.setAttribute("height", maxY + PAD);
    svg.setAttribute("viewBox", "0 0 " + (maxX + PAD) + " " + (maxY + PAD));
    const edges = el("g", {}, svg);
    for (const e of g.edges) {
      const a = pos[e.from], b = pos[e.to];
      const x1 = a.x + W / 2, y1 = a.y + H, x2 = b.x + W / 2, y2 = b.y, my = (y1 + y2) / 2;
      el("path", { d: `M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}`, class: "edge" + (e.broadcast ? " broadcast" : "") }, edges)
        .appendChild(document.createElementNS(SVG, "title")).textContent = "buffer " + e.buffer;
    }
    g.nodes.forEach((n, i) => {
      const p = pos[i];
      const grp = el("g", { transform: `translate(${p.x},${p.y})`, "data-node": n.name, class: "node" }, svg);
      el("rect", { class: "box", width: W, height: H, rx: 6 }, grp);
      text(grp, 8, 15, "name", n.name);
      let badge = "";
      if (n.keyed) badge = "keyed ×" + n.parallel;
      else if (n.parallel > 1) badge = "parallel ×" + n.parallel + (n.unordered ? " unordered" : "");
      if (badge) {
        el("rect", { class: "badge", x: W - 8 - badge.length * 6.6, y: 4, width: badge.length * 6.6 + 4, height: 14, rx: 3 }, grp);
        text(grp, W - 6 - badge.length * 6.6, 15, "par", badge);
      }
      const layers = (n.layers || []).join(", ");
      // The kind and the layers share one line of the box: about 32
      // characters fit, the rest is in the box's title.
      const room = 32 - n.kind.length - 3;
      text(grp, 8, 30, "kind", n.kind + (layers ? " · " : "")).appendChild(tspan("layers", layers.length > room ? layers.slice(0, room - 1) + "…" : layers));
      if (layers) grp.appendChild(document.createElementNS(SVG, "title")).textContent = n.name + ": " + layers;
      const c = text(grp, 8, 46, "counts", "");
      c.appendChild(tspan("", "in "));
      const tin = c.appendChild(tspan("in", "0"));
      c.appendChild(tspan("", "  out "));
      const tout = c.appendChild(tspan("out", "0"));
      c.appendChild(tspan("", "  "));
      const trate = c.appendChild(tspan("rate", ""));
      const extra = text(grp, 8, 62, "extra", "");
      const extra2 = text(grp, 8, 77, "extra2", "");
      const spark = el("polyline", { class: "spark", points: "" }, grp);
      state.boxes[n.name] = { g: grp, tin: tin, tout: tout, trate: trate, extra: extra, extra2: extra2, spark: spark };
    });
  }
  function tspan(cls, s) {
    const t = document.createElementNS(SVG, "tspan");
    if (cls) t.setAttribute("class", cls);
    t.textContent = s;
    return t;
  }

  function update(s) {
    state.ticks++;
    $("ticks").dataset.ticks = state.ticks;
    $("ticks").textContent = "updates " + state.ticks;
    state.running = s.running;
    const st = $("status");
    st.textContent = (s.runId ? "run " + s.runId + " · " : "") +
      (s.running ? (s.draining ? "draining" : "running") : (s.runId ? (s.draining ? "drained" : "ended") : "not started"));
    st.dataset.running = s.running;
    st.dataset.draining = s.draining;
    st.className = "status" + (!s.running && s.runId ? " ended" : "");
    for (const n of s.nodes) {
      const b = state.boxes[n.name];
      if (!b) continue;
      b.tin.textContent = n.in;
      b.tout.textContent = n.out;
      b.g.dataset.in = n.in;
      b.g.dataset.out = n.out;
      b.g.dataset.dead = n.deadLettered;
      b.g.dataset.parked = n.parked;
      const h = state.hist[n.name] = state.hist[n.name] || [];
      const last = h.length ? h[h.length - 1] : null;
      let rate = 0;
      if (last && s.time > last.t) rate = (n.out - last.out) * 1000 / (s.time - last.t);
      if (!last || s.time > last.t) h.push({ t: s.time, out: n.out, rate: rate });
      if (h.length > SPARK) h.shift();
      b.trate.textContent = s.running ? fmtRate(Math.max(rate, 0)) : "";
      const parts = [];
      const retries = n.itemRetries + n.nodeRestarts + n.nodeRetries;
      if (retries) parts.push("retries " + retries);
      if (n.deadLettered) parts.push("dead " + n.deadLettered);
      if (n.skipped) parts.push("skipped " + n.skipped);
      if (n.filtered) parts.push("filtered " + n.filtered);
      if (n.handedOff) parts.push("handed off " + n.handedOff);
      b.extra.textContent = parts.join("  ");
      const p2 = [];
      if (n.parked) p2.push("retries waiting " + n.parked);
      if (n.hasInFlight && n.inFlight) p2.push("in flight " + n.inFlight);
      if (n.brokerRetries) p2.push("broker retries " + n.brokerRetries);
      if (n.budgetExhausted) p2.push("budget spent " + n.budgetExhausted);
      if (n.fallbacks) p2.push("fallbacks " + n.fallbacks);
      if (n.circuit !== "closed") p2.push("breaker " + n.circuit);
      else if (n.breakerChanges) p2.push("breaker closed (" + n.breakerChanges + " changes)");
      b.extra2.textContent = p2.join("  ");
      b.g.classList.toggle("trouble", n.failed > 0 || n.deadLettered > 0 || n.circuit !== "closed");
      b.g.classList.toggle("open", n.circuit === "open");
      b.g.classList.toggle("half-open", n.circuit === "half-open");
      let max = 1;
      for (const q of h) max = Math.max(max, q.rate);
      b.spark.setAttribute("points", h.map((q, i) => `${W - 8 - SPARK + i},${H - 22 - 14 * q.rate / max}`).join(" "));
    }
    $("dead-total").textContent = s.deadLetters + (s.listed < s.deadLetters ? " (" + s.listed + " listed)" : "");
    if (s.listed !== state.lastDead) { state.lastDead = s.listed; loadDead(); }
    $("drain").disabled = !s.running || s.draining;
    $("cancel").disabled = !s.running;
  }

  async function loadDead() {
    let url = "api/deadletters?offset=" + state.offset + "&limit=" + state.limit;
    if (state.reason === OTHER) url += "&other=1";
    else if (state.reason !== null) url += "&reason=" + encodeURIComponent(state.reason);
    const r = await fetch(url);
    if (!r.ok) return;
    const d = await r.json();
    const gs = $("groups");
    gs.textContent = "";
    for (const g of d.groups) {
      const div = document.createElement("div");
      const key = g.other ? OTHER : g.reason;
      div.className = state.reason === key ? "sel" : "";
      const c = document.createElement("span");
      c.className = "count";
      c.textContent = g.count;
      div.appendChild(c);
      div.appendChild(document.createTextNode(g.other ? "(other reasons, past the distinct reasons kept)" : g.reason || "(no reason)"));
      div.onclick = () => { state.reason = state.reason === key ? null : key; state.offset = 0; loadDead(); };
      gs.appendChild(div);
    }
    if (d.reasons > d.groups.length) {
      const more = document.createElement("div");
      more.textContent = "… " + (d.reasons - d.groups.length) + " more reasons";
      gs.appendChild(more);
    }
    const tb = document.querySelector("#dead-table tbody");
    tb.textContent = "";
    for (const x of d.deadLetters) {
      const tr = document.createElement("tr");
      tr.dataset.id = x.id;
      for (const [v, cls] of [[x.id, ""], [x.key || "—", ""], [x.originNode + (x.node && x.node !== x.originNode ? " → " + x.node : ""), ""], [x.attempts, ""], [x.reason, "reason"]]) {
        const td = document.createElement("td");
        td.textContent = v;
        if (cls) td.className = cls;
        tr.appendChild(td);
      }
      tr.onclick = () => openDead(x.id);
      tb.appendChild(tr);
    }
    const pages = Math.max(1, Math.ceil(d.total / state.limit));
    $("page-info").textContent = "page " + (Math.floor(state.offset / state.limit) + 1) + " of " + pages + " · " + d.total + " listed";
    $("prev").disabled = state.offset === 0;
    $("next").disabled = state.offset + state.limit >= d.total;
  }

  async function openDead(id) {
    const r = await fetch("api/deadletters/" + id);
    if (!r.ok) return;
    const x = await r.json();
    const lines = [
      "dead letter #" + x.id + "  run " + x.runId,
      "key: " + (x.key || "—"),
      "failed at: " + x.originNode + "   decided at: " + x.node,
      "attempts: " + x.attempts,
      "reason: " + x.reason,
    ];
    if (x.itemType) lines.push("item type: " + x.itemType);
    if (x.item) lines.push("item: " + x.item);
    if (x.history && x.history.length) {
      lines.push("history:");
      for (const a of x.history) {
        const layer = LAYERS[a.layer] || a.layer;
        lines.push("  " + a.time + "  " + layer + " #" + a.retry + (a.node ? " at " + a.node : "") + "  " + a.error +
          (a.delay ? "  (then wait " + a.delay / 1e6 + " ms)" : ""));
      }
    } else {
      lines.push("history: not recorded");
    }
    const d = $("detail");
    d.textContent = lines.join("\n");
    d.dataset.id = x.id;
    d.hidden = false;
  }

  async function control(what) {
    if (what === "cancel" && !confirm("Cancel the run? Items in flight stop where they are.")) return;
    await fetch("api/" + what, { method: "POST", headers: { "X-Sluice-Inspect": "1" } });
  }

  async function start() {
    const g = await (await fetch("api/graph")).json();
    state.graph = g;
    $("pipeline").textContent = g.pipeline;
    document.title = "Sluice · " + g.pipeline;
    drawGraph(g);
    $("drain").hidden = !g.canDrain;
    $("cancel").hidden = !g.canCancel;
    $("drain").onclick = () => control("drain");
    $("cancel").onclick = () => control("cancel");
    $("prev").onclick = () => { state.offset = Math.max(0, state.offset - state.limit); loadDead(); };
    $("next").onclick = () => { state.offset += state.limit; loadDead(); };
    const es = new EventSource("api/events");
    es.addEventListener("stats", (ev) => update(JSON.parse(ev.data)));
    es.onerror = () => { $("status").textContent = "disconnected; retrying…"; };
  }
  start();
})();
