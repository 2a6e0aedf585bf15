"""The example crawler (examples/crawl.py) run end to end on its loopback test site."""

import json
import os
import subprocess
import sys
from conftest import REPO



def test_example_crawl_has_no_duplicates_with_normalisation():
    out = subprocess.run([sys.executable, os.path.join(REPO, "examples", "crawl.py"), "--json"],
                         capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    pages = report["site"]["pages"]
    crawls = {c["mode"]: c for c in report["crawls"]}
    assert set(crawls) == {"off", "safe", "policy"}
    for c in crawls.values():
        assert c["errors"] == 0
        assert c["pages"] == pages  # every mode reaches the whole site
    on = crawls["policy"]
    assert on["duplicate_fetches"] == 0 and on["duplicate_rate"] == 0
    assert on["fetches"] == pages
    assert on["policy"].startswith("example-1:")
    off = crawls["off"]
    assert off["duplicate_rate"] > 0 and off["fetches"] == pages + off["duplicate_fetches"]
    # safe rules alone leave the tracking-parameter spellings, and only those
    safe = crawls["safe"]
    assert 0 < safe["duplicate_rate"] < off["duplicate_rate"]
    assert safe["policy"] == "safe-v1"
