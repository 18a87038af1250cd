# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""A small, comment-preserving TOML reader/editor (stdlib only, Python 3.8+).

PRIVATE: this module_utils file may change at any time; do not import it from
outside the collection.

Why not ``tomllib``: it exists only from Python 3.11 and cannot write, and a
parse -> dump round trip (tomli-w, toml) drops every comment and reorders the
user's file.  Runtime configs (containerd, CRI-O) are hand-edited files that
carry comments and site settings, so edits here are *surgical*: the document
is kept as text, parsed into statements that remember their character spans,
and an edit splices new text into exactly one place.  Everything that is not
edited stays byte-for-byte identical: comments, blank lines, key order,
multi-line arrays, number and string spellings, and the file's line endings
(text inserted into a CRLF file gets CRLF).

Why not a round-trip library from PyPI (tomlkit): decided against, for now.
This code runs *on the targets* inside the module payload, often before the
NVIDIA packages -- and on some nodes before any pip -- exist there.  A
third-party package would have to be installed on every node by the role
first (a distro package on some releases, pip on others, which PEP 668 blocks
for the system Python of current Debian/Ubuntu), kept in step with the
collection, and made to work offline; a module that edits the file deciding
whether containers run must not depend on that.  What a library would buy
is conformance and formatting preservation, and both are tested here instead:
the reader is run over the whole official toml-test suite (TOML 1.0 file
list: every valid file parses to the expected values, every invalid one is
rejected with :class:`TomlError`) and over thousands of mutations of it,
judged against ``tomllib`` (tests/unit/plugins/module_utils/
test_toml_conformance.py), and the editor's edits are checked to leave every
byte they do not own in place (test_toml.py, test_toml_edits.py).  The
editor only ever needs a few operations (set a key, add a table, delete a
key or table), which keeps it small enough to review.  Revisit if
the collection gets a controller-side action plugin that can carry
dependencies.

Supported: all of TOML 1.0 (keys bare/quoted/dotted, every string form,
integers dec/hex/oct/bin, floats with inf/nan, booleans, offset/local
date-times, dates and times, arrays (multi-line, comments, trailing commas),
inline tables, ``[table]`` and ``[[array.of.tables]]`` headers), and only
1.0: TOML 1.1 additions (newlines in inline tables, the escapes backslash-e
and backslash-x, times without seconds) are errors, as in ``tomllib``.  Text
may be given as ``str`` or as UTF-8 ``bytes`` (invalid UTF-8 is a
:class:`TomlError`).

Editing:

* an existing key: only its value span is replaced (indentation and comment
  kept); a multi-line array is kept as it is unless that very array changes,
  and growing or shrinking an array keeps its layout and comments;
* a key inside an inline table (``runtimes = { runc = {...} }``): edited in
  place inside the braces -- the rest of the inline table, multi-line arrays
  in it included, is kept; inline tables are never converted to headers;
* a new key of an existing table: appended after the table's last key, with
  its indentation; a table reached through dotted keys gets a dotted key;
* a new table: inserted after its closest relatives, indented like siblings;
  root keys go above the first table and the comment block on top of it;
* editing inside an array of tables, or turning a table into a value, is
  refused with :class:`TomlEditError`.  An edit never leaves the document
  changed when it fails.
"""
from __future__ import annotations

import datetime
import json
import math
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

__all__ = ["TomlError", "TomlEditError", "Document", "loads", "dumps_value", "dumps_tables", "format_key"]


class TomlError(InputError):
    """The text is not valid TOML (message carries line and column)."""


class TomlEditError(InputError):
    """The requested edit cannot be done without rewriting user content."""


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_WS = " \t"
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_TIME = re.compile(r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?")
_OFFSET = re.compile(r"[Zz]|([+-])(\d{2}):(\d{2})")
_NUMBER = re.compile(
    r"(?P<hex>0x[0-9A-Fa-f](?:_?[0-9A-Fa-f])*)"
    r"|(?P<oct>0o[0-7](?:_?[0-7])*)"
    r"|(?P<bin>0b[01](?:_?[01])*)"
    r"|(?P<special>[+-]?(?:inf|nan))"
    r"|(?P<dec>[+-]?(?:0|[1-9](?:_?[0-9])*)(?P<frac>\.[0-9](?:_?[0-9])*)?(?P<exp>[eE][+-]?[0-9](?:_?[0-9])*)?)"
)


def _is_control(c):
    """Control characters TOML forbids in strings and comments (tab is allowed)."""
    o = ord(c)
    return (o < 0x20 and c != "\t") or o == 0x7F


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
        # spans of every inline table / array, by the offset of its '{' / '['
        self.inline = {}   # offset -> ([(key, kstart, vstart, vend)], offset of '}')
        self.arrays = {}   # offset -> ([(vstart, vend)], offset of ']')

    # -- low level -----------------------------------------------------
    def error(self, msg, pos=None):
        pos = self.i if pos is None else pos
        line = self.s.count("\n", 0, pos) + 1
        col = pos - (self.s.rfind("\n", 0, pos) + 1) + 1
        raise TomlError("%s (line %d, column %d)" % (msg, line, col))

    def peek(self, k=0):
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def at_newline(self):
        return self.peek() == "\n" or self.s.startswith("\r\n", self.i)

    def skip_ws(self):
        while self.i < self.n and self.s[self.i] in _WS:
            self.i += 1

    def skip_comment(self):
        if self.peek() != "#":
            return
        self.i += 1
        while self.i < self.n:
            c = self.s[self.i]
            if c == "\n" or (c == "\r" and self.s.startswith("\r\n", self.i)):
                return
            if _is_control(c):
                self.error("control character %r in comment" % c)
            self.i += 1

    def skip_newline(self):
        if self.peek() == "\n":
            self.i += 1
            return True
        if self.s.startswith("\r\n", self.i):
            self.i += 2
            return True
        return False

    def _skip_one_ws(self):
        if self.i < self.n and self.s[self.i] in _WS:
            self.i += 1
            return True
        return False

    def skip_ws_comments_newlines(self):
        while True:
            self.skip_ws()
            self.skip_comment()
            if not self.skip_newline():
                return

    def end_of_line(self):
        """Consume trailing whitespace, comment and newline; error on junk."""
        self.skip_ws()
        self.skip_comment()
        if self.i >= self.n or self.skip_newline():
            return
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
            self.error("invalid key" if c else "expected a key, found the end of the document")
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
            if c == "\\":
                out.append(self.escape())
                continue
            if c == "\n" or c == "\r":
                self.error("newline in single-line string")
            if _is_control(c):
                self.error("control character %r in string" % c)
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
            if c == "\n" or c == "\r":
                self.error("newline in single-line string")
            if _is_control(c):
                self.error("control character %r in string" % c)
            self.i += 1

    def ml_string(self, quote):
        """Multi-line basic or literal string; CRLF inside reads as LF (like tomllib)."""
        delim = quote * 3
        self.i += 3
        self.skip_newline()     # a newline right after the opening delimiter is trimmed
        out = []
        while True:
            if self.i >= self.n:
                self.error("unterminated multi-line string")
            if self.s.startswith(delim, self.i):
                # up to two extra quotes may end the string
                extra = 0
                while extra < 2 and self.s.startswith(quote, self.i + 3 + extra):
                    extra += 1
                out.append(quote * extra)
                self.i += 3 + extra
                return "".join(out)
            c = self.s[self.i]
            if self.skip_newline():
                out.append("\n")
                continue
            if quote == '"' and c == "\\":
                # line-ending backslash: trims whitespace and newlines up to the next text
                j = self.i + 1
                while j < self.n and self.s[j] in _WS:
                    j += 1
                if j < self.n and (self.s[j] == "\n" or self.s.startswith("\r\n", j)):
                    self.i = j
                    while self.skip_newline() or self._skip_one_ws():
                        pass
                    continue
                out.append(self.escape())
                continue
            if _is_control(c):
                self.error("control character %r in string" % c)
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
        if _DATE.match(self.s, self.i):
            return self.date_or_datetime()
        if _TIME.match(self.s, self.i):
            return self.local_time()
        m = _NUMBER.match(self.s, self.i)
        if m:
            return self.number(m)
        self.error("invalid value" if c else "expected a value, found the end of the document")

    def _time_parts(self, m):
        hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if hour > 23 or minute > 59 or second > 59:
            self.error("invalid time", m.start())
        frac = m.group(4)
        micro = int(frac[:6].ljust(6, "0")) if frac else 0
        return hour, minute, second, micro

    def local_time(self):
        m = _TIME.match(self.s, self.i)
        self.i = m.end()
        return datetime.time(*self._time_parts(m))

    def date_or_datetime(self):
        m = _DATE.match(self.s, self.i)
        try:
            date = datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            self.error("invalid date", m.start())
        self.i = m.end()
        sep = self.peek()
        # 'T' (or 't') must be followed by a time; a space only joins a date and
        # a time when a time follows (else it is just whitespace after a date)
        t = _TIME.match(self.s, self.i + 1) if sep in ("T", "t", " ") else None
        if t is None:
            if sep in ("T", "t"):
                self.error("invalid date-time: a time must follow %r" % sep)
            return date
        parts = self._time_parts(t)
        self.i = t.end()
        tz = None
        o = _OFFSET.match(self.s, self.i)
        if o:
            if o.group(1):
                hours, minutes = int(o.group(2)), int(o.group(3))
                if hours > 23 or minutes > 59:
                    self.error("invalid time offset", o.start())
                delta = datetime.timedelta(hours=hours, minutes=minutes)
                tz = datetime.timezone(-delta if o.group(1) == "-" else delta)
            else:
                tz = datetime.timezone.utc
            self.i = o.end()
        return datetime.datetime(date.year, date.month, date.day, *parts, tzinfo=tz)

    def number(self, m):
        self.i = m.end()
        text = m.group(0).replace("_", "")
        for kind, base in (("hex", 16), ("oct", 8), ("bin", 2)):
            if m.group(kind):
                return int(text[2:], base)
        if m.group("special"):
            body = text.lstrip("+-")
            if body == "nan":
                return float("nan")
            return float("-inf") if text.startswith("-") else float("inf")
        if m.group("frac") or m.group("exp"):
            return float(text)
        return int(text)

    def array(self):
        start = self.i
        self.i += 1
        out = []
        spans = []
        while True:
            self.skip_ws_comments_newlines()
            if self.peek() == "]":
                break
            vstart = self.i
            out.append(self.value())
            spans.append((vstart, self.i))
            self.skip_ws_comments_newlines()
            c = self.peek()
            if c == ",":
                self.i += 1
            elif c == "]":
                break
            else:
                self.error("expected ',' or ']' in array" if c else "unterminated array")
        self.arrays[start] = (spans, self.i)
        self.i += 1
        return out

    def inline_table(self):
        start = self.i
        self.i += 1
        out = {}
        entries = []
        frozen = set()          # keys whose value is an inline table or array
        self.skip_ws()
        if self.peek() == "}":
            self.inline[start] = (entries, self.i)
            self.i += 1
            return out
        while True:
            self.skip_ws()
            kstart = self.i
            key = self.key()
            self.skip_ws()
            if self.peek() != "=":
                self.error("expected '=' in inline table")
            self.i += 1
            self.skip_ws()
            vstart = self.i
            value = self.value()
            if any(key[:k] in frozen for k in range(1, len(key))):
                self.error("key %s extends an inline value that is already complete" % format_key(key), kstart)
            node = out
            for part in key[:-1]:
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    self.error("key %s is not a table" % format_key(key), kstart)
            if key[-1] in node:
                self.error("key %s defined twice" % format_key(key), kstart)
            node[key[-1]] = value
            if isinstance(value, (dict, list)):
                frozen.add(key)
            entries.append((key, kstart, vstart, self.i))
            self.skip_ws()
            c = self.peek()
            if c == ",":
                self.i += 1
            elif c == "}":
                self.inline[start] = (entries, self.i)
                self.i += 1
                return out
            else:
                self.error("expected ',' or '}' in inline table" if c else "unterminated inline table")


def _decode(text):
    if isinstance(text, (bytes, bytearray)):
        try:
            return bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise TomlError("not valid UTF-8: %s" % e)
    if not isinstance(text, str):
        raise TypeError("TOML text must be str or bytes, not %s" % type(text).__name__)
    return text


class _State(object):
    """What TOML allows to be defined where (the rules of TOML 1.0 section tables)."""

    def __init__(self, parser):
        self.p = parser
        self.data = {}
        self.explicit = set()   # tables declared by a header, or (finalised) parents of dotted keys
        self.pending = set()    # parents of dotted keys in the current section
        self.frozen = set()     # inline tables and static arrays: complete when written

    def is_frozen(self, path):
        return any(path[:k] in self.frozen for k in range(1, len(path) + 1))

    def nest(self, path, start):
        """The table at ``path`` (created where missing; the last element of an
        array of tables stands for the array); also whether it went through one."""
        node, in_aot = self.data, False
        for k, part in enumerate(path):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            elif isinstance(nxt, list):
                in_aot = True
                nxt = nxt[-1] if nxt else None
            if not isinstance(nxt, dict):
                self.p.error("key %s is not a table" % format_key(path[:k + 1]), start)
            node = nxt
        return node, in_aot

    def header(self, path, is_aot, start):
        self.explicit |= self.pending
        self.pending = set()
        if self.is_frozen(path):
            self.p.error("%s is an inline table or array and cannot be extended" % format_key(path), start)
        if is_aot:
            # a new element: what was declared inside the previous one is forgotten
            n = len(path)
            self.explicit = set(x for x in self.explicit if x[:n] != path)
            self.frozen = set(x for x in self.frozen if x[:n] != path)
            self.explicit.add(path)
            parent, in_aot = self.nest(path[:-1], start)
            arr = parent.setdefault(path[-1], [])
            if not isinstance(arr, list):
                self.p.error("%s is already defined as a table, not an array of tables" % format_key(path), start)
            arr.append({})
            return arr[-1], True
        if path in self.explicit:
            self.p.error("table %s defined twice" % format_key(path), start)
        self.explicit.add(path)
        parent, in_aot = self.nest(path[:-1], start)
        node = parent.setdefault(path[-1], {})
        if isinstance(node, list):
            self.p.error("%s is an array of tables; use [[%s]]" % (format_key(path), format_key(path)), start)
        if not isinstance(node, dict):
            self.p.error("key %s is not a table" % format_key(path), start)
        return node, in_aot

    def key_value(self, table, key, value, start):
        for k in range(1, len(key)):
            parent = table + key[:k]
            if parent in self.explicit:
                self.p.error("dotted key %s redefines table %s" % (format_key(table + key), format_key(parent)), start)
            self.pending.add(parent)
        full = table + key
        if self.is_frozen(full[:-1]):
            self.p.error("key %s extends an inline table or array" % format_key(full), start)
        node, _in_aot = self.nest(full[:-1], start)
        if key[-1] in node:
            self.p.error("key %s defined twice" % format_key(full), start)
        node[key[-1]] = value
        if isinstance(value, (dict, list)):
            self.frozen.add(full)


def _parse(text):
    """Parse ``text`` into (data, statements, parser)."""
    text = _decode(text)
    p = _Parser(text)
    st = _State(p)
    stmts = []
    table = ()
    aot_ctx = False
    if text.startswith("\ufeff"):       # a UTF-8 byte order mark is kept, not read
        p.i = 1
    while p.i < p.n:
        start = 0 if not stmts else p.i
        p.skip_ws()
        c = p.peek()
        if c in ("", "#") or p.at_newline():
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
            _node, in_aot = st.header(path, is_aot, start)
            table = path
            aot_ctx = in_aot or is_aot
            stmts.append(_Stmt("table", start, p.i, path, aot=aot_ctx))
            continue
        # key = value
        kstart = p.i
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
        st.key_value(table, key, value, kstart)
        stmts.append(_Stmt("kv", start, p.i, table, key, value, vstart, vend, aot=aot_ctx))
    return st.data, stmts, p


def loads(text):
    """Parse TOML text (``str``, or UTF-8 ``bytes``) into plain Python data, like ``tomllib.loads``."""
    return _parse(text)[0]


# -- writing -----------------------------------------------------------

def format_key(path):
    if not isinstance(path, (tuple, list)):
        path = (path,)
    for p in path:
        if not isinstance(p, str):
            raise TomlEditError("TOML keys are strings, not %s (%r)" % (type(p).__name__, p))
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


def _get(data, path, default=None):
    node = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _key_path(path):
    path = tuple(path) if isinstance(path, (tuple, list)) else (path,)
    format_key(path)    # refuses keys that are not strings
    return path


def _runs(indexes):
    """Maximal runs of consecutive integers: [1, 2, 4] -> [(1, 2), (4, 4)]."""
    out = []
    for i in sorted(indexes):
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


class Document(object):
    """A TOML document that can be edited in place, keeping everything else.

    ``doc.data`` is the parsed content; ``doc.text`` the current text.  Every
    edit either succeeds or leaves ``text`` and ``data`` as they were.
    """

    def __init__(self, text=""):
        self.text = _decode(text or "")
        self._reparse()

    def _reparse(self):
        self.data, self._stmts, p = _parse(self.text)
        self._inline = p.inline
        self._arrays = p.arrays

    # -- reading ---------------------------------------------------------
    def get(self, path, default=None):
        return _get(self.data, path, default)

    def has_table_header(self, path):
        return any(s.kind == "table" and s.table == tuple(path) for s in self._stmts)

    # -- editing -----------------------------------------------------------
    def set(self, path, value):
        """Set ``path`` (tuple of keys) to ``value``; return True when changed.

        A dict value is merged leaf by leaf (keys not named are kept); use
        :meth:`delete` first to replace a whole table.
        """
        path = _key_path(path)
        if not path:
            raise TomlEditError("empty key path")
        return self._atomic(self._set, path, value)

    def delete(self, path):
        """Remove a key or a whole table (with its sub-tables); True if changed."""
        return self._atomic(self._delete, _key_path(path))

    def _atomic(self, fn, *args):
        text = self.text
        try:
            return fn(*args)
        except BaseException:
            if self.text != text:
                self.text = text
                self._reparse()
            raise

    def _set(self, path, value):
        if isinstance(value, dict):
            if not value:
                return self._ensure_table(path)
            if self.get(path, _MISSING) is _MISSING:
                # a whole new table: one splice instead of one per leaf
                self._check_not_aot(path)
                holder = self._holder(path)
                if holder is not None:
                    return self._set_in_value(holder, path, value)
                owner, rel = self._owner(path[:-1])
                if owner is None or not rel:
                    self._insert_new_table(path, None, block=self._block_lines(path, value))
                    self._verify(path, value)
                    return True
            changed = False
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

    def _verify(self, path, value):
        """An edit must have produced exactly what was asked (else it is undone)."""
        have = self.get(path, _MISSING)
        if value is _MISSING:
            ok = have is _MISSING
        elif isinstance(value, dict) and isinstance(have, dict):
            ok = all(_same(_get(have, rel, _MISSING), leaf) or (isinstance(leaf, dict) and isinstance(_get(have, rel), dict))
                     for rel, leaf in _flatten(value))
        else:
            ok = _same(have, value)
        if not ok:
            raise TomlEditError("internal error: editing %s did not give the expected value; nothing was changed" % format_key(path))

    def _set_leaf(self, path, value):
        if isinstance(value, dict):
            return self._ensure_table(path)
        self._check_not_aot(path)
        current = self.get(path, _MISSING)
        if current is not _MISSING and _same(current, value):
            return False
        if isinstance(current, dict):
            raise TomlEditError("%s is a table; cannot replace it with a value" % format_key(path))
        # 1. a key/value statement defines exactly this key -> replace its value
        for s in self._stmts:
            if s.kind == "kv" and s.table + s.key == path:
                self._replace_value(s.vstart, s.vend, current, value, path)
                self._verify(path, value)
                return True
        # 2. the key lives inside a value (an inline table) -> edit inside it
        holder = self._holder(path)
        if holder is not None:
            return self._set_in_value(holder, path, value)
        # 3. insert a new key
        parent, leaf = path[:-1], path[-1]
        owner, rel = self._owner(parent)
        if owner is not None:
            line = "%s = %s" % (format_key(rel + (leaf,)), dumps_value(value))
            self._insert_in_table(owner, line)
        else:
            self._insert_new_table(parent, ["%s = %s" % (format_key(leaf), dumps_value(value))])
        self._verify(path, value)
        return True

    def _ensure_table(self, path):
        self._check_not_aot(path)
        node = self.get(path, _MISSING)
        if node is not _MISSING:
            if not isinstance(node, dict):
                raise TomlEditError("%s is not a table" % format_key(path))
            return False
        holder = self._holder(path)
        if holder is not None:
            return self._set_in_value(holder, path, {})
        owner, rel = self._owner(path[:-1])
        if owner is not None and rel:
            self._insert_in_table(owner, "%s = {}" % format_key(rel + (path[-1],)))
        else:
            self._insert_new_table(path, [])
        self._verify(path, {})
        return True

    # -- inside values (inline tables, arrays) ----------------------------
    def _holder(self, path):
        """The key/value statement whose value contains ``path`` (strictly inside), or None."""
        for s in self._stmts:
            if s.kind == "kv":
                full = s.table + s.key
                if len(full) < len(path) and path[:len(full)] == full:
                    return s
        return None

    def _set_in_value(self, holder, path, value):
        full = holder.table + holder.key
        if self.text[holder.vstart] != "{":
            raise TomlEditError("%s is not a table" % format_key(full))
        changed = self._inline_set(holder.vstart, path[len(full):], value, full)
        if changed:
            self._verify(path, value)
        return changed

    def _inline_set(self, brace, rel, value, where):
        """Set ``rel`` inside the inline table at offset ``brace``, editing only
        the one entry concerned (or adding one before the closing brace)."""
        entries, close = self._inline[brace]
        for key, _kstart, vstart, vend in entries:
            if key == rel:
                current = _get(self.data, where + key, _MISSING)
                if isinstance(value, dict):
                    if not isinstance(current, dict):
                        raise TomlEditError("%s is not a table" % format_key(where + key))
                    changed = False
                    for sub, leaf in _flatten(value):
                        if sub:
                            changed = self._set_leaf(where + key + sub, leaf) or changed
                    return changed
                if isinstance(current, dict):
                    raise TomlEditError("%s is a table; cannot replace it with a value" % format_key(where + key))
                if _same(current, value):
                    return False
                self._replace_value(vstart, vend, current, value, where + key)
                return True
            if rel[:len(key)] == key:
                if self.text[vstart] != "{":
                    raise TomlEditError("%s is not a table" % format_key(where + key))
                return self._inline_set(vstart, rel[len(key):], value, where + key)
        # a new entry: the shortest key that no entry uses yet, the rest nested
        k = 1
        while k <= len(rel) and any(e[0][:k] == rel[:k] for e in entries):
            k += 1
        if k > len(rel):
            if isinstance(value, dict):
                changed = False
                for sub, leaf in _flatten(value):
                    if sub:
                        changed = self._set_leaf(where + rel + sub, leaf) or changed
                return changed
            raise TomlEditError("%s is a table; cannot replace it with a value" % format_key(where + rel))
        nested = value
        for part in reversed(rel[k:]):
            nested = {part: nested}
        entry = "%s = %s" % (format_key(rel[:k]), dumps_value(nested))
        if not entries:
            self._splice(brace, close + 1, "{ %s }" % entry)
        else:
            end = entries[-1][3]
            self._splice(end, end, ", " + entry)
        return True

    def _inline_delete(self, brace, rel, where):
        entries, close = self._inline[brace]
        for key, _kstart, vstart, _vend in entries:
            if len(rel) > len(key) and rel[:len(key)] == key:
                if self.text[vstart] != "{":
                    raise TomlEditError("%s is not a table" % format_key(where + key))
                return self._inline_delete(vstart, rel[len(key):], where + key)
        hits = [i for i, e in enumerate(entries) if e[0][:len(rel)] == rel]
        if not hits:
            return False
        if len(hits) == len(entries):
            self._splice(brace, close + 1, "{}")
            return True
        # runs of removed entries: followed by a kept entry -> up to it,
        # else (at the end) from the end of the entry before the run
        new = self.text
        for i, j in reversed(_runs(hits)):
            if j + 1 < len(entries):
                a, b = entries[i][1], entries[j + 1][1]
            else:
                a, b = entries[i - 1][3], entries[j][3]
            new = new[:a] + new[b:]
        self._splice(0, len(self.text), new)
        return True

    def _replace_value(self, vstart, vend, current, value, path):
        """Replace the value at [vstart, vend); arrays that only grow or shrink keep their layout."""
        if isinstance(current, list) and isinstance(value, (list, tuple)) and self.text[vstart] == "[":
            candidate = self._array_edit(vstart, current, list(value))
            if candidate is not None:
                try:
                    ok = _same(_get(_parse(candidate)[0], path, _MISSING), value)
                except TomlError:
                    ok = False
                if ok:
                    self._splice(0, len(self.text), candidate)
                    return
        self._splice(vstart, vend, dumps_value(value))

    def _array_edit(self, bracket, old, new):
        """Text with the array at ``bracket`` grown (old is a prefix of new) or
        shrunk (new is old less some elements), keeping the other elements,
        comments and layout; None when the change is neither."""
        spans, close = self._arrays[bracket]
        text = self.text
        if not spans:
            inner = text[bracket + 1:close]
            if inner.strip(" \t"):
                return None
            return text[:bracket] + dumps_value(new) + text[close + 1:]
        if len(new) > len(old) and all(_same(a, b) for a, b in zip(old, new)):
            return self._array_append(spans, close, new[len(old):])
        keep, j = [], 0
        for i, item in enumerate(old):
            if j < len(new) and _same(item, new[j]):
                keep.append(i)
                j += 1
        if j != len(new) or not keep:
            return None
        removed = [i for i in range(len(old)) if i not in keep]
        out = text
        for i, j in reversed(_runs(removed)):
            lines = self._own_lines(spans, i, j, close)
            if lines is not None:
                a, b = lines
            elif j + 1 < len(spans):
                a, b = spans[i][0], spans[j + 1][0]
            else:
                a, b = spans[i - 1][1], spans[j][1]
            out = out[:a] + out[b:]
        return out

    def _after_item(self, pos, close):
        """From the end of an array element: past its comma (if any), spaces and a
        comment.  Returns (position, had_comma, position after the line's newline or None)."""
        text = self.text
        k = pos
        while k < close and text[k] in _WS:
            k += 1
        comma = k < close and text[k] == ","
        if comma:
            k += 1
        while k < close and text[k] in _WS:
            k += 1
        if text[k] == "#":
            k = text.find("\n", k)
            k = close if k < 0 else (k - 1 if text[k - 1] == "\r" else k)
        if text.startswith("\r\n", k):
            return k, comma, k + 2
        if text.startswith("\n", k):
            return k, comma, k + 1
        return k, comma, None

    def _line_start(self, pos):
        start = self.text.rfind("\n", 0, pos) + 1
        return start if not self.text[start:pos].strip(" \t") else None

    def _own_lines(self, spans, i, j, close):
        """[start, end) of the lines holding elements i..j when each sits on its own line(s)."""
        a = self._line_start(spans[i][0])
        if a is None:
            return None
        for k in range(i, j + 1):
            if self._line_start(spans[k][0]) is None or self._after_item(spans[k][1], close)[2] is None:
                return None
        return a, self._after_item(spans[j][1], close)[2]

    def _array_append(self, spans, close, items):
        text = self.text
        last_start, last_end = spans[-1]
        _pos, comma, eol = self._after_item(last_end, close)
        indent_start = self._line_start(last_start)
        if eol is None or indent_start is None:
            # single-line array (or elements sharing lines): append inline
            return text[:last_end] + "".join(", " + dumps_value(v) for v in items) + text[last_end:]
        nl = self._newline()
        indent = text[indent_start:last_start]
        lines = [indent + dumps_value(v) + "," for v in items]
        if not comma:
            lines[-1] = lines[-1][:-1]
            return text[:last_end] + "," + text[last_end:eol] + "".join(ln + nl for ln in lines) + text[eol:]
        return text[:eol] + "".join(ln + nl for ln in lines) + text[eol:]

    # -- where new keys and tables go ---------------------------------------
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
                self._insert_lines(anchor.end, [self._indent(anchor) + line])
            else:
                self._insert_lines(self._root_insert_pos(), [line])
            return
        anchor = kvs[-1] if kvs else [s for s in body if s.kind == "table"][0]
        indent = self._indent(kvs[-1]) if kvs else self._indent(anchor)
        self._insert_lines(anchor.end, [indent + line])

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
        while j > 0 and self._is_comment(self._stmts[j - 1]):
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
            block = ["%s[%s]" % (hindent, format_key(path))] + [kindent + ln for ln in lines]
        if best_end is None:
            pos = len(self.text)
            self._insert_lines(pos, ([""] if self.text.strip() else []) + block)
        else:
            self._insert_lines(best_end, [""] + block)

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

    def _delete(self, path):
        if self.get(path, _MISSING) is _MISSING:
            return False
        self._check_not_aot(path)
        # key/value statement
        for s in self._stmts:
            if s.kind == "kv" and s.table + s.key == path:
                self._splice(s.start, s.end, "")
                self._verify(path, _MISSING)
                return True
        holder = self._holder(path)
        if holder is not None:
            full = holder.table + holder.key
            if self.text[holder.vstart] != "{":
                raise TomlEditError("%s is not a table" % format_key(full))
            self._inline_delete(holder.vstart, path[len(full):], full)
            self._verify(path, _MISSING)
            return True
        # tables: remove every header region at or below path, and dotted keys
        spans = []
        stmts = self._stmts
        for idx, s in enumerate(stmts):
            if s.kind == "table" and s.table[:len(path)] == path:
                last = idx
                for k in range(idx + 1, len(stmts)):
                    if stmts[k].kind == "table":
                        break
                    last = k
                # keep the comment block that introduces the next table
                while last > idx and self._is_comment(stmts[last]):
                    last -= 1
                spans.append((s.start, stmts[last].end))
            elif s.kind == "kv" and (s.table + s.key)[:len(path)] == path and s.table[:len(path)] != path:
                spans.append((s.start, s.end))
        new = self.text
        for a, b in sorted(spans, reverse=True):
            new = new[:a] + new[b:]
        self._splice(0, len(self.text), new)
        self._verify(path, _MISSING)
        return True

    # -- helpers ---------------------------------------------------------
    def _is_comment(self, stmt):
        return stmt.kind == "trivia" and self.text[stmt.start:stmt.end].strip(" \t\r\n\ufeff").startswith("#")

    def _indent(self, stmt):
        line = self.text[stmt.start:stmt.end].lstrip("\ufeff")
        return line[:len(line) - len(line.lstrip(" \t"))]

    def _newline(self):
        """The document's line ending: that of its first line (LF for a one-line document)."""
        i = self.text.find("\n")
        return "\r\n" if i > 0 and self.text[i - 1] == "\r" else "\n"

    def _insert_lines(self, pos, lines):
        """Insert whole lines at ``pos`` (a line start, or the end of a last line
        without a newline -- which then gets one first), in the file's line ending."""
        nl = self._newline()
        lead = nl if pos > 0 and self.text[pos - 1] != "\n" else ""
        self._splice(pos, pos, lead + "".join(ln + nl for ln in lines))

    def _splice(self, a, b, new):
        old = self.text
        self.text = old[:a] + new + old[b:]
        try:
            self._reparse()
        except TomlError as e:
            self.text = old
            self._reparse()
            raise TomlEditError("the edit would make the document invalid (%s); nothing was changed" % e)


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
