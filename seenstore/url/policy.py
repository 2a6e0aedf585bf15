"""Normalisation policy: the risky rewrite rules, off by default, enabled per host.

Contract: ``load_policy(path)`` reads a versioned TOML file (docs/policy.md) and
returns a ``Policy``; a bad file raises ``PolicyError`` naming the file and the key.
``Policy.identity`` is recorded in a store's manifest; the built-in ``DEFAULT_POLICY``
(safe rules only) has identity ``DEFAULT_POLICY_ID``. ``Rule.rewrite`` is idempotent.
``Policy.with_learned`` puts per-host learned rules in front of the file's rules, and
``Policy.to_toml`` writes a policy back as a file ``parse_policy`` reads to the same identity.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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
    "hosts", "strip_params", "strip_tracking", "sort_query", "trailing_slash",
    "strip_www", "strip_trailing_dot", "lowercase_path", "index_documents", "learned",
}
_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_PATTERN_RE = re.compile(r"[a-z0-9.*?\[\]!_-]+")
_PARAM_RE = re.compile(r"[^&=#\s]+")
_HOST_CACHE_MAX = 65536
_NUMBER_LABEL = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")
_DOCUMENT_RE = re.compile(r"[^/?#\s]+")
_LITERAL_HOST_RE = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")
# Outside a %XX escape: the letters lowercase_path folds (escapes keep their hex case).
_PATH_LETTERS = re.compile(r"%[0-9A-Fa-f]{2}|[A-Z]+")


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


def param_pattern(name: str) -> str:
    """The ``strip_params`` pattern that matches exactly the parameter ``name``
    (wildcard characters bracketed: ``ids[]`` -> ``ids[[]]``)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def literal_host(key: str) -> bool:
    """True if ``key`` (a ``host_key``) can name a learned rule's host: a DNS-style
    name (no wildcard, no IPv6 literal) that a policy file accepts as a pattern."""
    return bool(_LITERAL_HOST_RE.fullmatch(key)) and not key.startswith("www.")


def _lower_path(path: str) -> str:
    """``path`` with ASCII letters lowercased outside ``%XX`` escapes."""
    return _PATH_LETTERS.sub(lambda m: m.group() if m.group()[0] == "%" else m.group().lower(),
                             path)


def _drop_documents(path: str, documents: frozenset[str]) -> str:
    """Drop the last non-empty segment while it names an index document, keeping the
    slash before it: ``/a/index.html`` -> ``/a/``, ``/a/index.html/`` -> ``/a/``."""
    while True:
        bare = path.rstrip("/")
        head, _, last = bare.rpartition("/")
        if last not in documents:  # names are never empty, so "/" and "" stop here
            return path
        path = head + "/"


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
    lowercase_path: bool = False
    index_documents: tuple[str, ...] = ()
    learned: bool = False  # provenance only (written as ``learned = true``), not behaviour
    _drop: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _drop_re: re.Pattern | None = field(init=False, repr=False, compare=False)
    _documents: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        drop = self.strip_params + (TRACKING_PARAMS if self.strip_tracking else ())
        object.__setattr__(self, "_drop", drop)
        # One regex for all patterns: same answers as fnmatchcase on each, one call.
        rx = re.compile("|".join(translate(p) for p in drop)) if drop else None
        object.__setattr__(self, "_drop_re", rx)
        # Under lowercase_path the path is lowercased first, so the names are too.
        docs = {d.lower() for d in self.index_documents} if self.lowercase_path else \
            set(self.index_documents)
        object.__setattr__(self, "_documents", frozenset(docs))

    def matches(self, key: str) -> bool:
        """True if any pattern matches ``key`` (a ``host_key``), shell-style."""
        return any(fnmatchcase(key, p) for p in self.hosts)

    def strips(self, name: str) -> bool:
        """True if this rule removes the query parameters named ``name``."""
        return self._drop_re is not None and self._drop_re.match(name) is not None

    def rewrite(self, host: str, path: str, query: str | None) -> tuple[str, str, str | None]:
        """Apply this rule. ``host`` is the bare host (no port), ``path`` starts with
        ``/``, ``query`` excludes the ``?`` and is None when absent. Returns the same
        triple; a query that stripping parameters left empty becomes None. Path steps
        in order: lowercase, drop index documents, trailing slash."""
        if self.strip_www:
            host = strip_www(host)
        if self.strip_trailing_dot:
            host = strip_trailing_dots(host)
        if self.lowercase_path:
            path = _lower_path(path)
        if self._documents:
            path = _drop_documents(path, self._documents)
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
        """Canonical description, hashed into the policy identity. ``lowercase_path``
        and ``index_documents`` appear only when set, so the identity of a file that
        does not use them is what it was before they existed."""
        out = {
            "hosts": list(self.hosts),
            "strip_params": sorted(set(self._drop)),
            "sort_query": self.sort_query,
            "trailing_slash": self.trailing_slash,
            "strip_www": self.strip_www,
            "strip_trailing_dot": self.strip_trailing_dot,
        }
        if self.lowercase_path:
            out["lowercase_path"] = True
        if self.index_documents:
            out["index_documents"] = sorted(set(self.index_documents))
        return out

    def to_toml(self) -> str:
        """This rule as a ``[[rule]]`` table (keys at their defaults left out)."""
        lines = ["[[rule]]", f"hosts = {_toml_list(self.hosts)}"]
        if self.learned:
            lines.append("learned = true")
        for key in ("strip_tracking", "sort_query", "strip_www", "strip_trailing_dot",
                    "lowercase_path"):
            if getattr(self, key):
                lines.append(f"{key} = true")
        if self.strip_params:
            lines.append(f"strip_params = {_toml_list(self.strip_params)}")
        if self.trailing_slash != "keep":
            lines.append(f"trailing_slash = {_toml_str(self.trailing_slash)}")
        if self.index_documents:
            lines.append(f"index_documents = {_toml_list(self.index_documents)}")
        return "\n".join(lines) + "\n"


def merge_rule(learned: Rule, base: Rule | None, host: str) -> Rule:
    """The rule a host gets from its learned rule and the file's rule for it (``base``,
    None if none): parameters united, flags or-ed, the learned trailing slash unless it
    is "keep". ``hosts`` is ``(host,)`` and ``learned`` is set. Merging the result with
    ``base`` again gives the same rule."""
    if base is None:
        return replace(learned, hosts=(host,), learned=True)
    params = tuple(dict.fromkeys(learned.strip_params + base.strip_params))
    docs = tuple(dict.fromkeys(learned.index_documents + base.index_documents))
    return Rule(
        hosts=(host,), strip_params=params,
        strip_tracking=learned.strip_tracking or base.strip_tracking,
        sort_query=learned.sort_query or base.sort_query,
        trailing_slash=(learned.trailing_slash if learned.trailing_slash != "keep"
                        else base.trailing_slash),
        strip_www=learned.strip_www or base.strip_www,
        strip_trailing_dot=learned.strip_trailing_dot or base.strip_trailing_dot,
        lowercase_path=learned.lowercase_path or base.lowercase_path,
        index_documents=docs, learned=True,
    )


def _toml_str(s: str) -> str:
    """A TOML basic string: quote, backslash and control characters escaped."""
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _toml_list(items) -> str:
    return "[" + ", ".join(_toml_str(x) for x in items) + "]"


class Policy:
    """A versioned list of rules; the first rule whose patterns match a host applies.
    ``rules`` is the effective list: the learned rules (one per host, sorted by host,
    each merged with the file's rule for that host) and then the file's rules."""

    def __init__(self, version: str, rules: tuple[Rule, ...] = (), identity: str | None = None):
        self.version = version
        self.rules = tuple(rules)
        self._base: Policy = self
        self._learned: dict[str, Rule] = {}
        content = json.dumps(
            {"safe": SAFE_RULES_VERSION, "rules": [r.content() for r in self.rules]},
            sort_keys=True, separators=(",", ":"),
        )
        self.content_hash = hashlib.sha256(content.encode()).hexdigest()
        self.identity = identity or f"{version}:{self.content_hash[:16]}"
        self._cache: dict[str, Rule | None] = {}

    def __repr__(self) -> str:
        return f"Policy({self.identity!r}, {len(self.rules)} rules)"

    @property
    def base(self) -> Policy:
        """The policy without its learned rules (``self`` when it has none)."""
        return self._base

    @property
    def learned(self) -> Mapping[str, Rule]:
        """host key -> learned rule, as given to ``with_learned`` (a copy)."""
        return dict(self._learned)

    def with_learned(self, rules: Mapping[str, Rule]) -> Policy:
        """A new policy: ``self.base`` with ``rules`` (host key -> learned rule) in front,
        each merged with the rule the base gives that host (``merge_rule``). Replaces any
        learned rules ``self`` had; an empty mapping gives ``self.base``. The identity
        covers the learned rules. Raises PolicyError for a key that is not a literal host
        (``literal_host``)."""
        base = self._base
        if not rules:
            return base
        learned = {}
        for key in sorted(rules):
            if not isinstance(key, str) or not literal_host(key):
                raise PolicyError(f"learned rule: {key!r} is not a host name a rule can "
                                  "match (lowercase, no wildcard, no leading 'www.')")
            learned[key] = replace(rules[key], hosts=(key,), learned=True)
        merged = tuple(merge_rule(r, base.rule_for(k), k) for k, r in learned.items())
        out = Policy(base.version, merged + base.rules)
        out._base = base
        out._learned = learned
        return out

    def to_toml(self, notes: Mapping[str, str] | None = None) -> str:
        """TOML that ``parse_policy`` reads back to this identity (the default policy,
        which has no file spelling, reads back as ``<version>:<hash>``). Learned rules
        come first with ``learned = true``, each under its ``notes[host]`` as comment
        lines."""
        notes = notes or {}
        out = [f"version = {_toml_str(self.version)}\n"]
        for rule in self.rules:
            note = notes.get(rule.hosts[0]) if rule.learned else None
            comment = "".join(f"# {line}\n" for line in note.splitlines()) if note else ""
            out.append(comment + rule.to_toml())
        return "\n".join(out)

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
    docs = table.get("index_documents", [])
    if not isinstance(docs, list) or not all(
        isinstance(x, str) and _DOCUMENT_RE.fullmatch(x) and x not in (".", "..") for x in docs
    ):
        raise PolicyError(f"{where}: 'index_documents' must be a list of file names "
                          "(no '/', '?', '#' or spaces)")
    flags = {}
    for k in ("strip_tracking", "sort_query", "strip_www", "strip_trailing_dot",
              "lowercase_path", "learned"):
        v = table.get(k, False)
        if not isinstance(v, bool):
            raise PolicyError(f"{where}: {k!r} must be true or false, got {v!r}")
        flags[k] = v
    slash = table.get("trailing_slash", "keep")
    if slash not in TRAILING_SLASH_MODES:
        raise PolicyError(f"{where}: 'trailing_slash' must be one of {TRAILING_SLASH_MODES}")
    return Rule(
        hosts=tuple(_pattern(p, where) for p in hosts),
        strip_params=tuple(params), trailing_slash=slash, index_documents=tuple(docs),
        **flags,
    )


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Build a Policy from TOML text. Raises PolicyError (message names ``source``)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PolicyError(f"{source}: not valid TOML: {e}") from None
    except RecursionError:  # arrays or tables nested past the parser's depth
        raise PolicyError(f"{source}: not valid TOML: nested too deep") from None
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
    n_learned = sum(r.learned for r in rules)
    learned: dict[str, Rule] = {}
    for i, r in enumerate(rules):
        where = f"{source}: rule {i + 1}"
        if not r.learned:
            continue
        if i >= n_learned:
            raise PolicyError(f"{where}: learned rules must come before the file's own rules")
        if len(r.hosts) != 1 or not literal_host(r.hosts[0]) or r.hosts[0] in learned:
            raise PolicyError(f"{where}: a learned rule names exactly one host, literally, "
                              "once")
        learned[r.hosts[0]] = r
    return Policy(version, rules[n_learned:]).with_learned(learned)


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
