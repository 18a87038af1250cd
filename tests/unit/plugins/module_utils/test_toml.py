# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""The comment-preserving TOML editor: reads like tomllib, edits surgically."""
from __future__ import annotations

import glob
import os
import tomllib

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils._toml import (
    Document,
    TomlEditError,
    TomlError,
    dumps_tables,
    dumps_value,
    loads,
)

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "runtime")
TOML_FIXTURES = sorted(glob.glob(os.path.join(FIX, "*", "*.toml")))

EDGE = r'''
# comment
"quoted key" = 'literal \n'
bare-key_1 = """
multi "line"
basic \
   continued"""
lit = \'\'\'
raw \n\'\'\'
ints = [0x1F, 0o17, 0b101, 1_000, -5, +3]
floats = [1.5, -2e3, 6.02e+23, inf, -inf]
dt = 1979-05-27T07:32:00Z
ld = 1979-05-27
lt = 07:32:00.5
arr = [
  1, # one
  2,
]
inline = { a = 1, b.c = "x" }
a.b.c = 1
a.b.d = 2
[t]
x = 1
[[aot]]
n = 1
[[aot]]
n = 2
[aot.sub]
y = true
'''


@pytest.mark.parametrize("path", TOML_FIXTURES, ids=os.path.basename)
def test_reads_like_tomllib(path):
    text = open(path).read()
    assert loads(text) == tomllib.loads(text)


def test_edge_cases_read_like_tomllib():
    text = EDGE.replace("\\'", "'")
    mine, ref = loads(text), tomllib.loads(text)
    nan_free = {k: v for k, v in ref.items() if k != "floats"}
    assert {k: v for k, v in mine.items() if k != "floats"} == nan_free
    assert mine["floats"] == ref["floats"]


@pytest.mark.parametrize("bad", [
    "a = 1\na = 2\n",           # duplicate key
    "[t]\n[t]\n",               # duplicate table
    "a = \"unterminated\n",
    "a = [1, 2\n",
    "a = 01\n",                 # leading zero
    "a.b = 1\n[a.b]\n",         # table defined by dotted key, then header
    "a = { b = 1 }\n[a]\n",     # inline table extended
    "= 1\n",
    "a = 1 b = 2\n",
])
def test_invalid_documents_are_rejected(bad):
    with pytest.raises(TomlError):
        loads(bad)
    with pytest.raises(tomllib.TOMLDecodeError):
        tomllib.loads(bad)


def _assert_only_added(before, after):
    """Every original line is kept in order (only additions)."""
    it = iter(after.splitlines())
    for line in before.splitlines():
        assert any(line == cand for cand in it), line


@pytest.mark.parametrize("path", TOML_FIXTURES, ids=os.path.basename)
def test_new_table_keeps_everything(path):
    text = open(path).read()
    doc = Document(text)
    assert doc.set(("zz", "new table", "k"), "v") is True
    assert tomllib.loads(doc.text) == doc.data
    assert doc.data["zz"]["new table"]["k"] == "v"
    _assert_only_added(text, doc.text)
    assert doc.set(("zz", "new table", "k"), "v") is False


def test_value_replacement_keeps_comment_and_indent():
    doc = Document("[a]\n    x = 1   # why\n    y = 2\n")
    assert doc.set(("a", "x"), 5)
    assert doc.text == "[a]\n    x = 5   # why\n    y = 2\n"


def test_new_key_goes_into_existing_table_with_its_indent():
    doc = Document("[a]\n  x = 1\n\n[b]\n  y = 2\n")
    doc.set(("a", "z"), True)
    assert doc.text == "[a]\n  x = 1\n  z = true\n\n[b]\n  y = 2\n"


def test_dotted_key_owner_is_extended_with_dotted_key():
    doc = Document("[p]\nr.runc.type = \"x\"\n")
    doc.set(("p", "r", "nvidia", "type"), "y")
    assert tomllib.loads(doc.text) == {"p": {"r": {"runc": {"type": "x"}, "nvidia": {"type": "y"}}}}
    assert "r.nvidia.type" in doc.text


def test_inline_table_is_rewritten_in_place():
    doc = Document("o = { SystemdCgroup = true }\n")
    doc.set(("o", "BinaryName"), "/x")
    assert tomllib.loads(doc.text) == {"o": {"SystemdCgroup": True, "BinaryName": "/x"}}


def test_root_key_goes_above_first_table_and_its_comment():
    doc = Document("# header\n\n# about t\n[t]\nx = 1\n")
    doc.set(("version",), 2)
    assert doc.text.index("version = 2") < doc.text.index("# about t")
    assert tomllib.loads(doc.text) == {"version": 2, "t": {"x": 1}}


def test_new_table_is_grouped_with_its_siblings_and_indented_like_them():
    text = "[p.r.runc]\n  t = 1\n  [p.r.runc.o]\n    s = true\n\n# next\n[q]\nz = 1\n"
    doc = Document(text)
    doc.set(("p", "r", "nvidia", "t"), 1)
    assert doc.text.index("[p.r.nvidia]") < doc.text.index("# next")
    assert "\n[p.r.nvidia]\n  t = 1\n" in doc.text


def test_array_of_tables_is_refused():
    doc = Document("[[x]]\na = 1\n")
    with pytest.raises(TomlEditError):
        doc.set(("x", "a"), 2)


def test_value_over_table_is_refused():
    doc = Document("[a.b]\nc = 1\n")
    with pytest.raises(TomlEditError):
        doc.set(("a", "b"), 1)
    with pytest.raises(TomlEditError):
        doc.set(("a", "b", "c", "d"), 1)


def test_delete_table_with_subtables_and_key():
    text = "[a]\nx = 1\n[a.b]\ny = 2\n# about c\n[c]\nz = 3\n"
    doc = Document(text)
    assert doc.delete(("a",))
    assert doc.text == "# about c\n[c]\nz = 3\n"
    assert doc.delete(("c", "z"))
    assert not doc.delete(("nope",))


def test_empty_document_and_missing_newline():
    doc = Document("")
    doc.set(("version",), 2)
    doc.set(("plugins", "cri", "x"), [1, "a"])
    assert tomllib.loads(doc.text) == {"version": 2, "plugins": {"cri": {"x": [1, "a"]}}}
    doc = Document("a = 1")
    doc.set(("b",), 2)
    assert tomllib.loads(doc.text) == {"a": 1, "b": 2}


@pytest.mark.parametrize("value", ["plain", "quo\"te", "back\\slash", "tab\t", "uni\u00e9", "ctl\x01\x7f", 0, -3, 1.5, True,
                                   [], [1, [2, "x"]], {}, {"a b": {"c": False}}])
def test_dumps_value_round_trips(value):
    assert tomllib.loads("v = " + dumps_value(value) + "\n")["v"] == value


def test_dumps_tables_round_trips():
    data = {"version": 2, "plugins": {"io.containerd.grpc.v1.cri": {"a": 1, "containerd": {"runtimes": {"runc": {"options": {}}}}}}}
    assert tomllib.loads(dumps_tables(data)) == data
