"""A small, independent GBNF recognizer to check what a grammar-constrained server generated.

GBNF is llama.cpp's grammar format (`name ::= alternatives`, "literals", [classes], [^negated],
`.`, grouping, `*` `+` `?` `{m}` `{m,}` `{m,n}`, `#` comments, root rule `root`). `Grammar(text)`
parses it; `matches(s)` says whether the whole string is in the language, `is_prefix(s)` whether
some continuation of `s` is (what an output cut by max_tokens must satisfy).

The recognizer computes, for each (node, start position), the set of positions where the node can
end, memoized: exact for any context-free grammar without left recursion (GBNF grammars cannot
use left recursion either: llama.cpp refuses it). Prefix mode lets a terminal that runs past the
end of the text succeed at the end, so "the text ran out inside a derivation" counts as a match.
This is test code: it shares nothing with the server's grammar engine, on purpose.
"""
import re
import sys

sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))


class GrammarError(ValueError):
    pass


# ---------------------------------------------------------------- parsing

_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}


def _parse_char(src, i):
    """One possibly escaped character at src[i]; returns (char, next index)."""
    c = src[i]
    if c != "\\":
        return c, i + 1
    if i + 1 >= len(src):
        raise GrammarError("dangling backslash")
    e = src[i + 1]
    for letter, width in (("x", 2), ("u", 4), ("U", 8)):
        if e == letter:
            hexd = src[i + 2:i + 2 + width]
            if len(hexd) != width or not re.fullmatch(r"[0-9a-fA-F]+", hexd):
                raise GrammarError(f"bad \\{letter} escape at {i}")
            return chr(int(hexd, 16)), i + 2 + width
    if e in _ESCAPES:
        return _ESCAPES[e], i + 2
    raise GrammarError(f"unknown escape \\{e} at {i}")


def _tokenize(src):
    toks = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in " \t\r\n":
            i += 1
        elif c == "#":
            while i < n and src[i] not in "\r\n":
                i += 1
        elif src.startswith("::=", i):
            toks.append(("def", None))
            i += 3
        elif c == '"':
            i += 1
            chars = []
            while True:
                if i >= n:
                    raise GrammarError("unterminated string")
                if src[i] == '"':
                    i += 1
                    break
                ch, i = _parse_char(src, i)
                chars.append(ch)
            toks.append(("lit", "".join(chars)))
        elif c == "[":
            i += 1
            negated = i < n and src[i] == "^"
            if negated:
                i += 1
            ranges = []
            while True:
                if i >= n:
                    raise GrammarError("unterminated character class")
                if src[i] == "]":
                    i += 1
                    break
                lo, i = _parse_char(src, i)
                hi = lo
                if i + 1 < n and src[i] == "-" and src[i + 1] != "]":
                    hi, i = _parse_char(src, i + 1)
                ranges.append((lo, hi))
            toks.append(("cls", (negated, tuple(ranges))))
        elif c == "{":
            j = src.find("}", i)
            if j < 0:
                raise GrammarError("unterminated repetition")
            m = re.fullmatch(r"\s*(\d*)\s*(,?)\s*(\d*)\s*", src[i + 1:j])
            if not m or (not m.group(1) and not m.group(2)):
                raise GrammarError(f"bad repetition {src[i:j + 1]}")
            lo = int(m.group(1) or 0)
            hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
            toks.append(("rep", (lo, hi)))
            i = j + 1
        elif c in "()|*+?.":
            toks.append((c, None))
            i += 1
        elif re.match(r"[A-Za-z0-9_-]", c):
            m = re.match(r"[A-Za-z0-9_-]+", src[i:])
            toks.append(("name", m.group(0)))
            i += len(m.group(0))
        else:
            raise GrammarError(f"unexpected {c!r} at {i}")
    return toks


class Node:
    __slots__ = ("kind", "a", "b", "c")

    def __init__(self, kind, a=None, b=None, c=None):
        self.kind, self.a, self.b, self.c = kind, a, b, c


class Grammar:
    def __init__(self, text, root="root"):
        toks = _tokenize(text)
        self.rules = {}
        starts = [i for i in range(len(toks) - 1) if toks[i][0] == "name" and toks[i + 1][0] == "def"]
        if not starts or starts[0] != 0:
            raise GrammarError("a grammar is a list of `name ::= ...` rules")
        for k, s in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(toks)
            name = toks[s][1]
            if name in self.rules:
                raise GrammarError(f"rule {name} defined twice")
            self._toks, self._i = toks[s + 2:end], 0
            self.rules[name] = self._alternates()
            if self._i != len(self._toks):
                raise GrammarError(f"unexpected {self._toks[self._i]} in rule {name}")
        for name in self._refs():
            if name not in self.rules:
                raise GrammarError(f"undefined rule {name}")
        if root not in self.rules:
            raise GrammarError(f"no rule {root}")
        self.root = root

    def _refs(self):
        out, stack = set(), list(self.rules.values())
        while stack:
            node = stack.pop()
            if node.kind == "ref":
                out.add(node.a)
            elif node.kind in ("seq", "alt"):
                stack.extend(node.a)
            elif node.kind == "rep":
                stack.append(node.a)
        return out

    def _peek(self):
        return self._toks[self._i][0] if self._i < len(self._toks) else None

    def _alternates(self):
        alts = [self._sequence()]
        while self._peek() == "|":
            self._i += 1
            alts.append(self._sequence())
        return alts[0] if len(alts) == 1 else Node("alt", alts)

    def _sequence(self):
        items = []
        while self._peek() in ("lit", "cls", "name", "(", "."):
            kind, val = self._toks[self._i]
            self._i += 1
            if kind == "lit":
                item = Node("lit", val)
            elif kind == "cls":
                item = Node("cls", val[0], val[1])
            elif kind == "name":
                item = Node("ref", val)
            elif kind == ".":
                item = Node("any")
            else:
                item = self._alternates()
                if self._peek() != ")":
                    raise GrammarError("missing )")
                self._i += 1
            while self._peek() in ("*", "+", "?", "rep"):
                op, val = self._toks[self._i]
                self._i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(op, val)
                item = Node("rep", item, lo, hi)
            items.append(item)
        return items[0] if len(items) == 1 else Node("seq", items)

    # ------------------------------------------------------------ recognizing

    def matches(self, text):
        """The whole text is a sentence of the grammar."""
        return len(text) in _Run(self, text, prefix=False).ends(self.rules[self.root], 0)

    def is_prefix(self, text):
        """Some sentence of the grammar starts with text."""
        return len(text) in _Run(self, text, prefix=True).ends(self.rules[self.root], 0)


class _Run:
    def __init__(self, grammar, text, prefix):
        self.g, self.t, self.n, self.prefix = grammar, text, len(text), prefix
        self.memo = {}
        self.active = set()

    def ends(self, node, pos):
        key = (id(node), pos)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        if key in self.active:
            raise GrammarError("left recursion")
        self.active.add(key)
        out = self._ends(node, pos)
        self.active.discard(key)
        self.memo[key] = out
        return out

    def _char_ok(self, node, ch):
        if node.kind == "any":
            return True
        inside = any(lo <= ch <= hi for lo, hi in node.b)
        return inside != node.a

    def _ends(self, node, pos):
        t, n = self.t, self.n
        if self.prefix and pos == n:
            return frozenset((n,))  # the empty rest is a prefix of whatever the node derives
        k = node.kind
        if k == "lit":
            s = node.a
            if t.startswith(s, pos):
                return frozenset((pos + len(s),))
            if self.prefix and s.startswith(t[pos:]):
                return frozenset((n,))
            return frozenset()
        if k in ("cls", "any"):
            if pos < n:
                return frozenset((pos + 1,)) if self._char_ok(node, t[pos]) else frozenset()
            return frozenset((n,)) if self.prefix else frozenset()
        if k == "ref":
            return self.ends(self.g.rules[node.a], pos)
        if k == "alt":
            out = set()
            for alt in node.a:
                out |= self.ends(alt, pos)
            return frozenset(out)
        if k == "seq":
            cur = {pos}
            for item in node.a:
                nxt = set()
                for p in cur:
                    nxt |= self.ends(item, p)
                cur = nxt
                if not cur:
                    break
            return frozenset(cur)
        if k == "rep":
            item, lo, hi = node.a, node.b, node.c
            # States (count, position); unbounded counts above `lo` collapse into `lo`.
            cap = hi if hi is not None else lo
            seen = {(0, pos)}
            stack = [(0, pos)]
            out = set()
            while stack:
                cnt, p = stack.pop()
                if cnt >= lo:
                    out.add(p)
                if hi is not None and cnt >= hi:
                    continue
                for q in self.ends(item, p):
                    state = (min(cnt + 1, cap) if hi is None else cnt + 1, q)
                    if state not in seen:
                        seen.add(state)
                        stack.append(state)
            return frozenset(out)
        raise AssertionError(k)
