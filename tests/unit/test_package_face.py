"""The package face: the names the README imports from ``seenstore`` are the real
objects, and ``import seenstore`` alone does not load numba."""

from __future__ import annotations

import subprocess
import sys

import pytest

import seenstore


def test_face_names_are_the_modules_objects(tmp_path):
    from seenstore import (DedupStage, Policy, SeenStore, errors, fingerprint,
                           fingerprint_many, normalise, normalise_many, try_normalise)
    import seenstore.stage as st
    import seenstore.store as so
    from seenstore.url.urlkeys import fingerprint as fp_fn
    from seenstore.url.normalise import normalise as nm_fn
    from seenstore.url.fastpath import normalise_many as nm_many
    from seenstore.url.normalise import try_normalise as nm_try

    assert SeenStore is so.SeenStore and DedupStage is st.DedupStage
    assert normalise is nm_fn and try_normalise is nm_try and normalise_many is nm_many
    assert Policy.__module__ == "seenstore.url.policy" and fingerprint is fp_fn
    assert errors.SeenStoreError is seenstore.SeenStoreError
    assert seenstore.normalise is nm_fn and seenstore.fingerprint is fp_fn
    assert fingerprint_many([normalise("HTTP://A.test:80/")])[0] == fingerprint("http://a.test/")


def test_face_fingerprints_normalise_first_and_refuse_what_has_no_canonical_form(tmp_path):
    from seenstore import SeenStore, fingerprint, fingerprint_many
    from seenstore.url.normalise import URLRejected
    from seenstore.url.fingerprint import fingerprint as ref_fp

    spellings = ["HTTP://Example.com:80/p#x", "http://example.com/p", "http://EXAMPLE.com/./p"]
    assert set(fingerprint_many(spellings).tolist()) == {ref_fp("http://example.com/p")}
    assert fingerprint(spellings[0]) == ref_fp("http://example.com/p")
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as store:
        store.add_urls(["http://example.com/p"])
        assert store.contains(fingerprint_many(spellings)).tolist() == [True] * 3
    for bad in (["http://a.test/", "mailto:x"], ["javascript:alert(1)"], [b"\xff\xfe"]):
        with pytest.raises(URLRejected):
            fingerprint_many(bad)
    with pytest.raises(URLRejected, match="scheme"):
        fingerprint("mailto:x")
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as store:
        assert store.add([1, 1]).tolist() == [True, False]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        seenstore.nope  # noqa: B018
    assert set(seenstore.__all__) <= set(dir(seenstore))


def test_import_is_lazy():
    code = "import sys, seenstore; print('numba' in sys.modules, 'seenstore.store' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "False"]
