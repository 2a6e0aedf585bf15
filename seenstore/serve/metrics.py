"""``GET /metrics``: the server's and the store's figures in Prometheus text format 0.0.4.

Counters and gauges from ``Server.figures`` (which holds the store's ``stats()``,
at most a few seconds old) and the group commit's latency histogram.
"""

from __future__ import annotations


def _line(out: list, name: str, kind: str, help_: str, value, labels: str = "") -> None:
    out.append(f"# HELP seenstore_{name} {help_}")
    out.append(f"# TYPE seenstore_{name} {kind}")
    out.append(f"seenstore_{name}{labels} {float(value):.10g}")


def prometheus(fig: dict, latency) -> str:
    """The exposition text of ``fig`` (Server.figures) and ``latency`` (a Histogram)."""
    st = fig.get("store_stats", {})
    bloom = st.get("bloom") or {}
    pend = st.get("pending_compaction", {})
    cnt = st.get("counters", {})
    out: list[str] = []
    _line(out, "keys", "gauge", "Keys in the store.", fig["keys"])
    _line(out, "batches_total", "counter", "Groups committed by this server (store batches).",
          fig["groups"])
    _line(out, "store_batches_total", "counter", "Batches the store committed in its life.",
          cnt.get("batches", 0))
    _line(out, "requests_admitted_total", "counter", "Admit requests answered by a group.",
          fig["requests_admitted"])
    _line(out, "keys_offered_total", "counter", "Keys offered to admit.", fig["keys_offered"])
    _line(out, "keys_new_total", "counter", "Keys answered new.", fig["keys_new"])
    _line(out, "http_requests_total", "counter", "HTTP requests received.", fig["requests"])
    _line(out, "http_client_errors_total", "counter", "Requests answered with a 4xx.",
          fig["client_errors"])
    _line(out, "queue_depth", "gauge", "Admit requests waiting for the next group.",
          fig["queue_depth"])
    _line(out, "runs", "gauge", "Live runs in the store.", st.get("runs", 0))
    _line(out, "bytes_on_disk", "gauge", "Store bytes on disk (with the Bloom file).",
          st.get("bytes_on_disk_with_bloom", 0))
    _line(out, "compaction_pending_jobs", "gauge", "Compaction jobs the policy has pending.",
          pend.get("jobs", 0))
    _line(out, "compaction_pending_bytes", "gauge", "Bytes those jobs would merge.",
          pend.get("bytes", 0))
    _line(out, "compactions_total", "counter", "Compactions the store committed.",
          cnt.get("compactions", 0))
    _line(out, "bytes_compacted_total", "counter", "Bytes compaction wrote.",
          cnt.get("bytes_compacted", 0))
    if bloom.get("bytes"):  # a server with --bloom
        _line(out, "bloom_false_positive_rate", "gauge",
              "The Bloom filter's expected false-positive rate at its fill.",
              bloom.get("expected_fpr", 0.0))
        _line(out, "bloom_bytes", "gauge", "Bloom filter bytes in memory.", bloom.get("bytes", 0))
    name = "seenstore_batch_latency_seconds"
    out.append(f"# HELP {name} Seconds from a group's start to its answers (check, answer "
               f"log, durable commit).")
    out.append(f"# TYPE {name} histogram")
    acc = 0
    for le, c in zip([*latency.buckets, "+Inf"], latency.counts):
        acc += c
        out.append(f'{name}_bucket{{le="{le}"}} {acc}')
    out.append(f"{name}_sum {latency.sum:.9g}")
    out.append(f"{name}_count {latency.count}")
    return "\n".join(out) + "\n"
