"""Render the report JSON (the single source) to Markdown, standalone HTML and PNG figures.

    ladder render results/hosts/<host>/report/ladder.json [--out DIR]

re-renders from an existing results directory (e.g. one copied from another host) without
running anything else. The JSON is checked against ``workflow/schemas/report.schema.yaml``
first; a problem names the file and the JSON path at fault.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import os
import sys
from pathlib import Path
from typing import Any

import jinja2
import jsonschema
import yaml

from ladder.core.errors import LadderError
from ladder.reporting.figures import draw_all, section_figures
from ladder.reporting.overview import overview
from ladder.core.io import atomic_write_text, read_json
from ladder.reporting.sections import SECTIONS

WORKFLOW = Path(__file__).resolve().parent.parent.parent
TEMPLATES = WORKFLOW / "templates"
SCHEMA = WORKFLOW / "schemas" / "report.schema.yaml"


def report_schema() -> dict[str, Any]:
    """report.schema.yaml with each registered section's fragment as its property."""
    schema = yaml.safe_load(SCHEMA.read_text())
    for s in SECTIONS:
        fragment = yaml.safe_load(s.parts()["schema"].read_text())
        for key, part in s.subparts().items():  # the serving experiments' values
            fragment["properties"][key] = yaml.safe_load(part["schema"].read_text())
        schema.setdefault("$defs", {}).update(fragment.pop("$defs", {}))
        schema["properties"][s.key] = fragment
    return schema


def validate(doc: Any, where: str) -> None:
    schema = report_schema()
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc),
                    key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        path = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise LadderError(f"{where}: not a ladder report at {path}: {first.message[:300]}{more}")


def _fmt_ms(x: Any) -> str:
    """A latency in ms: "failed" (the failed requests reach that percentile) stays a word."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def _fmt_ms_ci(x: Any) -> str:
    """A per-round latency across rounds: geometric mean (interval), and failed rounds."""
    if not x or x.get("estimate") is None:
        return "-" if not (x or {}).get("failed_rounds") else "failed"
    out = _fmt_ms(x["estimate"])
    if x.get("lo") is not None and x.get("hi") is not None:
        out += f" ({_fmt_ms(x['lo'])}-{_fmt_ms(x['hi'])})"
    if x.get("failed_rounds"):
        out += f", {x['failed_rounds']} round(s) failed"
    return out


def _fmt_tps(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def environment(link_base: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",),
                                            default_for_string=False),
    )
    env.filters["tps"] = _fmt_tps
    env.filters["ms"] = _fmt_ms
    env.filters["ms_ci"] = _fmt_ms_ci
    env.filters["pct"] = lambda x: "-" if x is None else f"{x * 100:.1f} %"
    env.filters["mib"] = lambda d: ", ".join(f"{k} {v:.2f} MiB" for k, v in d.items()) or "-"
    env.filters["usd"] = lambda x: "-" if x is None else (f"${x:.3f}" if x < 10 else f"${x:.2f}")
    env.filters["link"] = lambda p: p if not p or os.path.isabs(p) else f"{link_base}{p}"
    return env


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def render_all(doc_path: str | Path, out_dir: str | Path, workdir: str | Path = ".",
               validate_doc: bool = True, announce: bool = False) -> dict[str, str]:
    """ladder.md, ladder.html and figures/*.png under out_dir, from one report JSON."""
    doc_path = Path(doc_path)
    doc = read_json(doc_path)
    if validate_doc:
        validate(doc, str(doc_path))
    out = Path(out_dir)
    fig_dir = out / "figures"
    figures = draw_all(doc, fig_dir)
    drawn = [figures["overview"], *figures["ladder"].values(), *figures["prefill"],
             *figures["threads"],
             figures["drift"], figures["roofline"], *section_figures(figures)]
    uris = {f["file"]: _data_uri(fig_dir / f["file"]) for f in drawn if f["file"]}
    link_base = os.path.relpath(Path(workdir).resolve(), out.resolve()) + "/"
    env = environment("" if link_base == "./" else link_base)
    ov = overview(doc)
    md = env.get_template("ladder.md.j2").render(doc=doc, figures=figures, ov=ov,
                                                 sections=SECTIONS)
    html = env.get_template("ladder.html.j2").render(
        doc=doc, figures=figures, uris=uris, ov=ov, sections=SECTIONS,
        rendered_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    atomic_write_text(out / "ladder.md", md)
    atomic_write_text(out / "ladder.html", html)
    if announce:  # a workflow run: the answer in the terminal, not only in a file
        log = logging.getLogger("ladder.report")
        for line in headline_lines(doc, out / "ladder.html"):
            log.info(line)
    return {"md": str(out / "ladder.md"), "html": str(out / "ladder.html"),
            "figures": str(fig_dir)}


def ladder_table_lines(doc: dict[str, Any], host: str) -> list[str]:
    """The first screen in a terminal: per model, tokens/s per rung and each step's mark (the
    report's overview table, aligned as text)."""
    lines: list[str] = []
    for t in overview(doc)["tables"]:
        head = ["quant", "workload", "t"]
        for i, r in enumerate(t["rungs"]):
            head += [r] + (["->"] if i < len(t["rungs"]) - 1 else [])
        rows = [head]
        for row in t["rows"]:
            cells = [row["quant"].upper(), row["workload"], str(row["threads"])]
            for i, r in enumerate(t["rungs"]):
                sp = row["speeds"].get(r)
                cells.append(f"{sp:.1f}" if sp else row["status"].get(r, "-"))
                if i < len(t["rungs"]) - 1:
                    st = row["steps"].get(f"{r}>{t['rungs'][i + 1]}")
                    cells.append("-" if not st else st["text"] + (
                        (" ok" if st["credited"] else " not credited")
                        if st["call"] in ("faster", "slower") else ""))
            rows.append(cells)
        widths = [max(len(r[k]) for r in rows) for k in range(len(head))]
        lines.append(f"ladder: {host} · {t['model']}: tokens/s per rung; each step called "
                     "(▲▼ with its ratio and interval, △▽ by less than δ not ruled out), "
                     "equivalent (=) or inconclusive (?)")
        lines += ["ladder:   " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                  for r in rows]
    return lines


def headline_lines(doc: dict[str, Any], html_path: str | Path) -> list[str]:
    """The answer in a few terminal lines: the ladder table, then per cell its A/A figures and
    one line per ladder step (verdict, credit, dispatch, drift flag), then where the full
    report is."""
    host = doc["provenance"]["host"].get("host") or "?"
    lines: list[str] = []
    emu = doc.get("emulated")
    if emu:
        lines.append(f"ladder: host {host}: evidence only (emulated, qemu -cpu {emu.get('cpu')})")
    else:
        lines += ladder_table_lines(doc, host)
    for c in [] if emu else doc.get("cells") or []:
        nf = c.get("noise_floor") or {}
        floor = nf.get("floor")
        check = nf.get("control_check") or {}
        dist = c.get("disturbance") or {}
        lines.append(f"ladder: {host} · {c['quant']} {c['workload']} · {c['threads']} threads "
                     f"({nf.get('text') or ('noise floor ' + ('-' if floor is None else f'±{floor * 100:.1f} %'))}"
                     + ("; " + check["text"] if check.get("passed") is False else "")
                     + (f"; {dist['remeasured']} disturbed round(s) measured again"
                        if dist.get("remeasured") else "")
                     + (f"; round(s) {dist['unresolved']} stayed disturbed"
                        if dist.get("unresolved") else "") + ")")
        for s in c.get("steps") or []:
            bits = [f"{s['rung']} over {s['base']}: {s['verdict']['text']}"]
            att = s.get("attribution") or {}
            if att.get("crashes"):
                only = att["crashes"].get("phases")
                bits.append(f"THE RUNG {att['crashes']['status'].upper()}"
                            + (f" IN {' AND '.join(only).upper()} ONLY" if only else "")
                            + f": {att['crashes']['reason']}")
            if att:
                bits.append(att["text"])
            elif s.get("credit"):
                bits.append(f"evidence: {s['credit']}")
            if s.get("dispatch"):
                bits.append(f"dispatch: {s['dispatch']['text']}")
            if (s.get("drift") or {}).get("flag"):
                bits.append(f"DRIFT: {s['drift']['text']}")
            lines.append("    " + "; ".join(bits))
    for r in doc.get("rungs") or []:
        if r.get("status") not in (None, "ok"):
            lines.append(f"ladder: {host}: rung {r['name']} {r['status']}: {r.get('reason')}")
    lines.append(f"ladder: report: {html_path}")
    return lines


def cli(prog: str, make: Any) -> int:
    """Run a re-render for a command line: print each written path, or one error line."""
    try:
        paths = make()
    except LadderError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    for kind, p in paths.items():
        print(f"{kind}: {p}")
    return 0
