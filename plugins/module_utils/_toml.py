# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""A small, comment-preserving TOML reader/editor (stdlib only, Python 3.8+).

PRIVATE: this module_utils file may change at any time; do not import it from
outside the collection.

Why not ``tomllib``: it exists only from Python 3.11 and cannot write, and a
parse -> dump round trip (tomli-w, toml) drops every comment and reorders the
user's file.  Runtime configs (containerd, CRI-O) are hand-edited files that
carry comments and site settings, so edits here are *surgical*: the document
is kept as text, parsed into statements that remember their character spans,
and an edit splices new text into exactly one place.  Everything that is not
edited stays byte-for-byte identical.

Supported: TOML 1.0 keys (bare, quoted, dotted), basic/literal/multi-line
strings, integers (dec/hex/oct/bin, underscores), floats (inf/nan), booleans,
offset/local date-times, arrays (multi-line, comments, trailing commas),
inline tables, ``[table]`` and ``[[array.of.tables]]`` headers (read; editing
inside an array of tables is refused with a clear error).
"""
from __future__ import annotations

import datetime
import json
import math
import re

__all__ = ["TomlError", "TomlEditError", "Document", "loads", "dumps_value", "dumps_tables", "format_key"]


class TomlError(ValueError):
    """The text is not valid TOML (message carries line and column)."""


class TomlEditError(ValueError):
    """The requested edit cannot be done without rewriting user content."""


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_WS = " \t"
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}
_DATETIME = re.compile(
    r"(\d{4}-\d{2}-\d{2})?([Tt ]?)(\d{2}:\d{2}:\d{2}(?:\.\d+)?)?(Z|z|[+-]\d{2}:\d{2})?"
)
_NUMBER = re.compile(
    r"[+-]?(?:0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|inf|nan|"
    r"(?:\d[\d_]*)(?:\.\d[\d_]*)?(?:[eE][+-]?\d[\d_]*)?)"
)


class _Stmt(object):
    """One statement: a header, a key/value pair, or a blank/comment line."""

    __slots__ = ("kind", "start", "end", "table", "key", "value", "vstart", "vend", "aot")

    def __init__(self, kind, start, end, table=(), key=(), value=None, vstart=0, vend=0, aot=False):
        self.kind = kind          # 'table' | 'kv' | 'trivia'
        self.start = start        # offset of the first character of the line
        self.end = end            # offset just after the newline (or EOF)
        self.table = table        # table path the statement belongs to
        self.key = key            # kv: dotted key relative to the table
        self.value = value        # kv: parsed value
        self.vstart = vstart      # kv: value span
        self.vend = vend
        self.aot = aot            # header is [[...]] or table lives inside an array of tables


class _Parser(object):
    def __init__(self, text):
        self.s = text
        self.i = 0
        self.n = len(text)

    # -- low level -----------------------------------------------------
    def error(self, msg, pos=None):
        pos = self.i if pos is None else pos
        line = self.s.count("\n", 0, pos) + 1
        col = pos - (self.s.rfind("\n", 0, pos) + 1) + 1
        raise TomlError("%s (line %d, column %d)" % (msg, line, col))

    def peek(self, k=0):
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def skip_ws(self):
        while self.i < self.n and self.s[self.i] in _WS:
            self.i += 1

    def skip_comment(self):
        if self.peek() == "#":
            while self.i < self.n and self.s[self.i] != "\n":
                c = self.s[self.i]
                if (ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F:
                    self.error("control character in comment")
                self.i += 1

    def skip_ws_comments_newlines(self):
        while True:
            self.skip_ws()
            self.skip_comment()
            if self.peek() == "\n":
                self.i += 1
            elif self.s.startswith("\r\n", self.i):
                self.i += 2
            else:
                return

    def end_of_line(self):
        """Consume trailing whitespace, comment and newline; error on junk."""
        self.skip_ws()
        self.skip_comment()
        if self.i >= self.n:
            return
        if self.s.startswith("\r\n", self.i):
            self.i += 2
        elif self.s[self.i] == "\n":
            self.i += 1
        else:
            self.error("expected end of line, found %r" % self.s[self.i])

    # -- keys ----------------------------------------------------------
    def key(self):
        parts = [self.simple_key()]
        while True:
            self.skip_ws()
            if self.peek() != ".":
                return tuple(parts)
            self.i += 1
            self.skip_ws()
            parts.append(self.simple_key())

    def simple_key(self):
        c = self.peek()
        if c == '"':
            if self.s.startswith('"""', self.i):
                self.error("multi-line strings are not allowed as keys")
            return self.basic_string()
        if c == "'":
            if self.s.startswith("'''", self.i):
                self.error("multi-line strings are not allowed as keys")
            return self.literal_string()
        m = _BARE_KEY.match(self.s, self.i)
        if not m:
            self.error("invalid key")
        self.i = m.end()
        return m.group(0)

    # -- strings -------------------------------------------------------
    def basic_string(self):
        self.i += 1
        out = []
        while True:
            if self.i >= self.n:
                self.error("unterminated string")
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\n":
                self.error("newline in single-line string")
            if c == "\\":
                out.append(self.escape())
                continue
            if (ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F:
                self.error("control character in string")
            out.append(c)
            self.i += 1

    def escape(self):
        c = self.peek(1)
        if c in _ESCAPES:
            self.i += 2
            return _ESCAPES[c]
        if c in ("u", "U"):
            width = 4 if c == "u" else 8
            hexs = self.s[self.i + 2:self.i + 2 + width]
            if len(hexs) != width or not all(h in "0123456789abcdefABCDEF" for h in hexs):
                self.error("invalid unicode escape")
            cp = int(hexs, 16)
            if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                self.error("invalid unicode scalar value")
            self.i += 2 + width
            return chr(cp)
        self.error("invalid escape sequence")

    def literal_string(self):
        self.i += 1
        j = self.i
        while True:
            if self.i >= self.n:
                self.error("unterminated string")
            c = self.s[self.i]
            if c == "'":
                val = self.s[j:self.i]
                self.i += 1
                return val
            if c == "\n":
                self.error("newline in single-line string")
            self.i += 1

    def ml_string(self, quote):
        delim = quote * 3
        self.i += 3
        if self.s.startswith("\r\n", self.i):
            self.i += 2
        elif self.peek() == "\n":
            self.i += 1
        out = []
        while True:
            if self.i >= self.n:
                self.error("unterminated multi-line string")
            if self.s.startswith(delim, self.i):
                # up to two extra quotes may end the string
                extra = 0
                while extra < 2 and self.s.startswith(delim + quote * (extra + 1), self.i):
                    extra += 1
                out.append(quote * extra)
                self.i += 3 + extra
                return "".join(out)
            c = self.s[self.i]
            if quote == '"' and c == "\\":
                # line-ending backslash trims whitespace and newlines
                j = self.i + 1
                while j < self.n and self.s[j] in _WS:
                    j += 1
                if j < self.n and self.s[j] in "\r\n":
                    while j < self.n and self.s[j] in " \t\r\n":
                        j += 1
                    self.i = j
                    continue
                out.append(self.escape())
                continue
            out.append(c)
            self.i += 1

    # -- values --------------------------------------------------------
    def value(self):
        c = self.peek()
        if c == '"':
            if self.s.startswith('"""', self.i):
                return self.ml_string('"')
            return self.basic_string()
        if c == "'":
            if self.s.startswith("'''", self.i):
                return self.ml_string("'")
            return self.literal_string()
        if c == "[":
            return self.array()
        if c == "{":
            return self.inline_table()
        if self.s.startswith("true", self.i):
            self.i += 4
            return True
        if self.s.startswith("false", self.i):
            self.i += 5
            return False
        m = _DATETIME.match(self.s, self.i)
        if m and (m.group(1) or (m.group(3) and self.peek(2) == ":")):
            return self.datetime(m)
        m = _NUMBER.match(self.s, self.i)
        if m and m.group(0):
            return self.number(m)
        self.error("invalid value")

    def datetime(self, m):
        date_s, sep, time_s, off = m.group(1), m.group(2), m.group(3), m.group(4)
        if date_s and sep and not time_s:
            # 'T' without time, or a trailing space: date only
            if sep in "Tt":
                self.error("invalid date-time")
            self.i = m.start() + len(date_s)
            time_s = off = None
        else:
            self.i = m.end()
        try:
            if date_s and time_s:
                text = "%sT%s%s" % (date_s, time_s, "+00:00" if off in ("Z", "z") else (off or ""))
                frac = re.search(r"\.(\d+)", text)
                if frac and len(frac.group(1)) > 6:
                    text = text.replace(frac.group(0), "." + frac.group(1)[:6])
                elif frac and len(frac.group(1)) < 6:
                    text = text.replace(frac.group(0), "." + frac.group(1).ljust(6, "0"))
                return datetime.datetime.fromisoformat(text)
            if date_s:
                return datetime.date.fromisoformat(date_s)
            frac = re.search(r"\.(\d+)", time_s)
            if frac:
                time_s = time_s.replace(frac.group(0), "." + frac.group(1)[:6].ljust(6, "0"))
            return datetime.time.fromisoformat(time_s)
        except ValueError:
            self.error("invalid date or time", m.start())

    def number(self, m):
        text = m.group(0)
        self.i = m.end()
        raw = text
        if "__" in raw or raw.endswith("_") or raw.startswith("_"):
            self.error("invalid number", m.start())
        body = raw.lstrip("+-")
        sign = -1 if raw.startswith("-") else 1
        if body in ("inf", "nan"):
            return sign * float("inf") if body == "inf" else float("nan")
        clean = body.replace("_", "")
        if body[:2] in ("0x", "0o", "0b"):
            if raw[0] in "+-":
                self.error("sign not allowed on non-decimal integer", m.start())
            return int(clean[2:], {"x": 16, "o": 8, "b": 2}[body[1]])
        if re.search(r"_[.eE]|[.eE]_|\._", body):
            self.error("invalid number", m.start())
        if "." in clean or "e" in clean or "E" in clean:
            return sign * float(clean)
        if len(clean) > 1 and clean[0] == "0":
            self.error("leading zeros are not allowed", m.start())
        return sign * int(clean)

    def array(self):
        self.i += 1
        out = []
        while True:
            self.skip_ws_comments_newlines()
            if self.peek() == "]":
                self.i += 1
                return out
            out.append(self.value())
            self.skip_ws_comments_newlines()
            c = self.peek()
            if c == ",":
                self.i += 1
            elif c == "]":
                self.i += 1
                return out
            else:
                self.error("expected ',' or ']' in array")

    def inline_table(self):
        self.i += 1
        out = {}
        self.skip_ws()
        if self.peek() == "}":
            self.i += 1
            return out
        while True:
            self.skip_ws()
            key = self.key()
            self.skip_ws()
            if self.peek() != "=":
                self.error("expected '=' in inline table")
            self.i += 1
            self.skip_ws()
            _set_new(out, key, self.value(), self)
            self.skip_ws()
            c = self.peek()
            if c == ",":
                self.i += 1
            elif c == "}":
                self.i += 1
                return out
            else:
                self.error("expected ',' or '}' in inline table")


def _set_new(d, key, value, parser):
    for part in key[:-1]:
        nxt = d.setdefault(part, {})
        if not isinstance(nxt, dict):
            parser.error("key %s redefined" % format_key(key))
        d = nxt
    if key[-1] in d:
        parser.error("key %s defined twice" % format_key(key))
    d[key[-1]] = value


def _parse(text):
    """Parse ``text`` into (data, statements)."""
    if "\x00" in text:
        raise TomlError("NUL byte in document")
    p = _Parser(text)
    data = {}
    stmts = []
    table = ()
    aot_ctx = False
    current = data
    defined_headers = set()
    inline_defined = set()   # full paths whose value is an inline table / array (closed)
    dotted_tables = set()    # tables created by dotted keys (cannot get a header later)
    while p.i < p.n:
        start = p.i
        p.skip_ws()
        c = p.peek()
        if c in ("", "\n", "#") or p.s.startswith("\r\n", p.i):
            p.end_of_line()
            stmts.append(_Stmt("trivia", start, p.i, table))
            continue
        if c == "[":
            is_aot = p.s.startswith("[[", p.i)
            p.i += 2 if is_aot else 1
            p.skip_ws()
            path = p.key()
            p.skip_ws()
            closing = "]]" if is_aot else "]"
            if not p.s.startswith(closing, p.i):
                p.error("expected %r" % closing)
            p.i += len(closing)
            p.end_of_line()
            # walk / create the path
            node = data
            in_aot = False
            for k, part in enumerate(path):
                last = k == len(path) - 1
                sub = path[:k + 1]
                if sub in inline_defined:
                    p.error("table %s is already defined inline" % format_key(sub), start)
                if last and is_aot:
                    arr = node.setdefault(part, [])
                    if not isinstance(arr, list) or sub not in _aot_paths(stmts):
                        if not (isinstance(arr, list) and not arr):
                            p.error("cannot redefine %s as array of tables" % format_key(sub), start)
                    arr.append({})
                    node = arr[-1]
                    in_aot = True
                    break
                nxt = node.get(part)
                if nxt is None:
                    nxt = node[part] = {}
                elif isinstance(nxt, list):
                    if not nxt or not isinstance(nxt[-1], dict):
                        p.error("cannot extend array %s" % format_key(sub), start)
                    nxt = nxt[-1]
                    in_aot = True
                elif not isinstance(nxt, dict):
                    p.error("key %s is not a table" % format_key(sub), start)
                node = nxt
            if not is_aot:
                if path in defined_headers or path in dotted_tables:
                    p.error("table %s defined twice" % format_key(path), start)
                defined_headers.add(path)
            current = node
            table = path
            aot_ctx = in_aot or is_aot
            stmts.append(_Stmt("table", start, p.i, path, aot=aot_ctx))
            continue
        # key = value
        key = p.key()
        p.skip_ws()
        if p.peek() != "=":
            p.error("expected '=' after key")
        p.i += 1
        p.skip_ws()
        vstart = p.i
        value = p.value()
        vend = p.i
        p.end_of_line()
        node = current
        for k, part in enumerate(key[:-1]):
            full = table + key[:k + 1]
            if full in defined_headers and full not in dotted_tables:
                p.error("dotted key %s extends a table defined with a header" % format_key(full), start)
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict) or full in inline_defined:
                p.error("key %s is not a table" % format_key(full), start)
            dotted_tables.add(full)
            node = nxt
        if key[-1] in node:
            p.error("key %s defined twice" % format_key(table + key), start)
        node[key[-1]] = value
        if isinstance(value, (dict, list)):
            inline_defined.add(table + key)
        stmts.append(_Stmt("kv", start, p.i, table, key, value, vstart, vend, aot=aot_ctx))
    return data, stmts


def _aot_paths(stmts):
    return set(s.table for s in stmts if s.kind == "table" and s.aot)


def loads(text):
    """Parse TOML text into plain Python data (like ``tomllib.loads``)."""
    return _parse(text)[0]


# -- writing -----------------------------------------------------------

def format_key(path):
    if isinstance(path, str):
        path = (path,)
    return ".".join(p if _BARE_KEY.fullmatch(p) else json.dumps(p, ensure_ascii=False) for p in path)


def dumps_value(value):
    """Serialise a Python value as a single-line TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        out = json.dumps(value, ensure_ascii=False)
        # json escapes DEL as-is; TOML forbids a raw DEL in basic strings
        return out.replace("\x7f", "\\u007f")
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join("%s = %s" % (format_key(k), dumps_value(v)) for k, v in value.items()) + " }"
    raise TomlEditError("cannot write %r as TOML" % (value,))


def dumps_tables(data, prefix=(), indent=""):
    """Serialise a nested dict as TOML text with one ``[table]`` per dict.

    Used for files the collection owns entirely (drop-ins); hand-edited files
    go through :class:`Document` instead.
    """
    lines = []
    scalars = [(k, v) for k, v in data.items() if not _is_table(v)]
    tables = [(k, v) for k, v in data.items() if _is_table(v)]
    if prefix and (scalars or not tables):
        lines.append("%s[%s]" % (indent, format_key(prefix)))
    for k, v in scalars:
        lines.append("%s%s = %s" % (indent, format_key(k), dumps_value(v)))
    for k, v in tables:
        if lines:
            lines.append("")
        lines.append(dumps_tables(v, prefix + (k,), indent).rstrip("\n"))
    return "\n".join(lines) + "\n"


def _is_table(v):
    return isinstance(v, dict)


def _flatten(value, prefix=()):
    """Yield (relative path, leaf) pairs; empty dicts are leaves."""
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _flatten(v, prefix + (k,))
    else:
        yield prefix, value


class Document(object):
    """A TOML document that can be edited in place, keeping everything else.

    ``doc.data`` is the parsed content; ``doc.text`` the current text.
    """

    def __init__(self, text=""):
        self.text = text or ""
        self._reparse()

    def _reparse(self):
        self.data, self._stmts = _parse(self.text)

    # -- reading ---------------------------------------------------------
    def get(self, path, default=None):
        node = self.data
        for part in path:
            if isinstance(node, list):
                return default
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def has_table_header(self, path):
        return any(s.kind == "table" and s.table == tuple(path) for s in self._stmts)

    # -- editing -----------------------------------------------------------
    def set(self, path, value):
        """Set ``path`` (tuple of keys) to ``value``; return True when changed.

        A dict value is merged leaf by leaf (keys not named are kept); use
        :meth:`delete` first to replace a whole table.
        """
        path = tuple(path)
        if not path:
            raise TomlEditError("empty key path")
        if isinstance(value, dict):
            changed = False
            if not value:
                return self._ensure_table(path)
            if self.get(path, _MISSING) is _MISSING:
                # a whole new table: one splice instead of one per leaf
                self._check_not_aot(path)
                owner, rel = self._owner(path[:-1])
                if owner is None or not rel:
                    self._insert_new_table(path, None, block=self._block_lines(path, value))
                    return True
            for rel, leaf in _flatten(value):
                changed = self._set_leaf(path + rel, leaf) or changed
            return changed
        return self._set_leaf(path, value)

    def _check_not_aot(self, path):
        node = self.data
        for k, part in enumerate(path):
            if isinstance(node, list):
                raise TomlEditError("%s is inside an array of tables; refusing to edit it" % format_key(path[:k]))
            if not isinstance(node, dict) or part not in node:
                return
            node = node[part]
        if isinstance(node, list) and node and all(isinstance(x, dict) for x in node) \
                and any(s.kind == "table" and s.aot and s.table == path for s in self._stmts):
            raise TomlEditError("%s is an array of tables; refusing to edit it" % format_key(path))

    def _set_leaf(self, path, value):
        self._check_not_aot(path)
        current = self.get(path, _MISSING)
        if current is not _MISSING and _same(current, value):
            return False
        # 1. a key/value statement defines exactly this key -> replace its value
        for s in self._stmts:
            if s.kind == "kv" and s.table + s.key == path:
                if isinstance(current, dict) and isinstance(value, dict):
                    value = _merged(current, value)
                self._splice(s.vstart, s.vend, dumps_value(value))
                return True
        # 2. the key lives inside an inline table -> rewrite that inline value
        for s in self._stmts:
            full = s.table + s.key
            if s.kind == "kv" and isinstance(s.value, dict) and path[:len(full)] == full:
                new = _deep_set(_copy(s.value), path[len(full):], value)
                self._splice(s.vstart, s.vend, dumps_value(new))
                return True
            if s.kind == "kv" and path[:len(full)] == full and len(path) > len(full):
                raise TomlEditError("%s is not a table" % format_key(full))
        if current is not _MISSING and isinstance(current, dict):
            raise TomlEditError("%s is a table; cannot replace it with a value" % format_key(path))
        # 3. insert a new key
        parent, leaf = path[:-1], path[-1]
        owner, rel = self._owner(parent)
        if owner is not None:
            line = "%s = %s" % (format_key(rel + (leaf,)), dumps_value(value))
            self._insert_in_table(owner, line)
        else:
            self._insert_new_table(parent, ["%s = %s" % (format_key(leaf), dumps_value(value))])
        return True

    def _ensure_table(self, path):
        self._check_not_aot(path)
        node = self.get(path, _MISSING)
        if node is not _MISSING:
            if not isinstance(node, dict):
                raise TomlEditError("%s is not a table" % format_key(path))
            return False
        owner, rel = self._owner(path[:-1])
        if owner is not None and rel:
            self._insert_in_table(owner, "%s = {}" % format_key(rel + (path[-1],)))
        else:
            self._insert_new_table(path, [])
        return True

    def _owner(self, parent):
        """Where to put a key whose table is ``parent``.

        Returns (table_path, relative_dotted_prefix) when the key can go into
        an existing header's body (the header itself, or a header that owns
        ``parent`` through dotted keys), else (None, None) -> new header.
        """
        headers = [s.table for s in self._stmts if s.kind == "table" and not s.aot]
        if parent in headers:
            return parent, ()
        if parent == ():
            return (), ()
        # dotted-key ownership: a header H (or root) with a dotted key whose
        # first segments lead to parent
        for k in range(len(parent) - 1, -1, -1):
            head = parent[:k]
            if head and head not in headers:
                continue
            rel = parent[k:]
            for s in self._stmts:
                if s.kind == "kv" and s.table == head and len(s.key) > 1 and s.key[0] == rel[0]:
                    return head, rel
            if head in headers or head == ():
                # the nearest real header does not own parent via dotted keys
                break
        return None, None

    def _insert_in_table(self, table, line):
        body = [s for s in self._stmts if s.table == table and s.kind in ("kv", "table") and not s.aot]
        kvs = [s for s in body if s.kind == "kv"]
        if table == ():
            if kvs:
                anchor = kvs[-1]
                indent = self._indent(anchor)
                self._splice(anchor.end, anchor.end, self._nl_fix(anchor.end) + indent + line + "\n")
            else:
                pos = self._root_insert_pos()
                self._splice(pos, pos, line + "\n")
            return
        anchor = kvs[-1] if kvs else [s for s in body if s.kind == "table"][0]
        indent = self._indent(kvs[-1]) if kvs else self._indent(anchor)
        self._splice(anchor.end, anchor.end, self._nl_fix(anchor.end) + indent + line + "\n")

    def _root_insert_pos(self):
        first = None
        for idx, s in enumerate(self._stmts):
            if s.kind == "table":
                first = idx
                break
        if first is None:
            return len(self.text)
        # step back over the comment block that sits directly above the header
        j = first
        while j > 0 and self._stmts[j - 1].kind == "trivia" and \
                self.text[self._stmts[j - 1].start:self._stmts[j - 1].end].strip().startswith("#"):
            j -= 1
        return self._stmts[j].start

    def _block_lines(self, path, value):
        """``[path]`` with its scalars, then its sub-tables, indented like siblings."""
        hindent, kindent = self._sibling_indent(path)
        out = ["%s[%s]" % (hindent, format_key(path))]
        out.extend("%s%s = %s" % (kindent, format_key(k), dumps_value(v))
                   for k, v in value.items() if not isinstance(v, dict))
        for k, v in value.items():
            if isinstance(v, dict):
                out.append("")
                out.extend(self._block_lines(path + (k,), v))
        return out

    def _insert_new_table(self, path, lines, block=None):
        # group with the closest existing relatives: after the last statement
        # of the last table that shares the longest prefix with ``path``
        best_len, best_end = -1, None
        for s in self._stmts:
            if s.kind == "trivia" or s.table == ():
                continue
            common = 0
            for a, b in zip(s.table, path):
                if a != b:
                    break
                common += 1
            if common and common >= best_len:
                best_len, best_end = common, s.end
        if block is None:
            hindent, kindent = self._sibling_indent(path)
            block = "%s[%s]\n" % (hindent, format_key(path)) + "".join(kindent + ln + "\n" for ln in lines)
        else:
            block = "".join(ln + "\n" for ln in block)
        if best_end is None:
            pos = len(self.text)
            sep = self._nl_fix(pos)
            if self.text.strip():
                sep += "\n"
            self._splice(pos, pos, sep + block)
        else:
            self._splice(best_end, best_end, self._nl_fix(best_end) + "\n" + block)

    def _sibling_indent(self, path):
        """Indentation used by a sibling table (same parent), else a cousin
        (same grandparent, same depth), to blend in."""
        for depth in (1, 2):
            if len(path) < depth:
                break
            for idx, s in enumerate(self._stmts):
                if s.kind == "table" and not s.aot and len(s.table) == len(path) and s.table[:-depth] == path[:-depth]:
                    hindent = self._indent(s)
                    for t in self._stmts[idx + 1:]:
                        if t.kind == "table":
                            break
                        if t.kind == "kv":
                            return hindent, self._indent(t)
                    return hindent, hindent
        return "", ""

    def delete(self, path):
        """Remove a key or a whole table (with its sub-tables); True if changed."""
        path = tuple(path)
        if self.get(path, _MISSING) is _MISSING:
            return False
        self._check_not_aot(path)
        # key/value statement
        for s in self._stmts:
            if s.kind == "kv" and s.table + s.key == path:
                self._splice(s.start, s.end, "")
                return True
            full = s.table + s.key
            if s.kind == "kv" and isinstance(s.value, dict) and path[:len(full)] == full:
                new = _copy(s.value)
                _deep_del(new, path[len(full):])
                self._splice(s.vstart, s.vend, dumps_value(new))
                return True
        # tables: remove every header region at or below path, and dotted keys
        spans = []
        stmts = self._stmts
        for idx, s in enumerate(stmts):
            if s.kind == "table" and s.table[:len(path)] == path:
                end = len(self.text)
                for t in stmts[idx + 1:]:
                    if t.kind == "table":
                        end = t.start
                        break
                # keep trailing comments that introduce the next table
                spans.append((s.start, self._trim_region_end(s.start, end)))
            elif s.kind == "kv" and (s.table + s.key)[:len(path)] == path and s.table[:len(path)] != path:
                spans.append((s.start, s.end))
        for a, b in sorted(spans, reverse=True):
            self.text = self.text[:a] + self.text[b:]
        self._reparse()
        return True

    def _trim_region_end(self, start, end):
        """Region [start, end) minus a trailing comment block (belongs to next header)."""
        region = self.text[start:end]
        lines = region.splitlines(True)
        while len(lines) > 1 and lines[-1].strip().startswith("#"):
            lines.pop()
        return start + sum(len(x) for x in lines)

    # -- helpers ---------------------------------------------------------
    def _indent(self, stmt):
        line = self.text[stmt.start:stmt.end]
        return line[:len(line) - len(line.lstrip(" \t"))]

    def _nl_fix(self, pos):
        """A newline when inserting right after a last line that has none."""
        if pos > 0 and pos == len(self.text) and not self.text.endswith("\n"):
            return "\n"
        return ""

    def _splice(self, a, b, new):
        self.text = self.text[:a] + new + self.text[b:]
        self._reparse()


_MISSING = object()


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return isinstance(a, float) == isinstance(b, float) and a == b
    return a == b


def _copy(v):
    if isinstance(v, dict):
        return dict((k, _copy(x)) for k, x in v.items())
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v


def _merged(a, b):
    out = _copy(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merged(out[k], v)
        else:
            out[k] = _copy(v)
    return out


def _deep_set(d, path, value):
    node = d
    for part in path[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = node[part] = {}
        node = nxt
    node[path[-1]] = value
    return d


def _deep_del(d, path):
    node = d
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
