"""The policy a store holds: its whole normalisation policy, versioned, in the
manifest (docs/format.md, "Manifest"; docs/policy.md, "The policy a store holds").

``held_policy(doc)`` is the Policy a manifest records: its ``policy`` field (the
policy's TOML, parsed and checked against ``policy_id``), or for a store that
records only an identity, the built-in default when that identity is the default's
and None otherwise (such a store needs the policy given on every open, as before).
``policy_fields`` are the manifest fields of a new policy: the TOML ("" for the
built-in default, whose identity no file has), the version
(one more than the last), and per host the version its rules last changed at.
"""

from __future__ import annotations

from seenstore.errors import CorruptionError, PolicyError
from seenstore.url.policy import DEFAULT_POLICY, DEFAULT_POLICY_ID, Policy, parse_policy


def held_policy(doc: dict) -> Policy | None:
    """The policy manifest ``doc`` holds (see the module docstring)."""
    entry = doc.get("policy")
    if entry is None or entry.get("toml") == "" and doc["policy_id"] == DEFAULT_POLICY_ID:
        return DEFAULT_POLICY if doc["policy_id"] == DEFAULT_POLICY_ID else None
    try:
        policy = parse_policy(entry["toml"], source="the store's policy")
    except (PolicyError, KeyError, TypeError) as e:
        raise CorruptionError(f"the manifest's policy cannot be read: {e}") from None
    if policy.identity != doc["policy_id"]:
        raise CorruptionError(
            f"the manifest's policy has identity {policy.identity!r}, not the store's "
            f"{doc['policy_id']!r}")
    return policy


def policy_version(doc: dict) -> int:
    """The version of the store's policy: 0 for the one it was created with, one more
    at every change."""
    entry = doc.get("policy")
    return int(entry.get("version", 0)) if entry else 0


def host_versions(doc: dict) -> dict:
    """host -> the policy version at which that host's rules last changed."""
    entry = doc.get("policy")
    return dict(entry.get("hosts", {})) if entry else {}


def policy_fields(doc: dict, policy: Policy, changed_hosts=(), notes=None,
                  bump: bool = True) -> dict:
    """Manifest fields recording ``policy`` as the store's (``bump``: as a change, one
    version up, ``changed_hosts`` marked with it; else recorded at the same version,
    as when a store that held only an identity learns its whole policy)."""
    version = policy_version(doc) + (1 if bump else 0)
    hosts = host_versions(doc)
    for h in changed_hosts:
        hosts[h] = version
    # the built-in default is "" (its TOML would read back as a file's identity)
    text = "" if policy.identity == DEFAULT_POLICY_ID else policy.to_toml(notes)
    if text and parse_policy(text).identity != policy.identity:  # it must read back
        raise PolicyError(f"policy {policy.identity!r} does not survive its TOML form")
    fields = {"policy": {"version": version, "toml": text, "hosts": hosts},
              "policy_id": policy.identity}
    if "runs_policy_id" not in doc:  # the run headers keep the creation identity
        fields["runs_policy_id"] = doc["policy_id"]
    return fields
