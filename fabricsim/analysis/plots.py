"""Plots of a run's tables (matplotlib).

Every ``plot_*`` function takes a DataFrame (or a :class:`~fabricsim.analysis.result.Result`,
from which it takes the right table) and an optional matplotlib ``Axes``; it draws on that Axes
(or on a new pyplot figure, which a notebook displays) and returns the Axes. Axis labels carry
units. Given a Result, the title names its scenario, routing policy and seed. Column meanings
are in docs/metrics.md.

Nothing here selects a matplotlib backend: :func:`figures` and :func:`write_plots` build
:class:`matplotlib.figure.Figure` objects outside pyplot (rendered to PNG by Agg whatever the
session's backend is), so writing plot files neither needs a display nor stops a notebook's
own figures from showing.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

PS_PER_US = 1e6
#: utilisation of a sample interval counted as saturated by :func:`plot_link_utilisation_timeseries`
SATURATED = 0.9


def _ax(ax):
    if ax is None:
        import matplotlib.pyplot as plt   # a figure the session's backend shows (inline in a notebook)
        _, ax = plt.subplots(figsize=(7, 4.2))
    return ax


def run_label(obj) -> str | None:
    """"scenario <name>, routing <policy>, seed <n>" of a Result (or a summary dict), else None."""
    s = obj if isinstance(obj, dict) else getattr(obj, "summary", None)
    if not isinstance(s, dict) or "scenario" not in s:
        return None
    return f"scenario {s.get('scenario')}, routing {s.get('routing')}, seed {s.get('seed')}"


def _title(ax, text: str, obj=None):
    """Set ``text`` as the title, with the run's identity (:func:`run_label`) when ``obj`` has one."""
    label = run_label(obj) if obj is not None else None
    ax.set_title(text if label is None else f"{text}\n{label}", fontsize="medium")


def _table(obj, attr):
    """``obj`` itself if a DataFrame, else its ``attr`` table (a Result)."""
    if isinstance(obj, pd.DataFrame):
        return obj
    if hasattr(obj, attr):
        return getattr(obj, attr)
    raise TypeError(f"expected a DataFrame or a Result, got {type(obj).__name__}")


def _empty(ax, what):
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", transform=ax.transAxes)


def plot_fct_cdf(messages, ax=None, label: str | None = None):
    """CDF of message completion time (``fct_ps``, completed messages) in microseconds.

    ``messages`` is a messages table, a Result, or a dict ``name -> table/Result`` to compare
    several policies on one Axes.
    """
    ax = _ax(ax)
    series = messages if isinstance(messages, dict) else {label: messages}
    drawn = False
    for name, m in series.items():
        m = _table(m, "messages")
        done = m[m["completed"].astype(bool)] if "completed" in m else m
        fct = np.sort(done["fct_ps"].dropna().astype("float64").to_numpy()) / PS_PER_US
        if len(fct) == 0:
            continue
        y = np.arange(1, len(fct) + 1) / len(fct)
        ax.step(fct, y, where="post", label=None if name is None else str(name))
        drawn = True
    if not drawn:
        _empty(ax, "completed messages")
    ax.set_xlabel("message completion time (µs)")
    ax.set_ylabel("fraction of messages")
    ax.set_ylim(0, 1.02)
    _title(ax, "Message completion time CDF", None if isinstance(messages, dict) else messages)
    ax.grid(True, alpha=0.3)
    if drawn and any(k is not None for k in series):
        ax.legend()
    return ax


def histogram_percentile(latency: pd.DataFrame, q: float) -> float | None:
    """The q-th percentile (0-100, ps) of a latency histogram table: the geometric middle of the
    first bucket whose cumulative fraction reaches q/100 (as the recorder reports it)."""
    if latency is None or len(latency) == 0:
        return None
    cum = latency["cumulative_fraction"].to_numpy()
    i = int(np.searchsorted(cum, q / 100.0 - 1e-12))
    i = min(i, len(cum) - 1)
    return float(np.sqrt(latency["lower_ps"].iloc[i] * latency["upper_ps"].iloc[i]))


def _log_ticks(ax, lo: float, hi: float):
    """Readable labels on a log x axis from ``lo`` to ``hi``: decades labelled, and 2 and 5 times
    them only when the axis spans at most two decades (labelling every minor tick of a wider axis
    makes the labels run into each other)."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
    decades = np.log10(max(hi, 1e-300) / max(lo, 1e-300)) if lo > 0 else 10.0
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=12))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0) if decades <= 2 else tuple(range(2, 10)),
                                          numticks=12))
    ax.xaxis.set_minor_formatter(FormatStrFormatter("%g") if decades <= 2 else NullFormatter())
    ax.tick_params(axis="x", which="minor", labelsize="x-small")


def plot_latency_cdf(latency, summary: dict | None = None, ax=None):
    """CDF of one-way packet latency (µs, log scale) from the histogram table, with p50, p99 and
    p99.9 marked (from ``summary['packet_latency']`` if given, else from the histogram)."""
    if summary is None and hasattr(latency, "summary"):
        summary = latency.summary
    lat = _table(latency, "latency")
    ax = _ax(ax)
    if len(lat) == 0:
        _empty(ax, "packet latencies")
    else:
        x = np.concatenate([[lat["lower_ps"].iloc[0]], lat["upper_ps"].to_numpy()]) / PS_PER_US
        y = np.concatenate([[0.0], lat["cumulative_fraction"].to_numpy()])
        ax.step(x, y, where="post", label="packets")
        pl = (summary or {}).get("packet_latency", {})
        for key, q, color in (("p50_ps", 50, "tab:green"), ("p99_ps", 99, "tab:orange"),
                              ("p999_ps", 99.9, "tab:red")):
            v = pl.get(key)
            if v is None:
                v = histogram_percentile(lat, q)
            if v is None:
                continue
            name = f"p{q:g}"
            ax.axvline(v / PS_PER_US, color=color, linestyle="--", linewidth=1,
                       label=f"{name} = {v / PS_PER_US:.3g} µs")
        ax.set_xscale("log")
        _log_ticks(ax, x[0], x[-1])
        ax.legend(loc="lower right", fontsize="small")
    ax.set_xlabel("packet latency (µs)")
    ax.set_ylabel("fraction of packets")
    ax.set_ylim(0, 1.02)
    _title(ax, "Packet latency CDF", latency)
    ax.grid(True, alpha=0.3, which="both")
    return ax


def plot_goodput(goodput, ax=None, label: str | None = None):
    """Delivered payload rate per time bin (Gbit/s) against simulated time (µs)."""
    g = _table(goodput, "goodput")
    ax = _ax(ax)
    if len(g) == 0:
        _empty(ax, "goodput samples")
    else:
        ax.step(g["bin_start_ps"].to_numpy() / PS_PER_US, g["goodput_bps"].to_numpy() / 1e9,
                where="post", label=label)
        if label is not None:
            ax.legend()
    ax.set_xlabel("simulated time (µs)")
    ax.set_ylabel("goodput (Gbit/s)")
    _title(ax, "Goodput over time", goodput)
    ax.grid(True, alpha=0.3)
    return ax


def plot_link_utilisation(links, ax=None, max_links: int = 400, link_timeseries=None):
    """Utilisation (% of line rate, averaged over the whole run) of each directed link, grouped and
    coloured by link kind (tier), sorted within a kind. Only the ``max_links`` busiest links are
    shown.

    An average over the run hides saturated periods (a link busy at 100 % for a tenth of the run
    shows 10 %). Given the link time series (``link_timeseries``, or a Result that has one), each
    bar also gets a black tick at the link's busiest sample interval, and
    :func:`plot_link_utilisation_timeseries` / :func:`plot_link_heatmap` show the time course.
    """
    lk = _table(links, "links")
    if link_timeseries is None and not isinstance(links, pd.DataFrame):
        link_timeseries = getattr(links, "link_timeseries", None)
    lt = _table(link_timeseries, "link_timeseries") if link_timeseries is not None else None
    ax = _ax(ax)
    if len(lk) == 0 or "utilisation" not in lk:
        _empty(ax, "links")
    else:
        df = lk.copy()
        if "kind" not in df:
            df["kind"] = "link"
        df["kind"] = df["kind"].fillna("link").astype(str)
        peak = None
        if lt is not None and len(lt) and "link_id" in df:
            peak = lt.groupby("link_id")["utilisation"].max()
            df["_peak"] = df["link_id"].map(peak)
        if len(df) > max_links:
            df = df.nlargest(max_links, "utilisation")
        df = df.sort_values(["kind", "utilisation"], ascending=[True, False], kind="stable")
        x0 = 0
        for i, (kind, g) in enumerate(df.groupby("kind", sort=False)):
            xs = np.arange(x0, x0 + len(g))
            ax.bar(xs, g["utilisation"].to_numpy() * 100, width=1.0, color=f"C{i % 10}",
                   label=f"{kind} ({len(g)}), mean over the run")
            if peak is not None:
                ax.scatter(xs, g["_peak"].to_numpy(dtype=float) * 100, marker="_", color="black", s=40,
                           zorder=3, label="busiest sample interval" if i == 0 else None)
            x0 += len(g) + 1
        ax.legend(fontsize="small")
        ax.set_xlim(-1, x0)
    ax.set_xlabel("directed link (grouped by kind, busiest first)")
    ax.set_ylabel("utilisation (% of line rate)")
    _title(ax, "Link utilisation, averaged over the run", links)
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def plot_link_utilisation_timeseries(link_timeseries, links, ax=None, top: int = 6):
    """Utilisation (% of line rate) per sample interval against simulated time (µs) of the ``top``
    busiest links (``Result.link_timeseries``, ``outputs.link_sample_interval``): those that spent
    longest at or above :data:`SATURATED` of line rate, then by highest interval. It shows when and
    for how long links were saturated, which the run-average bars of
    :func:`plot_link_utilisation` cannot."""
    ax, lt, lk = _link_series(link_timeseries, links, ax)
    if lt is None:
        return ax
    width = (lt["bin_end_ps"] - lt["bin_start_ps"]).astype("float64")
    busy = (width * (lt["utilisation"] >= SATURATED)).groupby(lt["link_id"]).sum() / PS_PER_US
    rank = pd.DataFrame({"busy_us": busy, "peak": lt.groupby("link_id")["utilisation"].max()})
    rank = rank.sort_values(["busy_us", "peak"], ascending=False, kind="stable").head(top)
    peak = rank["peak"]
    names = lk.set_index("link_id") if "link_id" in lk else None
    for link_id, p in peak.items():
        d = lt[lt["link_id"] == link_id].sort_values("bin_start_ps")
        t = np.append(d["bin_start_ps"].to_numpy(dtype=float), d["bin_end_ps"].to_numpy(dtype=float)[-1:]) / PS_PER_US
        u = d["utilisation"].to_numpy(dtype=float) * 100
        label = str(link_id)
        if names is not None and link_id in names.index:
            row = names.loc[link_id]
            label = f"{row.get('src_name', row.get('src'))}->{row.get('dst_name', row.get('dst'))}"
        ax.stairs(u, t, label=f"{label} (peak {p * 100:.0f} %, {rank.loc[link_id, 'busy_us']:.3g} µs "
                              f"at >= {SATURATED * 100:.0f} %)")
    ax.axhline(100, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xlabel("simulated time (µs)")
    ax.set_ylabel("utilisation per interval (% of line rate)")
    ax.set_ylim(0, 105)
    _title(ax, f"Utilisation over time of the {len(peak)} busiest links", links)
    ax.legend(fontsize="x-small", loc="upper right")
    ax.grid(True, alpha=0.3)
    return ax


def plot_effective_bandwidth(df: pd.DataFrame, ax=None, metrics=("goodput_fraction", "completion_time_ratio"),
                             by: str = "policy"):
    """Bars per policy (column ``by``) of the effective-bandwidth figures (fractions, 1.0 = ideal):
    the mean over rows (seeds), with an error bar of the 95 % confidence interval of that mean
    (Student t, :func:`fabricsim.compare.ci95_halfwidth`; the ``_ci95`` columns of
    :func:`fabricsim.compare.summarize`) when a policy has several rows. The legend says so.

    ``df`` is tidy: one row per run with a ``by`` column and the ``metrics`` columns (e.g. a
    DataFrame of :meth:`Result.headline` dicts with a policy column, or the table of
    :func:`fabricsim.compare`).
    """
    from ..compare import ci95_halfwidth

    ax = _ax(ax)
    if by not in df.columns and "routing" in df.columns:
        by = "routing"
    metrics = [m for m in metrics if m in df.columns]
    if len(df) == 0 or not metrics:
        _empty(ax, "effective-bandwidth figures")
    else:
        groups = list(dict.fromkeys(df[by].astype(str)))
        key = df[by].astype(str)
        width = 0.8 / len(metrics)
        x = np.arange(len(groups))
        any_ci = False
        for j, m in enumerate(metrics):
            vals = pd.to_numeric(df[m], errors="coerce")
            mean = [vals[key == gname].mean() for gname in groups]
            n = [int(vals[key == gname].count()) for gname in groups]
            ci = [ci95_halfwidth(vals[key == gname].dropna().tolist()) if c > 1 else 0.0   # no bar for one run
                  for gname, c in zip(groups, n)]
            yerr = ci if any(c > 1 for c in n) else None
            any_ci = any_ci or yerr is not None
            ax.bar(x + (j - (len(metrics) - 1) / 2) * width, np.nan_to_num(mean), width, yerr=yerr,
                   capsize=4 if yerr is not None else 0, label=m.replace("_", " "))
        ax.set_xticks(x)
        ax.set_xticklabels(groups)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
        ax.set_ylim(0, max(1.0, ax.get_ylim()[1]) * 1.3)      # room for the legend above the bars
        ax.legend(fontsize="small", title="mean over seeds; error bars: 95 % CI of the mean" if any_ci else None,
                  title_fontsize="x-small", loc="upper left", ncol=len(metrics))
    ax.set_xlabel(by)
    ax.set_ylabel("fraction of ideal (1 = ideal fabric)")
    scen = df["scenario"].iloc[0] if len(df) and "scenario" in df.columns and df["scenario"].nunique() == 1 else None
    seeds = sorted(pd.unique(df["seed"])) if len(df) and "seed" in df.columns else []
    sub = ", ".join(x for x in (f"scenario {scen}" if scen is not None else None,
                                f"{by} per bar", f"seeds {', '.join(map(str, seeds))}" if seeds else None) if x)
    ax.set_title(f"Effective bandwidth\n{sub}", fontsize="medium")
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def plot_collectives(collectives, ax=None, max_ops: int = 60):
    """Completion time (µs) of each traced operation, in trace order (first ``max_ops``), with its
    ideal time (``ideal_time_ps``, the lower bound of its messages alone) marked, a legend, and
    the time written on each bar when at most 24 are drawn. Incomplete operations are red stubs."""
    c = _table(collectives, "collectives")
    ax = _ax(ax)
    if len(c) == 0:
        _empty(ax, "traced operations")
    else:
        c = c.head(max_ops)
        t = pd.to_numeric(c["time_ps"], errors="coerce").astype("float64").to_numpy() / PS_PER_US
        done = ~np.isnan(t)
        xs = np.arange(len(c))
        bars = ax.bar(xs[done], t[done], color="C0", label="completion time")
        if len(xs) <= 24 and done.any():
            ax.bar_label(bars, labels=[f"{v:.3g}" for v in t[done]], fontsize="x-small", padding=1)
        if "ideal_time_ps" in c:
            ideal = pd.to_numeric(c["ideal_time_ps"], errors="coerce").astype("float64").to_numpy() / PS_PER_US
            ok = ~np.isnan(ideal)
            if ok.any():
                ax.scatter(xs[ok], ideal[ok], marker="_", s=120, color="black", zorder=3,
                           label="ideal (lower bound)")
        if (~done).any():
            ax.bar(xs[~done], np.zeros((~done).sum()), color="C3", label="incomplete")
        ax.set_xticks(xs)
        labels = c["op"].astype(str).tolist()
        for col in ("collective", "phase"):
            if col in c:
                labels = [f"{o} {k}" if k not in ("", "nan", "None", "<NA>") else o
                          for o, k in zip(labels, c[col].astype(str))]
        if len(labels) <= 8:      # few operations: horizontal, one word per line
            ax.set_xticklabels([lab.replace(" ", "\n") for lab in labels], fontsize="x-small")
        else:
            ax.set_xticklabels(labels, rotation=90, fontsize="x-small")
        ax.legend(fontsize="small")
        ax.margins(y=0.12)
    ax.set_xlabel("operation")
    ax.set_ylabel("completion time (µs)")
    _title(ax, "Per-operation completion time", collectives)
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def _link_series(link_timeseries, links, ax):
    """(ax, link time series, links table); the series is None (and the Axes says so) if empty."""
    ax = _ax(ax)
    lt = _table(link_timeseries, "link_timeseries")
    if lt is None or not len(lt):
        _empty(ax, "link time series (see outputs.link_sample_interval)")
        return ax, None, None
    return ax, lt, _table(links, "links")


def plot_link_heatmap(link_timeseries, links, ax=None, max_links: int = 200):
    """Utilisation of each link over time (``Result.link_timeseries``), links grouped by kind
    (tier) and, within a kind, busiest first; at most ``max_links`` rows."""
    ax, lt, lk = _link_series(link_timeseries, links, ax)
    if lt is None:
        return ax
    order = lk.sort_values(["kind", "tx_bytes"], ascending=[True, False])
    order = order.groupby("kind", sort=True, group_keys=False).head(max(1, max_links // max(1, order["kind"].nunique())))
    ids = order["link_id"].tolist()
    grid = lt.pivot_table(index="link_id", columns="bin_start_ps", values="utilisation").reindex(ids)
    t = np.asarray(grid.columns, dtype=float) / 1e6
    step = (t[1] - t[0]) if len(t) > 1 else 1.0
    im = ax.imshow(grid.to_numpy() * 100, aspect="auto", interpolation="nearest", vmin=0, vmax=100, cmap="viridis",
                   extent=(t[0], t[-1] + step, len(ids), 0))
    ax.figure.colorbar(im, ax=ax, label="utilisation (% of line rate)")
    # tier labels at the middle of each group
    kinds = order["kind"].tolist()
    edges = [i for i in range(1, len(kinds)) if kinds[i] != kinds[i - 1]]
    for e in edges:
        ax.axhline(e, color="white", lw=0.8)
    starts = [0] + edges
    ends = edges + [len(kinds)]
    ax.set_yticks([(a + b) / 2 for a, b in zip(starts, ends)], [kinds[a] for a in starts])
    ax.set_xlabel("simulated time (us)")
    ax.set_ylabel("links by tier (busiest first)")
    _title(ax, "Link utilisation over time (per sample interval)", links)
    return ax


def plot_queue_timeseries(link_timeseries, links, ax=None, top: int = 8):
    """Queue occupancy over time of the ``top`` ports with the largest peak queue."""
    ax, lt, lk = _link_series(link_timeseries, links, ax)
    if lt is None:
        return ax
    hot = lk.sort_values("peak_queue_bytes", ascending=False).head(top)
    for row in hot.itertuples():
        d = lt[lt["link_id"] == row.link_id]
        label = f"{getattr(row, 'src_name', row.src)}->{getattr(row, 'dst_name', row.dst)}"
        ax.step(d["bin_end_ps"] / 1e6, d["queue_bytes"] / 1024, where="post", label=label)
    ax.set_xlabel("simulated time (us)")
    ax.set_ylabel("queued (KiB)")
    _title(ax, f"Queue occupancy, {len(hot)} hottest ports (sampled)", links)
    ax.legend(fontsize=7, loc="upper right")
    return ax


REORDER_COLUMNS = ("reorder_distance_p50_packets", "reorder_distance_p99_packets", "reorder_distance_max_packets")
_GROUP_COLUMNS = ("label", "policy", "routing", "receiver", "cc", "run")


def _reorder_groups(messages, by):
    """(table, group column, group-axis label) for :func:`plot_reorder_distance`."""
    if isinstance(messages, dict):
        parts = [_table(m, "messages").assign(label=str(name)) for name, m in messages.items()]
        df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        return df, "label", "run"
    df = _table(messages, "messages")
    if by is None:
        identity = [k for k in df.attrs.get("identity", []) if k in df.columns and k != "seed"]
        if len(identity) > 1:
            df = df.assign(_group=df[identity].astype(str).agg(" ".join, axis=1))
            return df, "_group", " ".join(identity)
        if identity:
            by = identity[0]
        else:
            by = next((c for c in _GROUP_COLUMNS if c in df.columns), "dst")
    return df, by, "receiver host" if by == "dst" else by


def plot_reorder_distance(messages, ax=None, by: str | None = None, max_groups: int = 40):
    """Reorder distance (packets) per group of messages: bars of p50, p99 and max.

    ``messages`` is a messages table (a Result, or several runs' tables concatenated with a label
    column), or a dict ``name -> table/Result``. Groups are the ``by`` column; by default the
    table's ``attrs['identity']`` columns, else the first of ``label``, ``policy``, ``routing``,
    ``receiver``, ``cc``, ``run`` present, else the receiver host (``dst``).

    A message's reorder distance is how many packets of its queue pair a packet arrived behind
    (0 when in order; docs/metrics.md). The per-message histogram is not in the tables, only its
    percentiles, so a group's bars are: the mean over the group's messages of each message's p50,
    the mean of each message's p99, and the largest max. Messages that received no packet are left
    out. With more than ``max_groups`` groups, those with the largest max are shown.
    """
    ax = _ax(ax)
    df, by, by_label = _reorder_groups(messages, by)
    have = len(df) and all(c in df.columns for c in REORDER_COLUMNS) and by in df.columns
    if have and "received_packets" in df.columns:
        df = df[pd.to_numeric(df["received_packets"], errors="coerce").fillna(0) > 0]
    if not have or not len(df):
        _empty(ax, "reorder statistics (messages table without transport columns)")
    else:
        vals = df[[by]].copy()
        for c in REORDER_COLUMNS:
            vals[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
        g = vals.groupby(by, sort=False).agg(p50=(REORDER_COLUMNS[0], "mean"), p99=(REORDER_COLUMNS[1], "mean"),
                                             max=(REORDER_COLUMNS[2], "max"), n=(REORDER_COLUMNS[2], "size"))
        if by == "dst":
            g = g.sort_index()
        shown = g
        if len(g) > max_groups:
            shown = g.loc[g["max"].nlargest(max_groups).index]
        x = np.arange(len(shown))
        width = 0.27
        for j, (col, name) in enumerate((("p50", "p50 (mean over messages)"), ("p99", "p99 (mean over messages)"),
                                         ("max", "max"))):
            ax.bar(x + (j - 1) * width, shown[col].fillna(0).to_numpy(), width, color=f"C{j}", label=name)
        ax.set_xticks(x)
        labels = [str(k) for k in shown.index]
        ax.set_xticklabels(labels, rotation=90 if len(labels) > 8 or max(map(len, labels)) > 12 else 0,
                           fontsize="small" if len(labels) <= 16 else "x-small")
        ax.legend(fontsize="small")
        if len(shown) < len(g):
            ax.text(0.99, 0.98, f"{len(shown)} of {len(g)} groups (largest max)", ha="right", va="top",
                    transform=ax.transAxes, fontsize="small")
    ax.set_xlabel(by_label)
    ax.set_ylabel("reorder distance (packets)")
    _title(ax, "Reorder distance per " + by_label, None if isinstance(messages, dict) else messages)
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def _has_reordering(messages) -> bool:
    if messages is None or not len(messages) or "out_of_order_fraction" not in messages.columns:
        return False
    return bool((pd.to_numeric(messages["out_of_order_fraction"], errors="coerce").fillna(0) > 0).any())


def figures(result) -> dict:
    """The plots that apply to ``result``: name -> :class:`matplotlib.figure.Figure`.

    The figures are made outside pyplot (no backend is selected or changed, nothing is shown,
    nothing needs closing); each has a super-title naming the run's scenario, routing policy and
    seed (:func:`run_label`)."""
    out = {}
    label = run_label(result)

    def new(name, fn, *args, **kw):
        fig = Figure(figsize=(7, 4.6))
        ax = fig.add_subplot()
        fn(*args, ax=ax, **kw)
        if label is not None:
            fig.suptitle(label, fontsize="small", color="#444")
        fig.tight_layout()
        out[name] = fig

    lt = getattr(result, "link_timeseries", None)
    has_lt = lt is not None and len(lt) > 0
    if len(result.messages):
        new("fct_cdf", plot_fct_cdf, result.messages)
    if len(result.latency):
        new("latency_cdf", plot_latency_cdf, result.latency, summary=result.summary)
    if len(result.goodput):
        new("goodput", plot_goodput, result.goodput)
    if len(result.links):
        new("link_utilisation", plot_link_utilisation, result.links, link_timeseries=lt if has_lt else None)
    if _has_reordering(result.messages):
        new("reorder_distance", plot_reorder_distance, result.messages)
    if result.collectives is not None and len(result.collectives):
        new("collectives", plot_collectives, result.collectives)
    if has_lt:
        new("link_utilisation_timeseries", plot_link_utilisation_timeseries, lt, result.links)
        new("link_heatmap", plot_link_heatmap, lt, result.links)
        if not result.summary.get("not_modelled", {}).get("queues"):
            new("queue_timeseries", plot_queue_timeseries, lt, result.links)
    return out


def write_plots(result, out_dir: str | Path, dpi: int = 110) -> list[Path]:
    """Write the applicable plots of ``result`` (:func:`figures`) as PNG files into ``out_dir``;
    returns the paths. Works headless and leaves the matplotlib backend alone."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figures(result).items():
        p = out_dir / f"{name}.png"
        fig.savefig(p, dpi=dpi)
        paths.append(p)
    return paths
