"""The HTML report of runs: one self-contained file (styles inline, plots inline, no script, no network).

`build_report(paths, baseline)` reads run directories (``simulate --out``), directories of runs and experiment
outputs, and returns the HTML text: the comparison table of every run (experiments/compare.py builds it, with
each metric's change against the baseline), the assumptions the runs recorded (report_data.py) and the plots the
data allows (report_plots.py): cluster power with the price and carbon series on second axes, nodes on / booting /
off, allocated GPUs and queue length, JCT distributions (CDF), energy against mean JCT (the trade-off frontier)
and each experiment's own figures. Any experiment on the protocol (experiments/protocol.py) is read the same way:
its records.csv, config.yaml, summary.md and the figures summary.md shows. Pure: directories in, text out (the
CLI writes it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from .compare import (
    DELTA_SUFFIX,
    MISSING,
    column_definitions,
    comparison,
    format_delta,
    format_value,
    is_component,
    is_run_dir,
    job_model_differences,
    shown_metrics,
)
from .jobmodel import summary_line
from .protocol import Section
from .report_data import esc, experiment_assumptions, load_run, run_assumptions, short_names
from .report_plots import (
    PLOTS_SKIPPED,
    experiment_figures,
    frontier,
    plot_energy_jct,
    plot_gpus_queue,
    plot_jct_cdf,
    plot_nodes,
    plot_power,
    plots_available,
)

__all__ = ["PLOTS_SKIPPED", "build_report", "frontier", "plots_available"]

PathLike = str | Path


# -- HTML ------------------------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:1rem 1.5rem;color:#1d2330;background:#fff;line-height:1.45}
h1{font-size:1.6rem;margin:.2rem 0}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #d8dde6;
padding-bottom:.2rem}
.meta{color:#5a6272;font-size:.85rem}
nav a{margin-right:1rem;font-size:.9rem}
.scroll{overflow-x:auto;max-height:75vh;overflow-y:auto;border:1px solid #e3e7ee}
table{border-collapse:collapse;font-size:.8rem;width:100%}
th,td{padding:.25rem .45rem;border-bottom:1px solid #eef0f4;text-align:right;white-space:nowrap;vertical-align:top}
th{background:#f3f5f9;position:sticky;top:0;z-index:1}
td.l,th.l{text-align:left;white-space:normal;min-width:8rem}
tr.base td{background:#fff7e0}
.delta{display:block;font-size:.72rem;color:#6b7385}.better{color:#1a7f37}.worse{color:#b3261e}
.rec{display:inline-block;font-size:.7rem;background:#fff1c2;color:#7a5b00;border-radius:3px;padding:0 .3rem;
margin-left:.3rem}
figure{margin:1rem 0 1.6rem}figure svg{max-width:100%;height:auto}
figcaption{font-size:.85rem;color:#5a6272}
.missing{color:#8a91a0;font-style:italic;font-size:.9rem}
ul.assume{font-size:.85rem}ul.assume li{margin:.15rem 0}.runs{color:#6b7385}
p.warn{background:#fde8e6;border-left:3px solid #b3261e;padding:.5rem 1rem;font-size:.9rem}
ul.notes{font-size:.9rem;background:#f7f8fb;border-left:3px solid #c9a227;padding:.5rem 1rem .5rem 2rem}
details pre{white-space:pre-wrap;font-size:.75rem;background:#f7f8fb;padding:.5rem}
"""

LOWER_IS_BETTER = {
    "energy_kwh", "cost_usd", "co2_kg", "jct_mean_s", "jct_p95_s", "queue_delay_mean_s", "makespan_s",
    "deadline_misses", "slo_violation_hours", "restarts",
}  # fmt: skip
HIGHER_IS_BETTER = {"jobs_completed", "gpu_allocation", "grar"}


def _delta_class(key: str, delta: float) -> str:
    if not math.isfinite(delta) or round(delta, 1) == 0:
        return ""
    lower = key in LOWER_IS_BETTER or is_component(key)
    if not lower and key not in HIGHER_IS_BETTER:
        return ""
    return " better" if (delta < 0) == lower else " worse"


def table_html(frame: pd.DataFrame, metrics: list, table_id: str) -> str:
    head = "".join(f'<th title="{esc(m.key)}">{esc(m.header)}</th>' for m in metrics)
    rows = []
    for r in frame.to_dict("records"):
        policy = esc(r["policy"])
        if r["reconstructed"]:
            policy += f'<span class="rec" title="{esc(r["basis"])}">reconstructed</span>'
        cells = []
        for m in metrics:
            cell = esc(format_value(m, r[m.key]))
            if not r["baseline"]:
                delta = r[m.key + DELTA_SUFFIX]
                cell += f'<span class="delta{_delta_class(m.key, delta)}">{esc(format_delta(delta))}</span>'
            cells.append(f"<td>{cell}</td>")
        mark = " <b>(baseline)</b>" if r["baseline"] else ""
        rows.append(
            f'<tr{" class=base" if r["baseline"] else ""}><td class="l">{esc(r["run"])}{mark}</td>'
            f'<td class="l">{policy}</td>{"".join(cells)}</tr>'
        )
    return (
        f'<div class="scroll"><table id="{table_id}"><thead><tr><th class="l">run</th><th class="l">policy</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def section_html(section: Section, index: int) -> str:
    """A :class:`~.protocol.Section` as HTML: a heading, its sentences (a line starting "- " is a list item) and
    its table (values as summary.md shows them: floats to the section's significant digits)."""
    from .protocol import cell_text

    parts = [f'<h2 id="section-{index + 1}">{esc(section.title)}</h2>']
    items = [line[2:].replace("**", "") for line in section.lines if line.startswith("- ")]
    parts += [f"<p>{_inline(line)}</p>" for line in section.lines if line and not line.startswith("- ")]
    if items:
        parts += ['<ul class="assume">', *(f"<li>{_inline(item)}</li>" for item in items), "</ul>"]
    table = section.table
    if table is not None and not table.empty:
        parts.append('<div class="scroll"><table>')
        parts.append("<tr>" + "".join(f'<th class="l">{esc(str(c))}</th>' for c in table.columns) + "</tr>")
        for row in table.itertuples(index=False):
            cells = "".join(f"<td>{esc(cell_text(v, section.digits))}</td>" for v in row)
            parts.append(f"<tr>{cells}</tr>")
        parts.append("</table></div>")
    return "\n".join(parts)


def _inline(text: str) -> str:
    """A Markdown sentence of a section as HTML: escaped, `code` spans as <code>, ** dropped."""
    pieces = esc(text.replace("**", "")).split("`")
    if len(pieces) % 2 == 0:  # an unpaired backtick: left as it is
        return "`".join(pieces)
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))


def _figure(key: str, title: str, made: tuple[str, str] | None, why: str) -> str:
    if made is None:
        return f'<h3>{esc(title)}</h3><p class="missing" id="plot-{key}-missing">{esc(why)}</p>'
    svg, caption = made
    return (
        f'<figure id="plot-{key}"><h3>{esc(title)}</h3>{svg}<figcaption>{esc(caption)}</figcaption></figure>'
    )


def _assumptions_html(items: list[tuple[str, str, str]], total: int) -> str:
    """items: (topic, text, run name); one line per (topic, text) with the runs that record it."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for topic, text, run in items:
        grouped.setdefault((topic, text), [])
        if run not in grouped[(topic, text)]:
            grouped[(topic, text)].append(run)
    lines = []
    for (topic, text), runs in grouped.items():
        who = "all runs" if len(runs) == total and total > 1 else ", ".join(runs)
        lines.append(f'<li><b>{esc(topic)}</b>: {esc(text)} <span class="runs">({esc(who)})</span></li>')
    return f'<ul class="assume" id="assumptions-list">{"".join(lines)}</ul>'


def build_report(
    paths: Sequence[PathLike],
    baseline: PathLike | None = None,
    title: str = "wattsched report",
    generated: str | None = None,
    notes: Sequence[str] = (),
    frame: pd.DataFrame | None = None,
    sections: Sequence[Section] = (),
) -> str:
    """The report of the runs in `paths` (see the module's docstring) as one HTML document; `notes` (what the
    reader must know first, such as generated inputs) open it. `frame`: their comparison
    (``comparison(paths, baseline)``) where the caller has it already. `sections`: parts of the caller's own
    (an experiment's :class:`~.protocol.Section`: a heading, sentences, a table), after the comparison."""
    frame = comparison(paths, baseline) if frame is None else frame
    names = short_names(frame)
    runs = [
        load_run(label, name, Path(source))
        for label, name, source, experiment in zip(
            frame["run"], names, frame["source"], frame["experiment"], strict=True
        )
        if not experiment and is_run_dir(Path(source))
    ]
    experiments = list(
        dict.fromkeys((s, e) for s, e in zip(frame["source"], frame["experiment"], strict=True) if e)
    )
    base = frame.loc[frame["baseline"], "run"].iloc[0]
    diffs = job_model_differences(frame)

    metrics = shown_metrics(frame)
    components = [m for m in metrics if is_component(m.key)]
    main = [m for m in metrics if not is_component(m.key)]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">{len(frame)} run(s) from {esc(", ".join(str(p) for p in paths))}; changes against '
        f"<b>{esc(base)}</b>" + (f"; generated {esc(generated)}" if generated else "") + "</p>",
        '<nav><a href="#comparison">comparison</a><a href="#assumptions">assumptions</a>'
        '<a href="#plots">plots</a></nav>',
        *(
            ['<ul class="notes" id="notes">', *(f"<li>{esc(n)}</li>" for n in notes), "</ul>"]
            if notes
            else []
        ),
        *(
            [
                f'<p class="warn" id="job-model-warning"><b>Not like for like.</b> {esc(summary_line(diffs))}</p>'
            ]
            if diffs
            else []
        ),
        '<h2 id="comparison">Comparison</h2>',
        f'<p class="meta">Each cell: the value, below it the change against the baseline ({esc(MISSING)}: not '
        "recorded, or no change against a baseline of 0). Green: better, red: worse. Times in hours.</p>",
        *(
            [
                '<ul class="notes" id="window">',
                *(f"<li>Window: {esc(w)}</li>" for w in frame.attrs["window"]),
                "</ul>",
            ]
            if frame.attrs.get("window")
            else []
        ),
        table_html(frame, main, "comparison-table"),
    ]
    defined = column_definitions(frame, [m.key for m in main])
    if defined:
        parts.append('<ul class="assume" id="column-definitions">')
        parts += [f"<li><b>{esc(header)}</b>: {esc(text)}</li>" for header, text in defined]
        parts.append("</ul>")
    if components:
        total = [m for m in main if m.key == "energy_kwh"]
        parts += [
            "<h3>Energy by component (kWh)</h3>",
            table_html(frame, total + components, "component-table"),
        ]
    bases = list(dict.fromkeys(frame.loc[frame["reconstructed"], "basis"]))
    if bases:
        parts.append('<h3>Reconstructed policies</h3><ul class="assume" id="reconstructed-list">')
        parts += [f"<li>{esc(b)}</li>" for b in bases]
        parts.append("</ul>")

    parts += [section_html(section, i) for i, section in enumerate(sections)]

    parts.append('<h2 id="assumptions">Assumptions the runs recorded</h2>')
    items = [(topic, text, r.name) for r in runs for topic, text in run_assumptions(r)]
    details = []
    for source, experiment in experiments:
        found, summary_md = experiment_assumptions(Path(source))
        items += [(topic, text, f"{experiment} {Path(source).name}") for topic, text in found]
        if summary_md:
            details.append(
                f"<details><summary>{esc(experiment)}: {esc(source)}/summary.md</summary>"
                f"<pre>{esc(summary_md)}</pre></details>"
            )
    if items:
        parts.append(_assumptions_html(items, len(runs)))
    elif not details:
        parts.append('<p class="missing">None recorded.</p>')
    if details:
        parts.append('<p class="meta">The experiments state their setup in their own summaries:</p>')
    parts += details

    parts.append('<h2 id="plots">Plots</h2>')
    if not plots_available():
        parts.append(f'<p class="missing" id="plots-skipped">{esc(PLOTS_SKIPPED.capitalize())}.</p>')
        parts.append("</body></html>\n")
        return "\n".join(parts)
    no_series = "No run directory among the inputs records this time series (experiment tables hold none)."
    figures: list[tuple[str, str, Callable[[], tuple[str, str] | None], str]] = [
        ("power", "Cluster power, price and carbon", lambda: plot_power(runs), no_series),
        ("nodes", "Nodes on / booting / off", lambda: plot_nodes(runs), no_series),
        ("gpus-queue", "Allocated GPUs and queue length", lambda: plot_gpus_queue(runs), no_series),
        (
            "jct-cdf",
            "JCT distributions",
            lambda: plot_jct_cdf(runs),
            "No run records per-job completion times.",
        ),
        (
            "energy-jct",
            "Energy against mean JCT",
            lambda: plot_energy_jct(frame, names),
            "No run records both energy and mean JCT.",
        ),
    ]
    for key, heading, make, why in figures:
        parts.append(_figure(key, heading, make(), why))
    for i, (source, experiment) in enumerate(experiments):
        for name, img in experiment_figures(Path(source)):
            caption = f"{source}: a figure of the {experiment} experiment (its own plot, as it wrote it)"
            parts.append(_figure(f"experiment-{i + 1}-{name}", f"{experiment}: {name}", (img, caption), ""))
    parts.append("</body></html>\n")
    return "\n".join(parts)
