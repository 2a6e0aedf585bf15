"""Dedup a Ray Dataset of crawled links against a ShardedStore (docs/cluster.md).

Run:  python3 examples/ray_dedup.py            (starts a local Ray on 127.0.0.1)
      python3 examples/ray_dedup.py ADDRESS    (joins a running Ray cluster)

Two "crawl rounds" of links go through ``seenstore.cluster.dedup``: the first
returns every distinct URL once (spellings that normalise alike count once), the
second only the URLs the first round had not seen. The store is a 4-shard cluster
in a temporary directory, one Ray actor per shard.
"""

import sys
import tempfile

import ray

from seenstore.cluster import ShardedStore, dedup


def links(round_no: int, n: int = 2000) -> list[dict]:
    rows = []
    for i in range(n):
        page = (i + round_no * n // 2) % (3 * n // 2)  # half of round 2 was in round 1
        host = f"site{page % 37}.example"
        spelling = f"HTTP://{host.upper()}:80/page/{page}#top" if i % 3 == 0 \
            else f"http://{host}/page/{page}"
        rows.append({"url": spelling, "found_on": f"round {round_no}"})
    return rows


def main(address: str | None) -> None:
    if address:
        ray.init(address=address)
    else:
        ray.init(num_cpus=2, include_dashboard=False, address="local",
                 _node_ip_address="127.0.0.1")
    ray.data.DataContext.get_current().enable_progress_bars = False
    with tempfile.TemporaryDirectory() as tmp, \
            ShardedStore.open(f"{tmp}/seen", shards=4, create=True) as store:
        for round_no in (1, 2):
            ds = ray.data.from_items(links(round_no))
            new = dedup(ds, column="url", store=store).take_all()
            print(f"round {round_no}: {ds.count()} links offered, {len(new)} new "
                  f"(e.g. {new[0]['url'] if new else '-'})")
        print(f"store: {len(store):,} keys in {len(store.actors)} shards")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
