"""One self-contained HTML report of a run: scenario, summary, plots (embedded PNG) and definitions.

The file references nothing outside itself (no scripts, stylesheets or images from a server), so it
opens in a browser with no network.
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import yaml

from ..units import format_rate, format_size, format_time

#: Short definitions of the headline figures (full definitions: docs/metrics.md).
DEFINITIONS = {
    "messages.completed / total": "messages whose payload all arrived / messages in the run",
    "effective_bandwidth.goodput_bps": "delivered payload bits over the pattern's duration (first release to last "
                                       "completion; run end if incomplete)",
    "effective_bandwidth.sender_capacity_bps": "sum of the line rates of every port (NVLink and scale-out NIC) by "
                                               "which the senders' payload enters the network",
    "effective_bandwidth.goodput_fraction": "goodput_bps / sender_capacity_bps (at most payload/(payload+header))",
    "effective_bandwidth.nic_capacity_bps": "sum of the scale-out NIC line rates of the hosts whose payload leaves "
                                            "by a NIC (NVLink ports left out)",
    "effective_bandwidth.nic_goodput_fraction": "nic_goodput_bps (payload of the messages that leave by a NIC, over "
                                                "the pattern's duration) / nic_capacity_bps: the fraction of NIC "
                                                "line rate; equals goodput_fraction without NVLink",
    "effective_bandwidth.completion_time_ratio": "ideal / actual duration of the whole pattern (1.0 = ideal fabric)",
    "effective_bandwidth.goodput_while_all_active_fraction": "goodput while every flow is running, over sender "
                                                             "capacity",
    "pattern.ideal_duration_ps": "lower bound on the pattern's duration: the dependency critical path with each "
                                 "message at its shortest time, and each host's port capacity (analysis/bound.py)",
    "fct (message completion time)": "end_ps - release_ps of a message: last payload byte arrival minus hand-off "
                                     "to the source NIC; percentiles over completed messages",
    "slowdown": "fct / ideal fct of the same message alone on an idle fabric (1.0 = no interference)",
    "packet_latency": "one-way packet latency, first bit leaving the source NIC to last bit at the destination NIC; "
                      "from a log-bucketed histogram (values within relative_error)",
    "drops.packets": "packets dropped in the network (drop-tail buffer full)",
    "transport.retransmitted_bytes": "payload bytes sent again (by cause: sack = RACK loss detection, timeout, "
                                     "nak = go-back-N rewind); docs/models.md",
    "transport.out_of_order_fraction": "data units that arrived after a unit of the same queue pair sent later",
    "transport.pfc_pause_events": "PFC XOFF frames that took effect (lossless mode)",
    "links.utilisation": "tx_bytes * 8 / (rate_bps * run end time) of a directed link",
    "links.peak_queue_bytes": "largest egress backlog seen at an enqueue",
    "collectives.time_ps": "per traced operation: last completion minus first release of its messages",
    "collectives.ideal_time_ps": "per traced operation: the lower bound of its messages alone (analysis/bound.py)",
    "algbw / busbw": "nccl-tests: algbw = S / time (S = buffer bytes per rank), busbw = algbw x the kind's factor "
                     "(allreduce 2(n-1)/n; reduce_scatter, all_gather, all_to_all (n-1)/n); docs/metrics.md",
}

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:60em;
color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;
vertical-align:top}th{background:#f4f4f4}td.v{font-family:monospace;text-align:right}
p.verdict{font-size:1.1em;background:#eef5ff;padding:.5em .8em;border-left:4px solid #4a7fd0}
tr.flag td{background:#fff1f0}
pre{background:#f7f7f7;padding:.8em;overflow:auto;font-size:.85em;max-height:30em}
figure{margin:1em 0}img{max-width:100%}figcaption{font-size:.85em;color:#555}
"""

_CAPTIONS = {
    "fct_cdf": "Message completion time CDF (completed messages).",
    "latency_cdf": "Packet latency CDF with p50 / p99 / p99.9 marked.",
    "goodput": "Delivered payload rate per time bin.",
    "link_utilisation": "Utilisation of each directed link over the run, grouped by link kind.",
    "collectives": "Completion time of each traced operation (bar, value on top) and its ideal time (black tick).",
    "link_utilisation_timeseries": "Utilisation per sample interval of the links busiest in any interval: when "
                                   "and how long they were saturated (run averages hide it).",
    "link_heatmap": "Utilisation of every link per sample interval, grouped by tier.",
    "queue_timeseries": "Sampled queue of the ports with the largest peak queue.",
    "reorder_distance": "Reorder distance per group of messages (p50, p99, max).",
}


def _fmt_value(key: str, v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, (int, float)):
        if key.endswith("_ps"):
            return f"{format_time(v)} ({v:,.0f} ps)" if isinstance(v, int) or float(v).is_integer() \
                else f"{format_time(v)} ({v:,.1f} ps)"
        if key.endswith("_bps"):
            return f"{format_rate(v)}"
        if key.endswith("_bytes"):
            return f"{format_size(v)} ({int(v):,} B)"
        if key.endswith("_per_s"):     # a rate per wall-clock second (events_per_s, packet_hops_per_s)
            return f"{v:,.0f} /s"
        if key.endswith("_s"):
            return f"{v:.3f} s"
        if isinstance(v, float):
            return f"{v:.4g}"
        return f"{v:,}"
    return str(v)


def _flatten(d: dict, prefix: str = "") -> list[tuple[str, object]]:
    rows = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            if v:
                rows.extend(_flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            rows.append((key, ", ".join(map(str, v))))
        else:
            rows.append((key, v))
    return rows


def _png_data_uri(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _pct_text(x) -> str:
    return f"{100 * x:.0f}%" if x is not None else "n/a"


def verdict(summary: dict) -> str:
    """One line saying how the run went, computed from ``summary`` (a run's summary.json), e.g.
    ``completed in 1.235ms at 71% of NIC line rate (ideal 0.9ms, 1.37x); 3 victim messages
    slowed > 4x vs ideal``. The NIC figure is ``nic_goodput_fraction`` (all sender ports,
    NVLink included, when no payload leaves by a NIC)."""
    s = summary
    run, msgs = s.get("run", {}), s.get("messages", {})
    eb, pat, slow = s.get("effective_bandwidth", {}), s.get("pattern", {}), s.get("slowdown", {})
    status = run.get("status")
    if eb.get("nic_goodput_fraction") is not None:
        rate = f"{_pct_text(eb['nic_goodput_fraction'])} of NIC line rate"
    else:
        rate = f"{_pct_text(eb.get('goodput_fraction'))} of sender line rate"
    over = slow.get("messages_over_4x")
    victims = ("no message slowed > 4x vs ideal" if over == 0 else
               f"{over} victim message{'s' if over != 1 else ''} slowed > {4}x vs ideal" if over is not None else "")
    if status == "complete" and pat.get("duration_ps") is not None:
        text = f"completed in {format_time(pat['duration_ps'])} at {rate}"
        ideal = pat.get("ideal_duration_ps")
        if ideal:
            text += f" ({pat['duration_ps'] / ideal:.2f}x the ideal {format_time(ideal)})"
    else:
        end = run.get("end_ps")
        text = (f"did NOT complete ({status}): {msgs.get('completed')} of {msgs.get('total')} messages finished"
                + (f" by {format_time(end)}" if end is not None else "") + f"; goodput {rate}")
    drops = (s.get("drops") or {}).get("packets")
    parts = [text] + ([victims] if victims else []) + ([f"{drops:,} packets dropped"] if drops else [])
    return "; ".join(parts)


def render_report(result) -> str:
    """The HTML text of the report of ``result`` (a :class:`Result`)."""
    from .plots import figures

    s = result.summary
    e = html.escape
    title = f"fabricsim report: {s.get('scenario', '')}, routing {s.get('routing', '')}, seed {s.get('seed', '')}"
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{e(title)}</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>"]
    run = s.get("run", {})
    parts.append(f"<p>routing <b>{e(str(s.get('routing')))}</b>, status <b>{e(str(run.get('status')))}</b>, "
                 f"fabricsim {e(str(run.get('version')))}</p>")
    parts.append(f"<p class=\"verdict\"><b>Verdict:</b> {e(verdict(s))}</p>")

    eb, pl = s.get("effective_bandwidth", {}), s.get("packet_latency", {})
    msgs = s.get("messages", {})
    headline = [
        ("messages completed", f"{msgs.get('completed')} / {msgs.get('total')}"),
        ("goodput", _fmt_value("goodput_bps", eb.get("goodput_bps"))),
        ("goodput fraction of scale-out NIC line rate", _fmt_value("x", eb.get("nic_goodput_fraction"))),
        ("goodput fraction of all sender ports (NVLink + NIC)", _fmt_value("x", eb.get("goodput_fraction"))),
        ("completion time ratio (ideal / actual)", _fmt_value("x", eb.get("completion_time_ratio"))),
        ("message slowdown p99", _fmt_value("x", s.get("slowdown", {}).get("p99"))),
        ("messages slower than 4x ideal", _fmt_value("x", s.get("slowdown", {}).get("messages_over_4x"))),
        ("message FCT p50 / p99", " / ".join(_fmt_value("_ps", s.get("fct", {}).get(k)) for k in ("p50_ps", "p99_ps"))),
        ("packet latency p50 / p99 / p99.9",
         " / ".join(_fmt_value("_ps", pl.get(k)) for k in ("p50_ps", "p99_ps", "p999_ps"))),
        ("dropped packets", _fmt_value("x", s.get("drops", {}).get("packets"))),
        ("retransmitted bytes", _fmt_value("x", s.get("transport", {}).get("retransmitted_bytes"))),
        ("packets out of order", _fmt_value("x", s.get("transport", {}).get("out_of_order_fraction"))),
        ("PFC pause events", _fmt_value("x", s.get("transport", {}).get("pfc_pause_events"))),
    ]
    parts.append("<h2>Headline</h2><table><tr><th>figure</th><th>value</th></tr>")
    for k, v in headline:
        parts.append(f"<tr><td>{e(k)}</td><td class=\"v\">{e(v)}</td></tr>")
    parts.append("</table>")
    parts.append("<h2>Summary (all fields)</h2><table><tr><th>figure</th><th>value</th></tr>")
    for key, v in _flatten(s):
        parts.append(f"<tr><td>{e(key)}</td><td class=\"v\">{e(_fmt_value(key, v))}</td></tr>")
    parts.append("</table>")

    parts.append("<h2>Plots</h2>")
    figs = figures(result)
    if not figs:
        parts.append("<p>No plots apply (empty tables).</p>")
    for name, fig in figs.items():
        uri = _png_data_uri(fig)
        cap = _CAPTIONS.get(name, name)
        parts.append(f"<figure><img src=\"{uri}\" alt=\"{e(name)}\"><figcaption>{e(cap)}</figcaption></figure>")

    parts.append("<h2>Scenario (resolved)</h2>")
    parts.append(f"<pre>{e(yaml.safe_dump(result.scenario, sort_keys=False))}</pre>")

    parts.append("<h2>Definitions</h2><p>Units: times in picoseconds (_ps), sizes in bytes (_bytes), rates in "
                 "bit/s (_bps). Full definitions: docs/metrics.md of fabricsim.</p>")
    parts.append("<table><tr><th>figure</th><th>meaning</th></tr>")
    for k, v in DEFINITIONS.items():
        parts.append(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>")
    parts.append("</table></body></html>\n")
    return "\n".join(parts)


def write_report(result_or_dir, path: str | Path | None = None) -> Path:
    """Write the self-contained HTML report of a :class:`Result` or a results folder to ``path``
    (default: ``report.html`` in the results folder); returns the path written."""
    if isinstance(result_or_dir, (str, Path)):
        from .load import load_results
        result = load_results(result_or_dir)
    else:
        result = result_or_dir
    if path is None:
        if result.output_dir is None:
            raise ValueError("path is required for a Result that was not written to a folder")
        path = Path(result.output_dir) / "report.html"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_report(result), encoding="utf-8")
    tmp.replace(path)
    return path


# ----------------------------------------------------------------------------- across runs

#: figures where a smaller value is better (the rest of compare's metrics: larger is better)
_LOWER_IS_BETTER_SUFFIXES = ("_us", "_s", "_bytes")
_LOWER_IS_BETTER = {"slowdown_p99", "messages_over_4x", "drops", "out_of_order_fraction", "pfc_pause_events"}
#: metrics shown in the cross-run summary table when present (then every other numeric column)
_COMPARE_SHOWN = ("completion_time_ratio", "goodput_fraction", "fct_max_us", "fct_p99_us", "slowdown_p99",
                  "messages_over_4x", "latency_p99_us", "drops", "retransmitted_bytes")


def _lower_is_better(metric: str) -> bool:
    return metric in _LOWER_IS_BETTER or metric.endswith(_LOWER_IS_BETTER_SUFFIXES)


def _identity(table) -> list[str]:
    ident = table.attrs.get("identity")
    if ident is None:
        cols = list(table.columns)
        ident = cols[:cols.index("seed")] if "seed" in cols else []
    return [c for c in ident if c in table.columns]


def _complete_mask(table):
    """Runs that count in the means: ``status == "complete"`` when the table has a status column,
    else (older tables) every message completed when ``completed`` / ``messages`` are there."""
    import pandas as pd
    if "status" in table.columns:
        return table["status"].astype(str).eq("complete").to_numpy()
    if "completed" in table.columns and "messages" in table.columns:
        return (pd.to_numeric(table["completed"], errors="coerce")
                == pd.to_numeric(table["messages"], errors="coerce")).fillna(False).to_numpy()
    return pd.Series(True, index=table.index).to_numpy()


def _num_text(v) -> str:
    import math
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:.4g}"


def compare_verdict(table, metric: str | None = None) -> str:
    """One line naming the best and worst variant of a :func:`fabricsim.compare` table by the mean
    of ``metric`` over each variant's complete runs (default ``completion_time_ratio``, ideal /
    actual completion time, else ``goodput_fraction``), e.g. ``adaptive completes 2.1x sooner
    than ecmp relative to the ideal (completion_time_ratio 0.95 vs 0.45, means over 3 and 3
    complete runs)``. Runs that are not complete are left out and counted."""
    import pandas as pd

    from ..compare import summarize
    ident = _identity(table)
    ok = _complete_mask(table)
    names = table[ident].astype(str).agg(" ".join, axis=1) if ident else pd.Series(["run"] * len(table),
                                                                                    index=table.index)
    if metric is None:
        metric = next((m for m in ("completion_time_ratio", "goodput_fraction", "fct_max_us")
                       if m in table.columns and pd.to_numeric(table.loc[ok, m], errors="coerce").notna().any()),
                      None)
    dropped = int((~ok).sum())
    tail = f"; {dropped} run{'s' if dropped != 1 else ''} not complete, left out of the means" if dropped else ""
    if metric is None or not ok.any():
        return "no complete run with a figure to compare" + tail
    good = table[ok].assign(_variant=names[ok].to_numpy())
    s = summarize(good.drop(columns=ident), by=["_variant"])
    s = s[s[f"{metric}_mean"].notna()]
    if not len(s):
        return f"no complete run has {metric}" + tail
    lower = _lower_is_better(metric)
    s = s.sort_values(f"{metric}_mean", ascending=lower, kind="stable")
    best, worst = s.iloc[0], s.iloc[-1]
    missing = sorted(set(names) - set(s["_variant"]))
    if missing:
        tail += "; no complete run of " + ", ".join(missing)
    if len(s) == 1:
        return f"only {best['_variant']} to compare: {metric} {_num_text(best[f'{metric}_mean'])}" + tail
    b, w = float(best[f"{metric}_mean"]), float(worst[f"{metric}_mean"])
    counts = f"means over {int(best['runs'])} and {int(worst['runs'])} complete runs"
    if b == w:
        return f"every variant has the same {metric} ({_num_text(b)}; {counts})" + tail
    if metric == "completion_time_ratio":
        head = f"{best['_variant']} completes {b / w:.2f}x sooner than {worst['_variant']} relative to the ideal"
    elif lower and (metric.endswith("_us") or metric.endswith("_s")):
        head = (f"{best['_variant']} is {w / b:.2f}x faster than {worst['_variant']} by {metric}"
                if b > 0 else f"{best['_variant']} is fastest and {worst['_variant']} slowest by {metric}")
    elif lower:
        head = f"{best['_variant']} is best and {worst['_variant']} worst by {metric} (lower is better)"
    else:
        head = f"{best['_variant']} reaches {b / w:.2f}x the {metric} of {worst['_variant']}" if w > 0 else \
            f"{best['_variant']} is best and {worst['_variant']} worst by {metric}"
    return f"{head} ({metric} {_num_text(b)} vs {_num_text(w)}, {counts})" + tail


def render_compare_report(table, title: str = "fabricsim compare", metric: str | None = None) -> str:
    """The HTML text of :func:`write_compare_report`."""
    import math

    import pandas as pd
    from matplotlib.figure import Figure

    from ..compare import summarize
    from .plots import plot_effective_bandwidth

    e = html.escape
    ident = _identity(table)
    ok = _complete_mask(table)
    names = table[ident].astype(str).agg(" ".join, axis=1) if ident else pd.Series(["run"] * len(table),
                                                                                    index=table.index)
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{e(title)}</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>{e(title)}</h1>",
             f"<p>{len(table)} runs, {names.nunique()} variants ({e(', '.join(ident) or 'one configuration')}), "
             f"seeds {e(', '.join(map(str, pd.unique(table['seed'])))) if 'seed' in table else 'n/a'}</p>",
             f"<p class=\"verdict\"><b>Verdict:</b> {e(compare_verdict(table, metric))}</p>"]
    numeric = [c for c in table.columns if c not in ident and c not in ("seed", "status")
               and pd.api.types.is_numeric_dtype(table[c])]
    shown = [m for m in _COMPARE_SHOWN if m in numeric]
    good = table[ok].assign(_variant=names[ok].to_numpy())
    s = summarize(good.drop(columns=ident), by=["_variant"]) if ok.any() else pd.DataFrame(columns=["_variant"])
    parts.append("<h2>Per variant (complete runs only)</h2><p>mean ± 95 % confidence half-width over seeds "
                 "(Student t; none with one run). Lower is better for times, slowdowns, drops and bytes; "
                 "higher for fractions and ratios.</p>")
    parts.append("<table><tr><th>variant</th><th>complete / runs</th>"
                 + "".join(f"<th>{e(m)}</th>" for m in shown) + "</tr>")
    for variant in dict.fromkeys(names):
        row = s[s["_variant"] == variant]
        n_all = int((names == variant).sum())
        n_ok = int(row["runs"].iloc[0]) if len(row) else 0
        cells = []
        for m in shown:
            if not len(row):
                cells.append("n/a")
                continue
            mean, ci = row[f"{m}_mean"].iloc[0], row[f"{m}_ci95"].iloc[0]
            cells.append(_num_text(mean) + ("" if ci is None or math.isnan(ci) else f" ± {ci:.2g}"))
        cls = " class=\"flag\"" if n_ok < n_all else ""
        parts.append(f"<tr{cls}><td>{e(variant)}</td><td class=\"v\">{n_ok} / {n_all}</td>"
                     + "".join(f"<td class=\"v\">{e(c)}</td>" for c in cells) + "</tr>")
    parts.append("</table>")
    if ok.any() and any(m in table.columns for m in ("goodput_fraction", "completion_time_ratio")):
        fig = Figure(figsize=(max(5.0, 1.2 * good["_variant"].nunique() + 2), 4.0))
        ax = fig.add_subplot()
        plot_effective_bandwidth(good.assign(policy=good["_variant"]), ax=ax, by="policy")
        ax.set_title(f"Effective bandwidth: {title}\ncomplete runs only; error bars 95 % CI of the mean",
                     fontsize="medium")
        fig.tight_layout()
        parts.append(f"<figure><img src=\"{_png_data_uri(fig)}\" alt=\"effective bandwidth\"><figcaption>"
                     "Mean over each variant's complete runs; error bars: 95 % confidence interval of the mean "
                     "(Student t), the interval of the table above.</figcaption></figure>")
    parts.append("<h2>Every run</h2><p>Rows in red did not complete (status other than <code>complete</code>) "
                 "and are left out of the means.</p><table><tr>"
                 + "".join(f"<th>{e(c)}</th>" for c in ident + ["seed", "status"] + shown) + "</tr>")
    for i, (_, r) in enumerate(table.iterrows()):
        status = str(r["status"]) if "status" in table.columns else ("complete" if ok[i] else "incomplete")
        cls = "" if ok[i] else " class=\"flag\""
        cells = [str(r[c]) for c in ident] + [str(r.get("seed", ""))] + [status + ("" if ok[i] else " (excluded)")]
        cells += [_num_text(r[m]) for m in shown]
        parts.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    parts.append("</table><h2>Definitions</h2><table><tr><th>figure</th><th>meaning</th></tr>")
    for k, v in DEFINITIONS.items():
        parts.append(f"<tr><td>{e(k)}</td><td>{e(v)}</td></tr>")
    parts.append("</table></body></html>\n")
    return "\n".join(parts)


def write_compare_report(table, out_path: str | Path, title: str = "fabricsim compare",
                         metric: str | None = None) -> Path:
    """Write one self-contained HTML report of a :func:`fabricsim.compare` table to ``out_path``.

    ``table`` has the identity columns (``table.attrs['identity']``, else every column before
    ``seed``), ``seed`` and metric columns, and optionally ``status``: runs whose status is not
    ``complete`` (or, without a status column, whose ``completed`` differs from ``messages``) are
    listed and flagged, and left out of every mean and of the verdict (:func:`compare_verdict`,
    by ``metric``). Returns the path written (atomically: no half-written file)."""
    path = Path(out_path)
    text = render_compare_report(table, title=title, metric=metric)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
