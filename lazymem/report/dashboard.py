"""One self-contained dashboard.html: tables, plots (base64 PNG) and a per-question browser.

Everything is inline so the file opens from disk with no server or network. Tables are escaped here;
records travel as JSON in a <script type="application/json"> block (with <, > and & written as \\u
escapes so model output cannot close the tag) and the page builds the browser with textContent only.
The browser applies a URL hash such as `#method=lazymem&correct=0` on load and keeps it in step.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from lazymem.report.collect import Run
from lazymem.report.tables import Table

RECORD_FIELDS = (
    "qid", "method", "type", "question", "reference", "retrieved", "gold_idx", "shown", "memory",
    "answer", "answer_thinking", "correct", "judge_raw", "status", "error", "memory_tokens", "latency_s",
)  # fmt: skip
WINDOW_FIELDS = ("idx", "core", "outcome", "gate_error", "decisions")


def _clip(value, limit: int):
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"\n… [{len(value) - limit} more characters cut for the dashboard]"
    return value


def slim_records(runs: list[Run], max_chars: int = 20000) -> list[dict]:
    """The record fields the browser shows, long texts clipped so the page stays light."""
    out = []
    for run in runs:
        for bench, records in run.records.items():
            for r in records:
                row = {k: _clip(r.get(k), max_chars) for k in RECORD_FIELDS}
                row["windows"] = [
                    {k: _clip(w.get(k), max_chars) for k in WINDOW_FIELDS} for w in r.get("windows") or []
                ]
                row["run"], row["benchmark"] = run.name, bench
                out.append(row)
    return out


def _json_for_script(data) -> str:
    text = json.dumps(data, ensure_ascii=False, default=str)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _table_html(t: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.keys + t.values)
    body = []
    for labels, cells in t.rows:
        tds = [f"<td>{html.escape('–' if x is None else str(x))}</td>" for x in labels]
        for c in cells:
            ours = "–" if c.ours is None else f"{c.ours:.{c.digits}f}"
            ref = "" if c.paper is None else f' <span class="paper">({c.paper:.{c.digits}f})</span>'
            tds.append(f'<td class="num">{html.escape(ours)}{ref}</td>')
        body.append("<tr>" + "".join(tds) + "</tr>")
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    return (
        f'<section class="table" id="{html.escape(t.key)}"><h3>{html.escape(t.title)}</h3>{note}'
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div></section>"
    )


def _img_html(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    name = html.escape(Path(path).stem)
    img = f'<img alt="{name}" src="data:image/png;base64,{data}">'
    return f"<figure>{img}<figcaption>{name}</figcaption></figure>"


def render(tables: list[Table], plots: list[Path], runs: list[Run], max_chars: int = 20000) -> str:
    records = slim_records(runs, max_chars)
    run_list = "".join(
        f"<li>{html.escape(r.name)}: <code>{html.escape(str(r.path))}</code></li>" for r in runs
    )
    return TEMPLATE.format(
        css=CSS,
        js=JS,
        runs=run_list,
        tables="".join(_table_html(t) for t in tables),
        plots="".join(_img_html(p) for p in plots) or "<p>No plots.</p>",
        data=_json_for_script({"records": records}),
    )


def write_dashboard(
    out: Path, tables: list[Table], plots: list[Path], runs: list[Run], max_chars=20000
) -> Path:
    path = Path(out) / "dashboard.html"
    path.write_text(render(tables, plots, runs, max_chars), encoding="utf-8")
    return path


TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>LazyMem report</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{css}</style></head>
<body>
<header><h1>LazyMem report</h1><nav><a href="#tables">Tables</a> <a href="#plots">Plots</a>
<a href="#questions">Questions</a></nav></header>
<section><h2>Runs</h2><ul class="runs">{runs}</ul>
<p class="note">Cells read <b>ours</b> <span class="paper">(paper)</span>; – = no number.</p></section>
<section id="tables"><h2>Tables</h2>{tables}</section>
<section id="plots"><h2>Plots</h2><div class="plots">{plots}</div></section>
<section id="questions"><h2>Questions</h2>
<div class="filters">
<label>benchmark <select id="f-benchmark"></select></label>
<label>run <select id="f-run"></select></label>
<label>method <select id="f-method"></select></label>
<label>type <select id="f-type"></select></label>
<label>judged <select id="f-correct"><option value="">all</option><option value="1">correct</option>
<option value="0">incorrect</option><option value="none">not scored</option></select></label>
<label>text <input id="f-text" type="search" placeholder="question, answer, qid"></label>
<span id="count"></span></div>
<div id="qlist"></div><button id="more" hidden>show more</button>
</section>
<script type="application/json" id="report-data">{data}</script>
<script>{js}</script>
</body></html>
"""

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1400px;padding:0 16px;color:#222}
header{display:flex;gap:24px;align-items:baseline;border-bottom:1px solid #ddd}
nav a{margin-right:12px}
h3{font-size:15px;margin:18px 0 6px}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:12.5px}
th,td{border:1px solid #ddd;padding:3px 7px;white-space:nowrap}
th{background:#f3f3f3;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.paper{color:#888}
.note{color:#666;font-size:12px}
.plots{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:12px;color:#666}
.filters{display:flex;flex-wrap:wrap;gap:12px;align-items:center;padding:8px;background:#f7f7f7;
position:sticky;top:0;z-index:1}
#count{color:#555}
details.q{border:1px solid #ddd;border-radius:4px;margin:6px 0;padding:4px 8px}
details.q>summary{cursor:pointer}
.tag{display:inline-block;font-size:11px;padding:0 6px;border-radius:8px;background:#eee;margin-right:4px}
.ok{background:#d8f3dc}.bad{background:#ffd9d9}.na{background:#eee}
pre{white-space:pre-wrap;word-break:break-word;background:#fafafa;border:1px solid #eee;padding:6px;
max-height:360px;overflow:auto;font-size:12.5px}
.kv b{display:inline-block;min-width:90px}
.win{border-left:3px solid #cde;padding-left:8px;margin:8px 0}
.win table{margin-top:4px}.win td{white-space:normal;vertical-align:top}
td.KEEP{color:#176f2c;font-weight:600}td.DROP{color:#a12;font-weight:600}
"""

JS = r"""
(function () {
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const RECS = DATA.records;
  const PAGE = 200;
  const KEYS = ["benchmark", "run", "method", "type", "correct", "text"];
  let shown = PAGE;

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else e.setAttribute(k, v);
    }
    for (const k of kids) {
      if (k === null || k === undefined) continue;
      e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }
  function correctKey(r) { return r.correct === true ? "1" : r.correct === false ? "0" : "none"; }

  function fillSelect(id, values) {
    const s = document.getElementById(id);
    s.append(el("option", {value: ""}, "all"));
    for (const v of values) s.append(el("option", {value: v}, v));
  }
  const uniq = (k) => [...new Set(RECS.map((r) => r[k]).filter((v) => v !== null && v !== undefined))].sort();
  for (const k of ["benchmark", "run", "method", "type"]) fillSelect("f-" + k, uniq(k));

  function filters() {
    const f = {};
    for (const k of KEYS) f[k] = document.getElementById("f-" + k).value;
    return f;
  }
  function matches(r, f) {
    if (f.benchmark && r.benchmark !== f.benchmark) return false;
    if (f.run && r.run !== f.run) return false;
    if (f.method && r.method !== f.method) return false;
    if (f.type && r.type !== f.type) return false;
    if (f.correct && correctKey(r) !== f.correct) return false;
    if (f.text) {
      const hay = [r.qid, r.question, r.answer, r.reference].join(" ").toLowerCase();
      if (!hay.includes(f.text.toLowerCase())) return false;
    }
    return true;
  }

  function pre(text) {
    return el("pre", {}, text === null || text === undefined || text === "" ? "(empty)" : text);
  }
  function kv(label, value) { return el("div", {class: "kv"}, el("b", {}, label), " ", value); }

  function windowBlock(w, i) {
    const box = el("div", {class: "win"});
    box.append(el("div", {}, el("b", {}, "window " + (i + 1)), " messages ", (w.idx || []).join(", "),
      " · core ", (w.core || []).join(", "), " · ", el("span", {class: "tag"}, w.outcome || "?"),
      w.gate_error ? " gate error: " + w.gate_error : ""));
    const decisions = w.decisions || [];
    if (decisions.length) {
      const t = el("table", {}, el("tr", {}, el("th", {}, "msg"), el("th", {}, "op"),
        el("th", {}, "compressed content"), el("th", {}, "reason")));
      decisions.forEach((d, j) => {
        const op = String(d[0] ?? "");
        t.append(el("tr", {}, el("td", {}, (w.idx || [])[j] ?? ""), el("td", {class: op}, op),
          el("td", {}, d[1] ?? ""), el("td", {}, d[2] ?? "")));
      });
      box.append(t);
    }
    return box;
  }

  function body(r) {
    const d = el("div", {class: "body"});
    d.append(kv("question", r.question), kv("reference", String(r.reference ?? "")),
      kv("status", r.status + (r.error ? " — " + r.error : "")),
      kv("retrieved", (r.retrieved || []).join(", ")), kv("gold", (r.gold_idx || []).join(", ")),
      kv("in memory", (r.shown || []).join(", ")), kv("tokens", r.memory_tokens ?? "–"));
    if (r.latency_s) {
      d.append(kv("latency s", Object.entries(r.latency_s).map(([k, v]) => k + " " + v).join(" · ")));
    }
    if ((r.windows || []).length) {
      const wd = el("details", {}, el("summary", {}, "windows and decisions (" + r.windows.length + ")"));
      r.windows.forEach((w, i) => wd.append(windowBlock(w, i)));
      d.append(wd);
    }
    d.append(el("h4", {}, "memory"), pre(r.memory), el("h4", {}, "answer"), pre(r.answer));
    if (r.answer_thinking) {
      d.append(el("details", {}, el("summary", {}, "answer model thinking"), pre(r.answer_thinking)));
    }
    d.append(el("h4", {}, "judge"), pre(r.judge_raw));
    return d;
  }

  function item(r) {
    const c = correctKey(r);
    const tag = el("span", {class: "tag " + (c === "1" ? "ok" : c === "0" ? "bad" : "na")},
      c === "1" ? "correct" : c === "0" ? "incorrect" : "not scored");
    const q = el("details", {class: "q", "data-method": r.method, "data-type": r.type, "data-correct": c,
      "data-qid": r.qid, "data-run": r.run, "data-benchmark": r.benchmark});
    q.append(el("summary", {}, tag, el("span", {class: "tag"}, r.method), el("span", {class: "tag"}, r.type),
      el("code", {}, r.qid), " ", r.question));
    q.addEventListener("toggle", () => { if (q.open && q.children.length === 1) q.append(body(r)); });
    return q;
  }

  function draw() {
    const f = filters();
    const hits = RECS.filter((r) => matches(r, f));
    const list = document.getElementById("qlist");
    list.replaceChildren(...hits.slice(0, shown).map(item));
    document.getElementById("count").textContent = hits.length + " of " + RECS.length + " records";
    const more = document.getElementById("more");
    more.hidden = hits.length <= shown;
    const params = new URLSearchParams();
    for (const k of KEYS) if (f[k]) params.set(k, f[k]);
    const hash = params.toString();
    if (("#" + hash) !== location.hash && (hash || location.hash)) history.replaceState(null, "", "#" + hash);
  }

  function fromHash() {
    const params = new URLSearchParams(location.hash.replace(/^#/, ""));
    for (const k of KEYS) {
      const input = document.getElementById("f-" + k);
      const v = params.get(k) || "";
      if (input.tagName === "SELECT" && v && ![...input.options].some((o) => o.value === v)) {
        input.append(el("option", {value: v}, v));
      }
      input.value = v;
    }
  }

  for (const k of KEYS) {
    document.getElementById("f-" + k).addEventListener(k === "text" ? "input" : "change", () => {
      shown = PAGE; draw();
    });
  }
  document.getElementById("more").addEventListener("click", () => { shown += PAGE; draw(); });
  window.addEventListener("hashchange", () => { fromHash(); draw(); });
  fromHash();
  draw();
})();
"""
