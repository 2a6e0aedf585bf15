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
    from seenstore.url.fingerprint import fingerprint as fp_fn
    from seenstore.url.normalise import normalise as nm_fn
    from seenstore.url.fastpath import normalise_many as nm_many
    from seenstore.url.normalise import try_normalise as nm_try

    assert SeenStore is so.SeenStore and DedupStage is st.DedupStage
    assert normalise is nm_fn and try_normalise is nm_try and normalise_many is nm_many
    assert Policy.__module__ == "seenstore.url.policy" and fingerprint is fp_fn
    assert errors.SeenStoreError is seenstore.SeenStoreError
    assert seenstore.normalise is nm_fn and seenstore.fingerprint is fp_fn
    assert fingerprint_many([normalise("HTTP://A.test:80/")])[0] == fingerprint("http://a.test/")
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
