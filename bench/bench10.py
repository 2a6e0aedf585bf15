"""The three `seenstore bench` runs of `bash bench/run_all.sh --steps=bench10` on one plot,
and their section of bench/RESULTS.md.

    python bench/bench10.py plot LOGS OUT.png     # from LOGS/bench10-<keys>.json
    python bench/bench10.py render LOGS           # the markdown section, on stdout
    python bench/bench10.py splice SECTION.md RESULTS.md  # put it between the markers

Left panel: each batch's store time per offered key against the keys stored before it
(log x), one line per run; right panel: each run's ns per offered key by stage, stacked.
The figure the issue asks for (ns per offered key at 1e10 within 2x of 1e8) is printed
under the table.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys

STAGES = ("sort", "spill", "bloom", "merge", "commit", "compact_wait", "other")


def load(logs: str) -> list:
    """(keys, result dict or None, text log) of every bench10 run found, smallest first."""
    runs = []
    for path in glob.glob(os.path.join(logs, "bench10-*.txt")):
        k = os.path.basename(path)[len("bench10-"):-len(".txt")]
        js = os.path.join(logs, f"bench10-{k}.json")
        r = None
        if os.path.exists(js):
            with open(js) as f:
                r = json.load(f)
        with open(path) as f:
            runs.append((k, r, f.read()))
    return sorted(runs, key=lambda t: float(t[0]))


def plot(logs: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [(k, r) for k, r, _ in load(logs) if r]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    for k, r in runs:
        bs = r["batches"]
        x = [max(1, b["stored_before"]) for b in bs]
        y = [b["add_s"] / max(1, b["offered"]) * 1e9 for b in bs]
        mode = "spilled" if r["params"].get("spill_memory") else "in memory"
        ax.plot(x, y, marker="o", ms=3, label=f"--keys {k}: batches of {r['params']['batch']:,} "
                f"({mode}), {r['ns_per_key']['store_total']:.0f} ns/key overall")
    ax.set_xscale("log")
    ax.set_xlabel("keys in the store before the batch")
    ax.set_ylabel("store ns per offered key (batch)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.set_title("seenstore bench: cost per offered key as the store grows")
    bottom = [0.0] * len(runs)
    for s in STAGES:
        y = [r["ns_per_key"].get(s, 0.0) for _, r in runs]
        bx.bar(range(len(runs)), y, bottom=bottom, label=s)
        bottom = [a + b for a, b in zip(bottom, y)]
    bx.set_xticks(range(len(runs)), [f"{k}" for k, _ in runs])
    bx.set_xlabel("--keys")
    bx.set_ylabel("ns per offered key, whole run")
    bx.legend(title="stage", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def repeats(logs: str, k: str) -> list:
    """The ns per offered key of run ``k``'s repeats (LOGS/bench10rep-<k>-<n>.json)."""
    out = []
    for path in sorted(glob.glob(os.path.join(logs, f"bench10rep-{k}-*.json"))):
        with open(path) as f:
            r = json.load(f)
        if r.get("verified"):
            out.append(r["ns_per_key"]["store_total"])
    return out


def machine_line(runs: list) -> str | None:
    """The machine the runs measured (each run's JSON records it), once."""
    from seenstore.keys.sort import machine_summary

    seen = []
    for _, r, _ in runs:
        m = (r or {}).get("machine")
        if m and machine_summary(m) not in seen:
            seen.append(machine_summary(m))
    return "Machine: " + "; ".join(seen) + "." if seen else None


def _path(params: dict) -> str:
    """The run's path as the table names it: spilled with its budget, or in memory."""
    if params.get("spill_memory"):
        return f"spilled, {params['spill_memory'] / 2**30:.2f} GiB"
    return "in memory"


def _fmt(run_format) -> str:
    """The run format column: None is the store's default, the format by run size."""
    return "by size (2 from 2^22 keys)" if run_format is None else str(run_format)


def render(logs: str) -> str:
    runs = load(logs)
    lines = ["| --keys | batches | path | run format | verified | store s | ns/key | "
             "B read/key | B written/key | disk B/key | peak RSS GiB | disk needed GiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    base = None
    for k, r, _ in runs:
        if not r:
            lines.append(f"| {k} | (no JSON: see the log below) |||||||||||")
            continue
        p, res, n = r["params"], r.get("resources", {}), max(1, r["offered"])
        ns = r["ns_per_key"]["store_total"]
        base = ns if base is None and float(k) <= 1e8 else base
        lines.append(
            f"| {k} | {len(r['batches'])} x {p['batch']:,} | "
            f"{_path(p)} | "
            f"{_fmt(p.get('run_format'))} | {r['verified']} | {r['store_s']:.0f} | {ns:.1f} | "
            f"{r['bytes_read'] / n:.1f} | {r['bytes_written'] / n:.1f} | "
            f"{r['disk_bytes_per_key'] or 0:.2f} | {r['peak_rss_bytes'] / 2**30:.2f} | "
            f"{res.get('disk_needed', 0) / 2**30:.1f} |")
    out = lines
    machine = machine_line(runs)
    if machine:
        out = [machine, ""] + out
    top = [r for k, r, _ in runs if r and float(k) >= 1e10]
    base_k = next((k for k, r, _ in runs if r and float(k) <= 1e8), None)
    if base and top:
        ns10 = top[0]["ns_per_key"]["store_total"]
        again = repeats(logs, base_k)
        out.append("")
        if again:
            every = [base] + again
            mid = statistics.median(every)
            out.append(f"The {base_k} run, repeated after the others: "
                       + ", ".join(f"{x:.1f}" for x in every) + " ns/key (first run first); "
                       f"median {mid:.1f}.")
            out.append("")
            out.append(f"ns per offered key at 1e10 / at 1e8 (median): **{ns10 / mid:.2f}x** "
                       f"(target: within 2x; against each {base_k} run: "
                       + ", ".join(f"{ns10 / x:.2f}x" for x in every) + ").")
        else:
            out.append(f"ns per offered key at 1e10 / at 1e8: **{ns10 / base:.2f}x** "
                       f"(target: within 2x).")
    for k, _, text in runs:
        out += ["", f"#### `seenstore bench --keys {k}`", "", "```", text.rstrip(), "```"]
    return "\n".join(out)


def splice(section_path: str, results: str) -> None:
    """Put the section between ``<!-- bench10 -->`` markers of ``results`` (replacing
    what was there, or appended), leaving the rest of the file as it was."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from splice import splice as put

    put("bench10", section_path, results)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "plot":
        plot(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "splice":
        splice(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "render":
        print(render(sys.argv[2]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
