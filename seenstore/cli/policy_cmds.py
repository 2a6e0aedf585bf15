"""``seenstore policy`` and ``seenstore rebuild``: the policy a store holds, shown,
replaced (rebuilding what it changes) and reapplied by hand (docs/policy.md)."""

from __future__ import annotations

import json

import click

from seenstore.cli import default_store_dir, main, store_option


def _open(store_dir, readonly: bool, create: bool = False):
    from seenstore.store import SeenStore

    return SeenStore.open(store_dir or default_store_dir(), create=create and not readonly,
                          readonly=readonly, wait=None if not readonly else 0.0)


def _rebuild_line(fig: dict) -> str:
    hosts = fig.get("hosts")
    which = "every host" if hosts is None else f"{len(hosts)} host(s)"
    return (f"rebuilt {which}: {fig['kept_urls']:,} kept URLs, {fig['keys_removed']:,} keys "
            f"removed, {fig['keys_added']:,} added, {fig['shards_rewritten']} shard(s) "
            f"rewritten in {fig['seconds']:.2f} s")


@main.command("policy")
@store_option
@click.option("--set", "set_file", type=click.Path(exists=True, dir_okay=False),
              metavar="FILE", default=None,
              help="Make the policy in FILE (TOML, docs/policy.md) the store's, rebuilding "
                   "the hosts whose rules it changes (all hosts when host patterns change).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def policy_cmd(store_dir, set_file, as_json):
    """Print the policy the store holds, as TOML (learned rules with their support as
    comments), or replace it with --set FILE.

    The store holds its whole policy, versioned: `add`, `check`, `normalise
    --store`, the Python API and the stage use it without --policy. Replacing it
    remakes the keys of the hosts whose rules change from the URLs the store
    kept; a store that keeps no URLs refuses (exit 3).
    """
    from seenstore.url.policy import load_policy
    from seenstore.store.urls import store_policy

    if set_file is None:
        with _open(store_dir, readonly=True) as store:
            policy = store_policy(store)
            doc = {"policy_id": store.policy_id, "version": store.policy_version,
                   "toml": policy.to_toml()}
        if as_json:
            click.echo(json.dumps(doc))
        else:
            click.echo(f"# store policy {doc['policy_id']}, version {doc['version']}")
            click.echo(doc["toml"].rstrip("\n"))
        return
    new = load_policy(set_file)
    with _open(store_dir, readonly=False) as store:
        before = store.policy_id
        fig = store.set_policy(new) if new.identity != before else None
        doc = {"from": before, "to": store.policy_id, "version": store.policy_version,
               "rebuild": fig}
    if as_json:
        click.echo(json.dumps(doc))
    elif fig is None:
        click.echo(f"policy unchanged: {before}")
    else:
        click.echo(f"policy {before} -> {doc['to']} (version {doc['version']}); "
                   + _rebuild_line(fig))


@main.command("rebuild")
@store_option
@click.option("--host", "hosts", multiple=True, metavar="HOST",
              help="Rebuild this host (its name without 'www.' or port; repeatable). "
                   "Default: every host.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def rebuild_cmd(store_dir, hosts, as_json):
    """Remake keys from the URLs the store kept, under the store's policy.

    For each host (default: all), its keys are removed and its kept URLs are
    normalised under the policy and admitted, in one commit: the store then
    answers as a store fed those URLs under this policy from the start would.
    Keys admitted without a URL (`merge`) on those hosts are forgotten.
    """
    from seenstore.url.policy import host_key

    with _open(store_dir, readonly=False) as store:
        fig = store.rebuild([host_key(h.lower()) for h in hosts] if hosts else None)
    if as_json:
        click.echo(json.dumps(fig))
    else:
        click.echo(_rebuild_line(fig))


def _config(min_support, min_paths):
    from seenstore.evidence.learn import LearnConfig

    kw = {}
    if min_support is not None:
        kw["min_support"] = min_support
    if min_paths is not None:
        kw["min_paths"] = min_paths
    return LearnConfig(**kw)


def _finding_dict(f) -> dict:
    return {"host": f.host, "rule": f.kind, "name": f.name, "support": f.support,
            "counter": f.counter, "paths": f.paths, "status": f.status}


@main.command("learn")
@click.argument("warcs", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@store_option
@click.option("--dry-run", is_flag=True,
              help="Show what would be learned; record nothing, change nothing.")
@click.option("--write-policy", type=click.Path(dir_okay=False), metavar="FILE", default=None,
              help="Also write the resulting policy (TOML) to FILE.")
@click.option("--min-support", type=click.IntRange(min=1), default=None,
              help="Distinct URL pairs a rule needs (default 5, docs/evidence.md).")
@click.option("--min-paths", type=click.IntRange(min=1), default=None,
              help="Distinct paths among them (default 3).")
@click.option("--all", "show_all", is_flag=True,
              help="List every candidate (default: adopted and withdrawn rules only).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def learn_cmd(warcs, store_dir, dry_run, write_policy, min_support, min_paths, show_all,
              as_json):
    """Learn per-host rules from fetch evidence and apply them to the store.

    Reads the response and revisit records of the WARC files (status,
    Location, Link, the HTML rel=canonical, the payload or WARC-Payload-Digest),
    records that evidence in the store, learns which spellings each host serves
    as one page (docs/evidence.md), makes the adopted rules the store's policy
    and rebuilds the hosts they change. Prints one line per rule: host, rule,
    support, counter-evidence, adopted/withdrawn. Without WARC files it learns
    from the evidence the store already holds. A store that does not exist yet is
    created: it then holds the learned policy for a crawl to start from.
    """
    from seenstore.integrations.warc import WarcReport
    from seenstore.integrations.warc_evidence import iter_evidence
    from seenstore.store import learning
    from seenstore.store.learning import fetches_of

    config = _config(min_support, min_paths)
    report = WarcReport()
    records = iter_evidence(warcs, report) if warcs else iter(())
    with _open(store_dir, readonly=dry_run, create=True) as store:
        if dry_run:
            findings = learning.learn(store, False, config, fetches_of(records)[0])
            recorded = {"recorded": 0, "rejected": []}
        else:
            recorded = {"recorded": 0, "rejected": []}
            batch: list = []
            for r in records:
                batch.append(r)
                if len(batch) >= 10_000:
                    _add_counts(recorded, store.record_fetches(batch))
                    batch = []
            _add_counts(recorded, store.record_fetches(batch))
            findings = store.learn(apply=True, config=config)
        info = store.last_learn or {}
        policy = info.get("policy")
        if write_policy and policy is not None:
            with open(write_policy, "w", encoding="utf-8") as f:
                f.write(policy.to_toml(info.get("notes")))
        doc = {"warc_records": report.records, "recorded": recorded["recorded"],
               "rejected": len(recorded["rejected"]), "fetches": info.get("fetches", 0),
               "hosts": info.get("hosts", 0), "policy_id": store.policy_id,
               "policy_version": store.policy_version, "dry_run": dry_run,
               "rebuild": info.get("rebuild"),
               "findings": [_finding_dict(f) for f in findings]}
    if as_json:
        click.echo(json.dumps(doc))
        return
    shown = [f for f in doc["findings"]
             if show_all or f["status"] in ("adopted", "withdrawn")]
    click.echo(f"{'host':30} {'rule':28} {'support':>7} {'counter':>7}  status")
    for f in shown:
        rule = f["rule"] + (f"={f['name']}" if f["name"] else "")
        click.echo(f"{f['host'][:30]:30} {rule[:28]:28} {f['support']:>7} {f['counter']:>7}  "
                   f"{f['status']}")
    click.echo(f"seenstore learn: {doc['fetches']:,} fetches over {doc['hosts']:,} hosts "
               f"({doc['recorded']:,} recorded now, {doc['rejected']} rejected); policy "
               f"{doc['policy_id']} version {doc['policy_version']}"
               + (" (dry run: nothing changed)" if dry_run else ""), err=True)
    if doc["rebuild"]:
        click.echo("seenstore learn: " + _rebuild_line(doc["rebuild"]), err=True)


def _add_counts(total: dict, got: dict) -> None:
    total["recorded"] += got["recorded"]
    total["rejected"] += got["rejected"]



@main.command("duplicates")
@store_option
@click.option("--top", type=click.IntRange(min=1), default=None, metavar="N",
              help="Only the N hosts with most duplicate fetches.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def duplicates_cmd(store_dir, top, as_json):
    """Show what the crawl still fetches twice, per host.

    From the fetch evidence the store holds: 2xx fetches whose content digest was
    already fetched under another URL that the store's policy keeps apart,
    grouped by the rule that would have merged them (or "no rule explains it":
    different URLs of one page no rule vocabulary folds), with examples.
    """
    from seenstore.store.learning import duplicate_report

    with _open(store_dir, readonly=True) as store:
        report = duplicate_report(store)
    if top:
        report = report[:top]
    if as_json:
        click.echo(json.dumps({"hosts": report,
                               "duplicates": sum(h["duplicates"] for h in report)}))
        return
    for h in report:
        rules = ", ".join(f"{r} {n}" for r, n in h["by_rule"].items())
        click.echo(f"{h['host']}\t{h['duplicates']} of {h['fetches']} fetches\t{rules}")
        for ex in h["examples"]:
            click.echo(f"  {ex['url']}  =  {ex['first']}  ({ex['rule']})")
    total = sum(h["duplicates"] for h in report)
    click.echo(f"seenstore duplicates: {total} duplicate fetches on {len(report)} hosts",
               err=True)
