"""Per-host rules learned from fetch evidence: which spellings a server treats as one page.

Contract: ``learn(fetches, policy, config, previous)`` groups ``Fetch`` records by
host, relates URLs that are the same page (redirects, declared canonicals, equal
digests, near SimHashes) and returns ``(rules, findings)``: host key -> one learned
``Rule`` folding every rule adopted for that host, and one ``Finding`` per (host, kind,
name) examined. A rule is adopted only with no counter-evidence and enough support
(docs/evidence.md); together the adopted rules of a host merge no two URLs that the
evidence shows to be different pages. Pure: reads its inputs, writes nothing.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from seenstore.evidence.record import Fetch
from seenstore.url.normalise import host_span
from seenstore.url.policy import (Policy, Rule, host_key, literal_host, merge_rule,
                                  param_pattern)

# Trailing path segments tried as index documents (compared lowercased).
INDEX_DOCUMENTS = (
    "index.html", "index.htm", "index.shtml", "index.php", "index.asp", "index.aspx",
    "index.jsp", "index.cfm", "default.asp", "default.aspx", "default.htm", "default.html",
)
MAX_ROUNDS = 8
# rules whose support counts distinct merged URLs (path and query) as its "paths": on a
# site of one path (/list?cat=..&page=..) the pages differ by their query only
_QUERY_KINDS = ("strip_params", "sort_query")
STATUSES = ("adopted", "withdrawn", "rejected", "insufficient")
_ESCAPED = re.compile(r"\[([*?\[])\]")


@dataclass(frozen=True)
class LearnConfig:
    """Thresholds: a rule needs ``min_support`` same-page pairs spread over
    ``min_paths`` paths; SimHashes within ``near_bits`` bits are one page (-1: off)."""

    min_support: int = 5
    min_paths: int = 3
    near_bits: int = 3


@dataclass(frozen=True)
class Finding:
    """What the evidence says about one rule of one host. ``kind`` is the policy key
    (``strip_params``, ``sort_query``, ``trailing_slash``, ``strip_www``,
    ``lowercase_path``, ``index_documents``), ``name`` the parameter, direction or
    document ("" for flags); ``status`` one of ``STATUSES``."""

    host: str
    kind: str
    name: str
    support: int
    counter: int
    paths: int
    status: str


Atom = tuple[str, str]  # (kind, name): one rule a host may adopt


def fold(host: str, atoms: Iterable[Atom], extra: Rule | None = None) -> Rule:
    """One ``Rule`` for ``host`` doing every atom (and whatever ``extra`` does)."""
    params, docs, flags, slash = [], [], {}, "keep"
    for kind, name in atoms:
        if kind == "strip_params":
            params.append(param_pattern(name))
        elif kind == "index_documents":
            docs.append(name)
        elif kind == "trailing_slash":
            slash = name
        else:
            flags[kind] = True
    rule = Rule(hosts=(host,), strip_params=tuple(params), trailing_slash=slash,
                index_documents=tuple(docs), learned=True, **flags)
    return rule if extra is None else merge_rule(rule, extra, host)


def atoms_of(rule: Rule) -> tuple[list[Atom], Rule | None]:
    """A learned rule as atoms, and the rest of it (wildcard parameter patterns,
    ``strip_tracking``, ``strip_trailing_dot``) as a rule, or None if nothing is left."""
    atoms: list[Atom] = []
    rest = []
    for p in rule.strip_params:
        name = _ESCAPED.sub(r"\1", p)
        (atoms.append(("strip_params", name)) if param_pattern(name) == p else rest.append(p))
    for kind in ("sort_query", "strip_www", "lowercase_path"):
        if getattr(rule, kind):
            atoms.append((kind, ""))
    if rule.trailing_slash != "keep":
        atoms.append(("trailing_slash", rule.trailing_slash))
    atoms += [("index_documents", d) for d in rule.index_documents]
    if rest or rule.strip_tracking or rule.strip_trailing_dot:
        return atoms, Rule(hosts=rule.hosts, strip_params=tuple(rest),
                           strip_tracking=rule.strip_tracking,
                           strip_trailing_dot=rule.strip_trailing_dot)
    return atoms, None


def _implies(rule: Rule | None, atom: Atom) -> bool:
    """True if ``rule`` already does what ``atom`` would (so it is not a candidate)."""
    if rule is None:
        return False
    kind, name = atom
    if kind == "strip_params":
        return rule.strips(name)
    if kind == "trailing_slash":
        return rule.trailing_slash != "keep"
    if kind == "index_documents":
        return name in rule.index_documents
    return bool(getattr(rule, kind))


def _split(url: str) -> tuple[str, str, str, str, str | None]:
    """(before host, host, port part, path, query or None), as ``_apply_policy`` cuts."""
    hs, he = host_span(url)
    ps = url.find("/", he)
    qs = url.find("?", ps)
    return (url[:hs], url[hs:he], url[he:ps], url[ps:] if qs < 0 else url[ps:qs],
            None if qs < 0 else url[qs + 1:])


def _names(query: str | None) -> list[str]:
    if query is None:
        return []
    return [p.partition("=")[0] for p in query.split("&")]


def _shape(parts: tuple) -> tuple[str, str]:
    """What no rule of the vocabulary can change: host key and the lowercased path
    without index documents and trailing slashes. A redirect or canonical between two
    URLs of different shapes is navigation, not a spelling, and is not evidence."""
    path = parts[3].lower().rstrip("/")
    head, _, last = path.rpartition("/")
    while last in INDEX_DOCUMENTS:
        path = head.rstrip("/")
        head, _, last = path.rpartition("/")
    return host_key(parts[1]), path


class _UnionFind:
    def __init__(self) -> None:
        self.parent: list[int] = []

    def add(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, i: int) -> int:
        parent = self.parent
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:
            parent[i], i = root, parent[i]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def near_pairs(values: np.ndarray, bits: int) -> list[tuple[int, int]]:
    """Index pairs (i, j) of distinct uint64 ``values`` within ``bits`` bits. Pigeonhole:
    such a pair agrees exactly on one of ``bits + 1`` blocks, so only pairs sharing a
    block value are compared."""
    out = []
    n_blocks = bits + 1
    edges = [64 * k // n_blocks for k in range(n_blocks + 1)]
    for lo, hi in zip(edges, edges[1:]):
        mask = np.uint64((1 << (hi - lo)) - 1)
        block = (values >> np.uint64(lo)) & mask
        order = np.argsort(block, kind="stable")
        sb = block[order]
        starts = np.flatnonzero(np.r_[True, sb[1:] != sb[:-1]])
        ends = np.r_[starts[1:], len(sb)]
        for s, e in zip(starts.tolist(), ends.tolist()):
            if e - s < 2:
                continue
            run = order[s:e]
            v = values[run]
            for k in range(len(run) - 1):
                d = np.bitwise_count(v[k + 1:] ^ v[k])
                out.extend((int(run[k]), int(j)) for j in run[k + 1:][d <= bits])
    return out


class _HostEvidence:
    """One host's URLs (``parts``), their same-page classes (``cls``) and which
    classes hold 2xx content (``content``)."""

    def __init__(self, host: str, fetches: list[Fetch], near_bits: int):
        self.host = host
        self.index: dict[str, int] = {}
        self.parts: list[tuple] = []
        self.uf = _UnionFind()
        content: set[int] = set()
        by_digest: dict[int, int] = {}
        by_simhash: dict[int, int] = {}
        canonicals: list[tuple[int, str]] = []
        for f in fetches:
            i = self._node(f.url)
            if 300 <= f.status < 400 and f.location:
                j = self._node_if_close(i, f.location)
                if j is not None:
                    self.uf.union(i, j)
            elif 200 <= f.status < 300:
                if f.digest is not None:
                    self.uf.union(i, by_digest.setdefault(f.digest, i))
                    content.add(i)
                if f.simhash is not None:
                    self.uf.union(i, by_simhash.setdefault(f.simhash, i))
                    content.add(i)
                if f.canonical and f.canonical != f.url:
                    canonicals.append((i, f.canonical))
        if near_bits >= 0 and len(by_simhash) > 1:
            nodes = list(by_simhash.values())
            values = np.fromiter(by_simhash, dtype=np.uint64, count=len(nodes))
            for a, b in near_pairs(values, near_bits):
                self.uf.union(nodes[a], nodes[b])
        has_content = {self.uf.find(i) for i in content}
        self._add_canonicals(canonicals, has_content)
        self.cls = [self.uf.find(i) for i in range(len(self.parts))]
        self.content = {self.uf.find(r) for r in has_content}

    def _node(self, url: str) -> int:
        i = self.index.get(url)
        if i is None:
            i = self.index[url] = self.uf.add()
            self.parts.append(_split(url))
        return i

    def _node_if_close(self, i: int, target: str) -> int | None:
        j = self.index.get(target)
        if j is not None:
            return j if _shape(self.parts[i]) == _shape(self.parts[j]) else None
        parts = _split(target)
        if _shape(self.parts[i]) != _shape(parts):
            return None
        return self._node(target)

    def _add_canonicals(self, canonicals: list[tuple[int, str]], has_content: set[int]) -> None:
        """Declared canonicals join a page to its canonical URL only when that URL's
        class holds no content of its own and every page declaring it has one content
        class: a canonical shared by different pages (a site declaring its home page
        everywhere, or page 2 declaring page 1) is not evidence."""
        by_target: dict[str, list[int]] = defaultdict(list)
        for i, target in canonicals:
            by_target[target].append(i)
        for target, sources in by_target.items():
            j = self.index.get(target)
            if j is not None and self.uf.find(j) in has_content:
                continue
            if len({self.uf.find(i) for i in sources}) != 1:
                continue
            j = self._node_if_close(sources[0], target)
            if j is not None:
                for i in sources:
                    if _shape(self.parts[i]) == _shape(self.parts[j]):
                        self.uf.union(i, j)


@dataclass
class _Score:
    support: int = 0
    counter: int = 0
    paths: int = 0

    def passes(self, config: LearnConfig) -> bool:
        return (self.counter == 0 and self.support >= config.min_support
                and self.paths >= config.min_paths)


class _HostLearner:
    """Adopts atoms one at a time, each scored with the host's other adopted atoms (and
    the file's rule) applied first: a pair counts for an atom when the rule with it
    merges the two URLs and the rule without it does not. Since every adoption finds
    no counter-evidence, the adopted set as a whole merges no two different pages."""

    def __init__(self, ev: _HostEvidence, base: Rule | None, fixed: Rule | None):
        self.ev = ev
        self.base = base if fixed is None else (
            fixed if base is None else merge_rule(fixed, base, ev.host))
        self.adopted: list[Atom] = []
        self._set_forms()
        parts = ev.parts
        self.by_param: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(parts):
            for name in set(_names(p[4])):
                self.by_param[name].append(i)

    def rule(self, atoms: list[Atom]) -> Rule | None:
        if not atoms:
            return self.base
        return fold(self.ev.host, atoms, self.base)

    def _rewrite(self, rule: Rule | None, i: int) -> tuple:
        if rule is None:
            return self.ev.parts[i]
        pre, host, port, path, query = self.ev.parts[i]
        host, path, query = rule.rewrite(host, path, query)
        return pre, host, port, path, query

    def _set_forms(self) -> None:
        """The form of every URL under the adopted atoms, its number (``form_id``), and
        the URLs of each form."""
        rule = self.rule(self.adopted)
        self.forms = [self._rewrite(rule, i) for i in range(len(self.ev.parts))]
        ids: dict[tuple, int] = {}
        self.form_id = [ids.setdefault(f, len(ids)) for f in self.forms]
        self.by_form: dict[tuple, list[int]] = defaultdict(list)
        for i, f in enumerate(self.forms):
            self.by_form[f].append(i)

    def _affected(self, atom: Atom) -> Iterable[int]:
        """A superset of the URLs whose form ``atom`` can change."""
        kind, name = atom
        parts, forms = self.ev.parts, self.forms
        if kind == "strip_params":
            return self.by_param.get(name, ())
        if kind == "sort_query":
            return [i for i, f in enumerate(forms) if _unsorted(_names(f[4]))]
        if kind == "strip_www":
            return [i for i, p in enumerate(parts) if p[1].startswith("www.")]
        if kind == "lowercase_path":
            return [i for i, p in enumerate(parts) if p[3] != p[3].lower()]
        if kind == "index_documents":
            low = name.lower()
            return [i for i, p in enumerate(parts) if low in p[3].lower()]
        slash = name == "add"  # trailing_slash: URLs whose raw or current path needs it
        return [i for i, (p, f) in enumerate(zip(parts, forms))
                if p[3].endswith("/") != slash or f[3].endswith("/") != slash]

    def score(self, atom: Atom) -> _Score:
        rule = self.rule(self.adopted + [atom])
        touched = self._affected(atom)
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i in touched:
            groups[self._rewrite(rule, i)].append(i)
        touched = set(touched)
        out, paths = _Score(), set()
        for form, members in groups.items():
            members = members + [j for j in self.by_form.get(form, ()) if j not in touched]
            if len(members) < 2:
                continue
            same, counter = self._pairs(members)
            out.support += same
            out.counter += counter
            if same:  # a query rule's support is spread over pages, a path rule's over paths
                paths.add(form[3:5] if atom[0] in _QUERY_KINDS else form[3])
        out.paths = len(paths)
        return out

    def _pairs(self, members: list[int]) -> tuple[int, int]:
        """(same-page pairs, different-page pairs) among ``members`` (URLs one form
        under the candidate rule) that are not already one form without it."""
        fid, cls = self.form_id, self.ev.cls
        first = cls[members[0]]
        if all(cls[i] == first for i in members):  # one page: no different pairs
            n = len(members)
            return n * (n - 1) // 2 - _same(Counter(fid[i] for i in members)), 0
        by_form: dict[int, Counter] = defaultdict(Counter)
        for i in members:
            by_form[fid[i]][cls[i]] += 1
        if len(by_form) < 2:
            return 0, 0
        total: Counter = Counter()
        for c in by_form.values():
            total.update(c)
        content = self.ev.content
        return (_same(total) - sum(_same(c) for c in by_form.values()),
                _different(total, content) - sum(_different(c, content)
                                                 for c in by_form.values()))

    def adopt(self, atom: Atom) -> None:
        self.adopted.append(atom)
        self._set_forms()


def _unsorted(names: list[str]) -> bool:
    return any(a > b for a, b in zip(names, names[1:]))


def _same(counts: Counter) -> int:
    return sum(k * (k - 1) // 2 for k in counts.values())


def _different(counts: Counter, content: set[int]) -> int:
    ks = [k for c, k in counts.items() if c in content]
    s = sum(ks)
    return (s * s - sum(k * k for k in ks)) // 2


def _candidates(ev: _HostEvidence, fetches: list[Fetch], learner: _HostLearner) -> list[Atom]:
    parts = ev.parts
    out: list[Atom] = [("strip_params", n) for n in sorted(learner.by_param) if n]
    if any(_unsorted(_names(p[4])) for p in parts):
        out.append(("sort_query", ""))
    if any(p[3] != "/" for p in parts):
        out.append(("trailing_slash", _slash_direction(fetches)))
    if any(p[1].startswith("www.") for p in parts):
        out.append(("strip_www", ""))
    if any(p[3] != p[3].lower() for p in parts):
        out.append(("lowercase_path", ""))
    docs = {p[3].rstrip("/").rpartition("/")[2] for p in parts}
    out += [("index_documents", d) for d in sorted(docs) if d.lower() in INDEX_DOCUMENTS]
    return out


def _slash_direction(fetches: list[Fetch]) -> str:
    """"add" or "remove": what the host's redirects between slash spellings do, else
    what its canonicals do, else "remove"."""
    for pairs in ([(f.url, f.location) for f in fetches if 300 <= f.status < 400],
                  [(f.url, f.canonical) for f in fetches]):
        votes = Counter()
        for url, target in pairs:
            if target and target != url and target.rstrip("/") == url.rstrip("/"):
                votes[target.endswith("/")] += 1
        if votes[True] != votes[False]:
            return "add" if votes[True] > votes[False] else "remove"
    return "remove"


def learn_host(host: str, fetches: list[Fetch], base: Rule | None,
               previous: Rule | None, config: LearnConfig) -> tuple[Rule | None, list[Finding]]:
    """The learned rule of one host (None: nothing adopted) and its findings. ``base``
    is the file's rule for the host, ``previous`` the host's learned rule so far."""
    ev = _HostEvidence(host, fetches, config.near_bits)
    prev_atoms, fixed = atoms_of(previous) if previous is not None else ([], None)
    learner = _HostLearner(ev, base, fixed)
    scores: dict[Atom, _Score] = {}
    status: dict[Atom, str] = {}
    for atom in prev_atoms:
        if _implies(learner.base, atom):
            continue
        scores[atom] = s = learner.score(atom)
        status[atom] = "withdrawn" if s.counter else "adopted"
        if not s.counter:
            learner.adopt(atom)
    pending = [a for a in _candidates(ev, fetches, learner)
               if a not in status and not _implies(learner.base, a)]
    for _ in range(MAX_ROUNDS):
        progress = False
        for atom in pending:
            if status.get(atom) == "adopted" or (atom[0] == "trailing_slash" and any(
                    kind == "trailing_slash" for kind, _ in learner.adopted)):
                continue
            scores[atom] = s = learner.score(atom)
            if s.passes(config):
                learner.adopt(atom)
                status[atom] = "adopted"
                progress = True
            else:
                status[atom] = "rejected" if s.counter else "insufficient"
        if not progress:
            break
    findings = [Finding(host, kind, name, s.support, s.counter, s.paths, status[(kind, name)])
                for (kind, name), s in scores.items()
                if s.support or s.counter or (kind, name) in prev_atoms]
    if not learner.adopted and fixed is None:
        return None, findings
    return fold(host, learner.adopted, fixed), findings


def learn(fetches: Iterable[Fetch], policy: Policy, config: LearnConfig = LearnConfig(),
          previous: Mapping[str, Rule] | None = None) -> tuple[dict[str, Rule], list[Finding]]:
    """Rules learned per host from ``fetches`` (docs/evidence.md). ``policy``'s file
    rules (``policy.base``) apply first; ``previous`` (default ``policy.learned``) are
    the learned rules so far: each is re-examined and kept unless the evidence now
    contradicts it (withdrawn). Hosts whose key cannot name a rule (IPv6 literals)
    are skipped. Returns (host key -> learned rule, findings sorted by host, kind, name)."""
    base = policy.base
    previous = policy.learned if previous is None else previous
    by_host: dict[str, list[Fetch]] = defaultdict(list)
    for f in fetches:
        by_host[f.host].append(f)
    rules: dict[str, Rule] = {}
    findings: list[Finding] = []
    for host in sorted(set(by_host) | set(previous)):
        if not literal_host(host):
            continue
        rule, found = learn_host(host, by_host.get(host, []), base.rule_for(host),
                                 previous.get(host), config)
        if rule is not None:
            rules[host] = rule
        findings += found
    findings.sort(key=lambda f: (f.host, f.kind, f.name))
    return rules, findings
