"""Normalisation policy: the risky rewrite rules, off by default, enabled per host.

Contract: ``load_policy(path)`` reads a versioned TOML file (docs/policy.md) and
returns a ``Policy``; a bad file raises ``PolicyError`` naming the file and the key.
``Policy.identity`` is recorded in a store's manifest; the built-in ``DEFAULT_POLICY``
(safe rules only) has identity ``DEFAULT_POLICY_ID``. ``Rule.rewrite`` is idempotent.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase, translate

import ada_url

from seenstore.errors import PolicyError

DEFAULT_POLICY_ID = "safe-v1"
SAFE_RULES_VERSION = "safe-v1"  # the fixed safe steps of docs/normalise.md; part of every hash

# Click and campaign identifiers that never select content on the sites that add them.
# Opt in per host with `strip_tracking = true`; the list is hashed into the identity.
TRACKING_PARAMS: tuple[str, ...] = (
    "utm_*", "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "fbclid", "msclkid",
    "yclid", "twclid", "ttclid", "li_fat_id", "igshid", "mc_cid", "mc_eid", "_ga",
    "_gl", "_hsenc", "_hsmi", "mkt_tok", "oly_anon_id", "oly_enc_id", "vero_id",
    "rb_clickid", "s_cid",
)

TRAILING_SLASH_MODES = ("keep", "add", "remove")
_RULE_KEYS = {
    "hosts", "strip_params", "strip_tracking", "sort_query",
    "trailing_slash", "strip_www", "strip_trailing_dot",
}
_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_PATTERN_RE = re.compile(r"[a-z0-9.*?\[\]!_-]+")
_PARAM_RE = re.compile(r"[^&=#\s]+")
_HOST_CACHE_MAX = 65536
_NUMBER_LABEL = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")


def strip_trailing_dots(host: str) -> str:
    """``host`` without trailing dots, unless that would leave it empty or ending in a
    number label (``1.2..``): a browser would then read it as an IPv4 address."""
    bare = host.rstrip(".")
    if not bare or _NUMBER_LABEL.fullmatch(bare.rsplit(".", 1)[-1]):
        return host
    return bare


def strip_www(host: str) -> str:
    """``host`` without its leading ``www.`` labels, keeping at least two labels
    (``www.com`` stays). The trailing dot, if any, is kept."""
    while host.startswith("www.") and "." in host[4:].rstrip("."):
        host = host[4:]
    return host


def host_key(host: str) -> str:
    """The name rules are matched against: the host without its trailing dots and
    leading ``www.`` labels, so ``strip_www``/``strip_trailing_dot`` never change
    which rule applies (this keeps normalisation idempotent)."""
    bare = host.rstrip(".") or host
    return strip_www(bare)


def _param_name(pair: str) -> str:
    eq = pair.find("=")
    return pair if eq < 0 else pair[:eq]


@dataclass(frozen=True)
class Rule:
    """One ``[[rule]]`` table: the rewrites applied to hosts matching ``hosts``."""

    hosts: tuple[str, ...]
    strip_params: tuple[str, ...] = ()
    strip_tracking: bool = False
    sort_query: bool = False
    trailing_slash: str = "keep"
    strip_www: bool = False
    strip_trailing_dot: bool = False
    _drop: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _drop_re: re.Pattern | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        drop = self.strip_params + (TRACKING_PARAMS if self.strip_tracking else ())
        object.__setattr__(self, "_drop", drop)
        # One regex for all patterns: same answers as fnmatchcase on each, one call.
        rx = re.compile("|".join(translate(p) for p in drop)) if drop else None
        object.__setattr__(self, "_drop_re", rx)

    def matches(self, key: str) -> bool:
        """True if any pattern matches ``key`` (a ``host_key``), shell-style."""
        return any(fnmatchcase(key, p) for p in self.hosts)

    def rewrite(self, host: str, path: str, query: str | None) -> tuple[str, str, str | None]:
        """Apply this rule. ``host`` is the bare host (no port), ``path`` starts with
        ``/``, ``query`` excludes the ``?`` and is None when absent. Returns the same
        triple; a query that stripping parameters left empty becomes None."""
        if self.strip_www:
            host = strip_www(host)
        if self.strip_trailing_dot:
            host = strip_trailing_dots(host)
        if self.trailing_slash == "remove":
            path = path.rstrip("/") or "/"
        elif self.trailing_slash == "add" and not path.endswith("/"):
            path += "/"
        if query is not None and (self._drop_re or self.sort_query):
            pairs = query.split("&")
            drop = self._drop_re
            kept = [p for p in pairs if not drop.match(_param_name(p))] if drop else pairs
            if self.sort_query:
                kept.sort(key=_param_name)  # stable: repeated names keep their order
            query = "&".join(kept)
            if not query and len(kept) < len(pairs):
                query = None
        return host, path, query

    def content(self) -> dict:
        """Canonical description, hashed into the policy identity."""
        return {
            "hosts": list(self.hosts),
            "strip_params": sorted(set(self._drop)),
            "sort_query": self.sort_query,
            "trailing_slash": self.trailing_slash,
            "strip_www": self.strip_www,
            "strip_trailing_dot": self.strip_trailing_dot,
        }


class Policy:
    """A versioned list of rules; the first rule whose patterns match a host applies."""

    def __init__(self, version: str, rules: tuple[Rule, ...] = (), identity: str | None = None):
        self.version = version
        self.rules = tuple(rules)
        content = json.dumps(
            {"safe": SAFE_RULES_VERSION, "rules": [r.content() for r in self.rules]},
            sort_keys=True, separators=(",", ":"),
        )
        self.content_hash = hashlib.sha256(content.encode()).hexdigest()
        self.identity = identity or f"{version}:{self.content_hash[:16]}"
        self._cache: dict[str, Rule | None] = {}

    def __repr__(self) -> str:
        return f"Policy({self.identity!r}, {len(self.rules)} rules)"

    def rule_for(self, host: str) -> Rule | None:
        """The first rule matching ``host`` (a normalised host, no port), or None."""
        try:
            return self._cache[host]
        except KeyError:
            pass
        key = host_key(host)
        rule = next((r for r in self.rules if r.matches(key)), None)
        if len(self._cache) >= _HOST_CACHE_MAX:
            self._cache.clear()
        self._cache[host] = rule
        return rule


DEFAULT_POLICY = Policy(SAFE_RULES_VERSION, (), identity=DEFAULT_POLICY_ID)


def _idna(label: str) -> str:
    out = ada_url.idna_to_ascii(label)
    return out.decode("ascii") if isinstance(out, bytes) else out


def _pattern(p: object, where: str) -> str:
    if not isinstance(p, str) or not p:
        raise PolicyError(f"{where}: host pattern must be a non-empty string, got {p!r}")
    p = p.strip().lower()
    if not p.isascii():  # IDNA hosts are matched in their punycode form
        labels = [lab if any(c in lab for c in "*?[") else _idna(lab)
                  for lab in p.split(".")]
        p = ".".join(labels)
    if p.startswith("www.") or not _PATTERN_RE.fullmatch(p):
        raise PolicyError(
            f"{where}: bad host pattern {p!r} (patterns match the host without a leading "
            "'www.' or port; use letters, digits, '.', '-', and the wildcards * ? [ ])"
        )
    return p


def _rule(table: object, where: str) -> Rule:
    if not isinstance(table, dict):
        raise PolicyError(f"{where}: must be a table")
    unknown = set(table) - _RULE_KEYS
    if unknown:
        raise PolicyError(f"{where}: unknown key(s) {sorted(unknown)}; "
                          f"allowed: {sorted(_RULE_KEYS)}")
    hosts = table.get("hosts")
    if isinstance(hosts, str):
        hosts = [hosts]
    if not isinstance(hosts, list) or not hosts:
        raise PolicyError(f"{where}: 'hosts' must be a non-empty list of host patterns")
    params = table.get("strip_params", [])
    if not isinstance(params, list) or not all(
        isinstance(x, str) and _PARAM_RE.fullmatch(x) for x in params
    ):
        raise PolicyError(f"{where}: 'strip_params' must be a list of parameter names")
    flags = {}
    for k in ("strip_tracking", "sort_query", "strip_www", "strip_trailing_dot"):
        v = table.get(k, False)
        if not isinstance(v, bool):
            raise PolicyError(f"{where}: {k!r} must be true or false, got {v!r}")
        flags[k] = v
    slash = table.get("trailing_slash", "keep")
    if slash not in TRAILING_SLASH_MODES:
        raise PolicyError(f"{where}: 'trailing_slash' must be one of {TRAILING_SLASH_MODES}")
    return Rule(
        hosts=tuple(_pattern(p, where) for p in hosts),
        strip_params=tuple(params), trailing_slash=slash, **flags,
    )


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Build a Policy from TOML text. Raises PolicyError (message names ``source``)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"{source}: not valid TOML: {e}") from None
    unknown = set(doc) - {"version", "rule"}
    if unknown:
        raise PolicyError(f"{source}: unknown top-level key(s) {sorted(unknown)}")
    version = doc.get("version")
    if isinstance(version, int) and not isinstance(version, bool):
        version = str(version)
    if not isinstance(version, str) or not _VERSION_RE.fullmatch(version):
        raise PolicyError(
            f"{source}: 'version' is required: 1-64 characters of letters, digits, '.', '_', '-'"
        )
    tables = doc.get("rule", [])
    if not isinstance(tables, list):
        raise PolicyError(f"{source}: 'rule' must be an array of tables ([[rule]])")
    rules = tuple(_rule(t, f"{source}: rule {i + 1}") for i, t in enumerate(tables))
    return Policy(version, rules)


def load_policy(path: str | None) -> Policy:
    """The policy in the TOML file at ``path``; ``None`` gives ``DEFAULT_POLICY``."""
    if path is None:
        return DEFAULT_POLICY
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise PolicyError(f"{path}: cannot read policy file: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(f"{path}: policy file is not UTF-8") from None
    return parse_policy(text, source=str(path))
