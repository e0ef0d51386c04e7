"""HTML for Jupyter: the recommendation line and the candidates table."""

import html

__all__ = ["fmt_bytes", "render"]


def fmt_bytes(n):
    """Bytes as fragsim prints them (analysis.FmtBytes): 8.0 MiB, 1.50 GiB."""
    n = int(n)
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def _table(head, rows):
    out = ["<table><thead><tr>"] + [f"<th>{html.escape(h)}</th>" for h in head] + ["</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _decision(result):
    dec = result.get("decision") or {}
    rec = result.get("recommendation") or dec.get("recommendation") or {}
    parts = [f"<p><b>{html.escape(rec.get('line', ''))}</b></p>"]
    fit = str(rec.get("goal", "")).startswith("fit:")
    head = ["rank", "candidate", "peak reserved", "frag", "device calls", "OOMs", "trust"]
    if fit:
        head.append("min capacity")
    rows = []
    for o in dec.get("results") or []:
        label = o.get("setting") or "the current settings"
        if not o.get("exact") and o.get("setting") != o.get("policy") and not o.get("physical_limit"):
            label = f"{o.get('policy')}: {label}"
        trust = "exact" if o.get("exact") else (f"±{o['error_pct']:.1f}%" if o.get("error_pct") else "model")
        if o.get("physical_limit"):
            label, trust = f"{o.get('policy')} (physical limit)", "limit"
        row = [f"{o.get('rank', '')}{' *' if o.get('recommended') else ''}", label]
        if o.get("error"):
            row += ["failed: " + o["error"], "", "", "", ""]
        else:
            row += [fmt_bytes(o.get("peak_reserved_bytes", 0)), f"{o.get('at_peak_pct', 0):.1f}%",
                    o.get("device_calls", 0), o.get("ooms", 0), trust]
        if fit:
            row.append(fmt_bytes(o["min_capacity_bytes"]) if o.get("min_capacity_bytes") else "")
        rows.append(row)
    return "".join(parts) + _table(head, rows)


def render(result):
    """The HTML of a command's JSON output."""
    if "decision" in result:
        return _decision(result)
    if "class" in result and "request_bytes" in result:  # explain
        rows = [(k, fmt_bytes(result[k])) for k in ("request_bytes", "reserved_bytes", "allocated_bytes",
                                                    "cached_free_bytes", "largest_free_block_bytes",
                                                    "outside_bytes") if k in result]
        out = f"<p><b>OOM: {html.escape(str(result['class']))}</b></p>" + _table(["", "bytes"], rows)
        fit = result.get("fit")
        if fit:
            out += f"<p>{html.escape(fit.get('line', ''))}</p>"
        return out
    rows = [(k, fmt_bytes(v) if k.endswith("_bytes") else v) for k, v in result.items()
            if isinstance(v, (int, float, str, bool))]
    return _table(["", "value"], rows)
