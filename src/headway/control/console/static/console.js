// The headway operator console: polls its page's JSON and draws it. No framework, no
// build: DOM nodes built from text (no HTML is ever parsed from strings, so a name is
// always text), charts as inline SVG. Writes send the page's CSRF token in X-CSRF-Token.
"use strict";
(() => {
  const page = document.body.dataset.page;
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  const view = document.getElementById("view");
  const status = document.getElementById("status");
  const SVG = "http://www.w3.org/2000/svg";
  if (!view) return; // the sign-in page

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const num = (x, digits = 1) => (x === null || x === undefined || Number.isNaN(x) ? "—" : Number(x).toFixed(digits));
  const table = (headers, rows, attrs) =>
    el("table", attrs, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
  const row = (cells, attrs) => el("tr", attrs, cells.map((c) => el("td", {}, c)));
  const badge = (state) => el("span", { class: `state state-${state}` }, state);
  const notice = el("p", { class: "notice", role: "status" });

  async function getJSON(url) {
    const reply = await fetch(url, { credentials: "same-origin", headers: { accept: "application/json" } });
    if (reply.status === 401) {
      window.location.assign("/console/login");
      throw new Error("signed out");
    }
    if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
    return reply.json();
  }
  async function post(url, body) {
    const reply = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: JSON.stringify(body || {}),
    });
    const data = await reply.json().catch(() => ({}));
    if (!reply.ok) throw new Error(data.error ? data.error.message : `HTTP ${reply.status}`);
    return data;
  }
  function say(text, bad) {
    notice.textContent = text;
    notice.className = bad ? "notice error" : "notice";
  }

  // A line chart of the samples: x from the oldest (at least a minute, at most the
  // window) to now, one path per series, y from 0 to a little above the highest value.
  function chart(points, series, windowS, title) {
    const W = 640, H = 180, P = 34;
    const spanS = Math.min(windowS, Math.max(60, ...points.map((p) => -p[0])));
    const peak = 1.1 * Math.max(1, ...points.flatMap((p) => series.map((s) => p[s.column])));
    const x = (ago) => P + (W - 2 * P) * (1 + ago / spanS);
    const y = (v) => H - P + 4 - (H - 2 * P) * (v / peak);
    const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title });
    box.append(svg("line", { x1: P, y1: y(0), x2: W - P, y2: y(0), class: "axis" }));
    box.append(svg("line", { x1: P, y1: y(0), x2: P, y2: y(peak), class: "axis" }));
    box.append(svg("text", { x: 2, y: y(peak) + 4, class: "tick" }, num(peak, peak < 10 ? 2 : 0)));
    box.append(svg("text", { x: 2, y: y(0) + 4, class: "tick" }, "0"));
    const ago = spanS >= 120 ? `-${Math.round(spanS / 60)} min` : `-${Math.round(spanS)} s`;
    box.append(svg("text", { x: P, y: H - 4, class: "tick" }, ago));
    box.append(svg("text", { x: W - P - 20, y: H - 4, class: "tick" }, "now"));
    box.append(svg("text", { x: P + 8, y: 14, class: "title" }, title));
    series.forEach((s, i) => {
      const d = points.map((p, k) => `${k ? "L" : "M"}${x(p[0]).toFixed(1)} ${y(p[s.column]).toFixed(1)}`).join(" ");
      const most = Math.max(0, ...points.map((p) => p[s.column]));
      box.append(svg("path", { d: d || "M0 0", class: `series series-${s.name}`, "data-peak": most }));
      box.append(svg("text", { x: W - P - 170 + i * 90, y: 14, class: `legend legend-${s.name}` }, `— ${s.name}`));
    });
    return box;
  }

  const render = {
    pools: (data) =>
      data.pools.map((pool) =>
        el("section", { "data-pool": pool.name },
          el("h2", {}, `${pool.name}: ${pool.ready} of ${pool.size} ready · `,
            `${pool.replicas.filter((r) => r.state === "ejected").length} ejected now (${pool.ejections} so far) · `,
            `outstanding ${pool.outstanding} of ${pool.limit} texts`),
          table(["replica", "state", "outstanding texts", "latency ms", "failures in a row", "ejections", "ejected for", "versions loaded", "on demand"],
            pool.replicas.map((r) =>
              row([r.url, r.reason ? el("span", {}, badge(r.state), ` ${r.reason}`) : badge(r.state), r.outstanding_texts, num(r.latency_ms), r.consecutive_failures, r.ejections,
                r.ejected_for_s > 0 ? `${r.ejected_for_s} s` : "—", r.versions.join(", ") || "—", r.on_demand.join(", ") || "—"],
                { "data-replica": r.url, "data-state": r.state, "data-reason": r.reason })))),
      ),
    admission: (data) =>
      data.pools.map((pool) =>
        el("section", { "data-pool": pool.name },
          el("h2", {}, pool.name),
          el("dl", { class: "stats" }, [
            ["limit", pool.limit], ["outstanding", pool.outstanding], ["throughput texts/s", num(pool.throughput)],
            ["shed/s", num(pool.shed_per_s, 2)], ["ready replicas", pool.ready], ["retry after s", num(pool.retry_after_s, 2)],
          ].map(([name, value]) => el("div", { "data-stat": name.split(" ")[0] }, el("dt", {}, name), el("dd", {}, value)))),
          chart(pool.points, [{ name: "limit", column: 1 }, { name: "outstanding", column: 2 }], data.window_s, "limit vs outstanding (texts)"),
          chart(pool.points, [{ name: "shed", column: 4 }], data.window_s, "shed rate (requests/s)"))),
    tenants: (data) => {
      quotaForm(data.tenants);
      const usage = (t) => (t.month ? [t.month.requests, t.month.texts, t.month.tokens] : ["ledger unavailable", "", ""]);
      return [
        el("p", { class: "hint" }, data.ledger === "ok" ? `Usage since ${data.month_start} (the ledger); ` : "Usage: ledger unavailable; ",
          "requests, 429s and sheds: this gateway since it started."),
        table(["tenant", "tier", "rate texts/s", "burst texts", "month requests", "month texts", "month tokens", "served", "429s", "shed"],
          data.tenants.map((t) => row([t.name, t.tier, t.rate_texts_per_s, t.burst_texts, ...usage(t), t.served, t.quota_exceeded, t.shed], { "data-tenant": t.name }))),
        data.other ? el("p", { class: "hint" }, `Tenants past the metrics' label limit ("other"): ${data.other.served} served, ${data.other.quota_exceeded} 429s, ${data.other.shed} shed.`) : null,
      ];
    },
    models: (data) => [
      el("h2", {}, "Versions"),
      table(["version", "name", "kind", "dims", "quantization", "aliases", "served here"],
        data.versions.map((v) => row([v.version, v.name, v.kind, v.dimensions, v.quantization, v.aliases.join(", ") || "—", v.served ? "yes" : "no"]))),
      el("h2", {}, "Splits"),
      data.splits.length
        ? table(["alias", "weights", "sticky", "pins", "shadow"], data.splits.map((s) =>
          row([s.alias, s.weights.map(([v, w]) => `${v} ×${w}`).join(", "), s.sticky, s.pins, s.shadow ? `${s.shadow[0]} (${s.shadow[1]})` : "—"])))
        : el("p", { class: "hint" }, "No splits: every alias serves its one version."),
      el("h2", {}, "Active rollouts"),
      data.rollouts.length
        ? table(["id", "alias", "primary → candidate", "state", "step", "reason", ""], data.rollouts.map((r) =>
          row([r.id, r.alias, `${r.primary} → ${r.candidate}`, badge(r.state), `${r.step + 1} of ${r.steps.length} (${r.percent}%)`, r.reason, moves(r)], { "data-rollout": r.id })))
        : el("p", { class: "hint" }, "No rollout under way."),
      el("h2", {}, "Output quality"),
      data.quality === null || data.quality.length === 0
        ? el("p", { class: "hint" }, "no quality data")
        : table(["version", "kind", "traffic", "reference rows", "window rows", "mean norm", "centroid drift", "MMD²", "MMD p", "score KS p", "drifting"],
          data.quality.map((q) => row([q.version, q.kind, q.traffic === "both" ? "served + shadow" : q.traffic, q.reference_rows, q.window_rows,
            num(q.mean_norm, 3), num(q.centroid_drift, 3), num(q.mmd, 4), num(q.mmd_p_value, 3), num(q.score_ks_p_value, 3),
            q.drifting ? badge("drifting") : "no"], { "data-traffic": q.traffic }))),
    ],
    audit: (data) =>
      table(["when", "actor", "action", "target", "change", "request"], data.entries.map((e) =>
        row([e.at.replace("T", " ").slice(0, 19), e.actor, e.action, short(e.target), short(change(e.before, e.after)), e.request_id.slice(0, 12)],
          { "data-action": e.action })), { class: "audit" }),
    economics: (data) => [
      el("p", { class: "formula" }, data.formula),
      el("p", { class: "formula" }, data.revenue_formula),
      data.machine_cost_per_hour > 0
        ? el("p", { class: "hint" }, `Machine cost: ${data.machine_cost_per_hour} ${data.currency} an hour.`)
        : el("p", { class: "notice error" }, "set observability.console.machine_cost_per_hour to see what a request costs"),
      ...data.pools.map((p) => el("section", { "data-pool": p.pool },
        el("h2", {}, p.pool),
        table(["ready", "throughput texts/s", "mean texts/request", "capacity requests/s", `cost per 1k (${data.currency})`],
          [row([p.ready, num(p.throughput), num(p.mean_texts_per_request, 2), num(p.capacity_requests_per_s, 2), p.cost_per_1k === null ? "—" : num(p.cost_per_1k, 4)])]),
        p.revenue.length
          ? table(["alias", "price", "mean units/request", "revenue per 1k", "margin per 1k"], p.revenue.map((r) =>
            row([r.alias, `${r.amount} ${r.currency} per ${r.per} ${r.unit}`,
              r.units_per_request === null ? "needs usage in the ledger" : `${num(r.units_per_request, 2)} (${r.source})`,
              r.revenue_per_1k === null ? "—" : num(r.revenue_per_1k, 4),
              r.revenue_per_1k === null || p.cost_per_1k === null || r.currency !== data.currency ? "—" : num(r.revenue_per_1k - p.cost_per_1k, 4)])))
          : el("p", { class: "hint" }, "No price in the price book for this pool's aliases."))),
    ],
  };

  const short = (text) => text.replace(/[0-9a-f]{16,}/g, (hex) => `${hex.slice(0, 12)}…`); // a version hash
  function change(before, after) {
    if (!before || !after) return JSON.stringify(after || before || {}).slice(0, 160);
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])];
    const moved = keys.filter((k) => JSON.stringify(before[k]) !== JSON.stringify(after[k]));
    return moved.map((k) => `${k}: ${JSON.stringify(before[k])} → ${JSON.stringify(after[k])}`).join("; ").slice(0, 200);
  }

  function moves(rollout) {
    const allowed = { pause: ["running"], resume: ["paused", "halted"], abort: ["running", "paused", "halted", "awaiting_approval"] };
    return Object.entries(allowed).filter(([, states]) => states.includes(rollout.state)).map(([verb]) =>
      el("button", {
        type: "button", "data-move": verb,
        onclick: async () => {
          if (verb === "abort" && !window.confirm(`Abort rollout ${rollout.id}?`)) return;
          try {
            const moved = await post(`/console/api/rollouts/${rollout.id}/${verb}`);
            say(`Rollout ${moved.id}: ${moved.state}.`);
          } catch (e) { say(`Rollout ${rollout.id} not moved: ${e.message}`, true); }
        },
      }, verb));
  }

  // The tenants page's one write: a tenant's tier or quota. Built once, so the
  // operator's typing survives the polls; its tenant list follows them.
  let form = null;
  function quotaForm(tenants) {
    if (form === null) {
      form = el("form", { class: "write", id: "quota-form" },
        el("h2", {}, "Change a tenant's tier or quota"),
        el("label", {}, "tenant ", el("select", { name: "tenant", required: true })),
        el("label", {}, "tier ", el("select", { name: "tier" }, ["", "interactive", "batch"].map((t) => el("option", { value: t }, t || "(unchanged)")))),
        el("label", {}, "rate texts/s ", el("input", { name: "rate", type: "number", min: "0", step: "any", placeholder: "unchanged" })),
        el("label", {}, "burst texts ", el("input", { name: "burst", type: "number", min: "0", step: "any", placeholder: "unchanged" })),
        el("button", { type: "submit" }, "Save"));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const name = form.elements.tenant.value;
        const body = {};
        if (form.elements.tier.value) body.tier = form.elements.tier.value;
        if (form.elements.rate.value) body.rate_texts_per_s = Number(form.elements.rate.value);
        if (form.elements.burst.value) body.burst_texts = Number(form.elements.burst.value);
        try {
          const t = await post(`/console/api/tenants/${encodeURIComponent(name)}`, body);
          say(`${t.name}: ${t.tier}, ${t.rate_texts_per_s} texts/s, burst ${t.burst_texts}.`);
        } catch (e) { say(`${name} not changed: ${e.message}`, true); }
      });
      view.after(form);
    }
    const select = form.elements.tenant;
    const names = tenants.map((t) => t.name);
    if (names.join("\n") !== [...select.options].map((o) => o.value).join("\n")) {
      const chosen = select.value;
      select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
      if (names.includes(chosen)) select.value = chosen;
    }
  }

  const every = { pools: 1000, admission: 1000 };
  view.before(notice);
  async function tick() {
    try {
      const data = await getJSON(`/console/api/${page}`);
      view.replaceChildren(...[render[page](data)].flat().filter(Boolean));
      status.textContent = `updated ${new Date().toLocaleTimeString()}`;
      status.className = "status";
    } catch (e) {
      status.textContent = `not updated: ${e.message}`;
      status.className = "status error";
    }
    window.setTimeout(tick, every[page] || 3000);
  }
  tick();
})();
