"""``seenstore hosts``: host health from what a store holds (kept URLs, fetch
evidence, recorded trap patterns), per host (docs/frontier.md, "Host health")."""

from __future__ import annotations

import json

import click

from seenstore.cli import default_store_dir, main, store_option


def _depths(depth: dict) -> str:
    return " ".join(f"{d}:{n}" for d, n in depth.items()) or "-"


@main.command("hosts")
@store_option
@click.option("--top", type=click.IntRange(min=1), default=None, metavar="N",
              help="Only the N hosts with most kept URLs (then most fetched).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def hosts_cmd(store_dir, top, as_json):
    """Show per host what the store holds: kept URLs, fetches, failures, duplicate
    fetches, discovered/fetched, pages per path depth and trap patterns.

    Kept URLs are the URLs the store admitted (a store that keeps URLs); fetch
    figures come from the fetch evidence (record_fetch, `seenstore learn`): failed
    is status >= 400, a duplicate fetch a 2xx page whose content digest was already
    fetched under another URL of the host. Trap patterns are those a DedupStage
    opened with traps recorded, with the URLs let through and refused. Lines
    starting with '# not available:' say what the store cannot tell. Read-only.
    """
    from seenstore.frontier.hosts import host_report
    from seenstore.store import SeenStore

    with SeenStore.open(store_dir or default_store_dir(), readonly=True) as store:
        report = host_report(store, top)
    if as_json:
        for h in report["hosts"]:
            h["depth"] = {str(d): n for d, n in h["depth"].items()}
        click.echo(json.dumps(report))
        return
    click.echo(f"{'host':32} {'kept':>9} {'fetched':>8} {'failed':>7} {'dup':>6} "
               f"{'kept/fetched':>12}  depth:pages")
    for h in report["hosts"]:
        ratio = h["discovered_per_fetched"]
        fetched = f"{h['fetched']}{'~' if h['evidence_sampled'] else ''}"
        click.echo(f"{h['host'][:32]:32} {h['kept_urls']:>9} {fetched:>8} {h['failed']:>7} "
                   f"{h['duplicate_fetches']:>6} {'-' if ratio is None else ratio:>12}  "
                   f"{_depths(h['depth'])}")
        for t in h["traps"]:
            click.echo(f"  trap {t['shape']:8} {t['pattern']}  let through {t['count']}, "
                       f"refused {t['refused']} (bound {t['bound']})")
    for line in report["not_available"]:
        click.echo(f"# not available: {line}")
    click.echo(f"seenstore hosts: {report['host_count']} hosts, {report['evidence']} fetch "
               "records ('~': failed and dup counted on a sample)", err=True)
