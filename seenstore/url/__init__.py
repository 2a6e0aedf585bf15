"""URLs to keys: the first stages of the flow (docs/normalise.md, docs/fingerprint.md).

  normalise.py    the scalar reference: one URL to its canonical spelling or a rejection
  policy.py       the per-host risky rules (a versioned TOML policy)
  fingerprint.py  a canonical URL's 64-bit key (host hash || URL hash)
  buffer.py       URLBuffer: many URLs in two arrays, no Python object per URL
  reading.py      URL lines of a file or stream into a URLBuffer's arrays, bounded memory
  fastpath.py     the batch path: normalise + fingerprint a URLBuffer in the URL kernel,
                  the few URLs it routes taken by the scalar path; ``normalise_many``

Depends on kernels/ and runtime/ only; nothing here imports the store.
"""
