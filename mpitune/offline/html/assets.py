"""The page's style and script, embedded in every page: nothing is fetched from a network.

The script renders a payload (payload.py) into the page. That is the header, one section per
chart and the sortable table. plotly.js, also embedded, draws the charts. A live page asks the
server for a newer payload every few seconds and renders it in place.
"""

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #222; background: #fafafa; }
header { background: #08306b; color: #fff; padding: 14px 24px; }
header h1 { margin: 0 0 6px; font-size: 22px; }
header dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0; font-size: 14px; }
header dt { opacity: 0.75; }
header dd { margin: 0; }
#live-status { padding: 4px 24px; font-size: 13px; background: #deebf7; }
#live-status:empty { display: none; }
main { padding: 0 24px 24px; }
section { background: #fff; border: 1px solid #ddd; border-radius: 6px; margin: 16px 0; padding: 8px 14px; }
section h2 { font-size: 17px; margin: 6px 0; }
p.note { color: #555; font-size: 13px; margin: 2px 0 6px; }
p.note:empty { display: none; }
table { border-collapse: collapse; font-size: 13px; width: 100%; }
th, td { border-bottom: 1px solid #eee; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { cursor: pointer; background: #f0f0f0; position: sticky; top: 0; user-select: none; }
th.sorted-asc::after { content: " \\25B2"; }
th.sorted-desc::after { content: " \\25BC"; }
tbody tr:hover { background: #fff5eb; }
.table-wrap { max-height: 480px; overflow: auto; }
"""

SCRIPT = r"""
(function () {
  "use strict";
  const CONFIG = {displaylogo: false, responsive: true};
  const live = JSON.parse(document.getElementById("live").textContent);
  let current = JSON.parse(document.getElementById("payload").textContent);
  let sortBy = null, ascending = true;

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(x) {
    if (x === null || x === undefined) return "";
    if (typeof x === "number" && !Number.isInteger(x)) return Number(x.toPrecision(4)).toString();
    return String(x);
  }

  function header(s) {
    document.title = "mpitune: " + s.kernel;
    const h = document.getElementById("summary");
    h.replaceChildren(el("h1", {}, "mpitune report: " + s.kernel + (s.lang ? " (" + s.lang + ")" : "")));
    const failed = Object.entries(s.failed).map(([k, n]) => n + " " + k).join(", ") || "none";
    const count = el("span", {id: "configs", "data-count": s.configs}, String(s.configs));
    const rows = [
      ["data", s.source],
      ["objective", s.objective + " (" + s.direction + ")"],
      ["configurations", [count, " measured" + (s.space_size ? " of " + s.space_size : "") + ": " + s.ok +
                          " ok, failed: " + failed]],
      ["runs", s.runs + " on up to " + s.ranks + " rank(s); the newest is " + s.state],
      ...s.priors.map((p, i) => ["prior (run " + p.run + ")", s.prior_lines[i],
                                 {class: "prior", "data-matched": p.matched}]),
      ["best", s.best === null ? "none yet" : fmt(s.best) + " (" + s.best_config + ")",
       {id: "best", "data-value": s.best}],
    ];
    if (s.confirmed) rows.push(["confirmed", s.confirmed, {id: "confirmed"}]);
    const dl = el("dl");
    for (const [k, v, attrs] of rows) {
      dl.append(el("dt", {}, k));
      const dd = el("dd", attrs || {});
      dd.append(...(Array.isArray(v) ? v : [v]));
      dl.append(dd);
    }
    h.append(dl);
  }

  function section(key, title, content) {
    let s = document.getElementById("section-" + key);
    if (!s) {
      s = el("section", {id: "section-" + key});
      s.append(el("h2"), el("p", {class: "note"}), content());
      document.getElementById("report").append(s);
    }
    s.querySelector("h2").textContent = title;
    return s;
  }

  function charts(list) {
    for (const c of list) {
      const s = section(c.key, c.title, () => el("div", {id: c.key, class: "chart"}));
      s.querySelector("p.note").textContent = c.note;
      Plotly.react(c.key, c.figure.data, c.figure.layout, CONFIG);
    }
  }

  function compare(a, b) {
    if (a === b) return 0;
    if (a === null) return 1;
    if (b === null) return -1;
    const r = (typeof a === "number" && typeof b === "number") ? a - b : String(a).localeCompare(String(b));
    return ascending ? r : -r;
  }

  function table(t) {
    const s = section("top", "Top configurations", () => {
      const wrap = el("div", {class: "table-wrap"});
      wrap.append(el("table", {id: "top-table"}));
      return wrap;
    });
    s.querySelector("p.note").textContent = t.note;
    const rows = t.rows.slice();
    const k = t.columns.indexOf(sortBy);
    if (k >= 0) rows.sort((a, b) => compare(a[k], b[k]));
    const head = el("tr");
    t.columns.forEach((name) => {
      const th = el("th", {}, name);
      if (name === sortBy) th.className = ascending ? "sorted-asc" : "sorted-desc";
      th.addEventListener("click", () => {
        ascending = sortBy === name ? !ascending : true;
        sortBy = name;
        table(current.table);
      });
      head.append(th);
    });
    const body = el("tbody");
    for (const r of rows) {
      const tr = el("tr");
      r.forEach((v) => tr.append(el("td", {}, fmt(v))));
      body.append(tr);
    }
    const thead = el("thead");
    thead.append(head);
    document.getElementById("top-table").replaceChildren(thead, body);
  }

  function render(p) {
    header(p.summary);
    charts(p.charts.slice(0, 1));  // the convergence, then the table of the best, then the rest
    table(p.table);
    charts(p.charts.slice(1));
    document.body.dataset.version = p.version;
  }

  function status(text) { document.getElementById("live-status").textContent = text; }

  async function poll() {
    try {
      const r = await fetch(live.endpoint + "?have=" + encodeURIComponent(current.version), {cache: "no-store"});
      if (r.status === 200) {
        current = await r.json();
        render(current);
      }
      status("live: " + current.summary.configs + " configurations, the newest run is " + current.summary.state +
             "; checked " + new Date().toLocaleTimeString() + ", every " + live.interval_s + " s");
    } catch (e) {
      status("live: the server is gone (" + e.message + "); this is the last data it sent");
    }
  }

  render(current);
  if (live) {
    status("live: waiting for the first check");
    setInterval(poll, live.interval_s * 1000);
  }
})();
"""
