# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""The TOML editor's defects from issue 15 (item 9), each pinned by a test:

a) a key added to the root table must not land inside a trailing comment of a
   file that ends without a newline;
b) an inline ``runtimes = {...}`` table is edited in place (no crash, nothing
   else in it rewritten); what cannot be edited is refused with TomlEditError
   and leaves the document as it was;
c) multi-line arrays (and their comments) stay byte-identical when a
   neighbour is edited; growing or shrinking an array keeps its layout;
d) CRLF files stay CRLF: inserted text uses the file's line ending;
e) invalid TOML is rejected (regressions from the toml-test suite, kept here
   so they run even where the suite cannot be fetched).
"""
from __future__ import annotations

import tomllib

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils._toml import (
    Document,
    TomlEditError,
    TomlError,
    loads,
)

CRI = "io.containerd.grpc.v1.cri"
RUNTIMES = ("plugins", CRI, "containerd", "runtimes")


def _reparses(doc):
    assert tomllib.loads(doc.text) == doc.data
    return doc.data


# -- a) files without a final newline -----------------------------------------

@pytest.mark.parametrize("text", [
    "# only a comment",
    "# header\n\n# last comment",
    "a = 1 # trailing comment",
    "a = 1\n# trailing comment",
    "\n\n   # indented comment, no newline",
])
def test_root_key_never_lands_in_a_trailing_comment(text):
    doc = Document(text)
    assert doc.set(("version",), 2)
    assert _reparses(doc)["version"] == 2
    lines = doc.text.splitlines()
    assert [ln for ln in lines if ln != "version = 2"] == text.splitlines()  # every line kept whole
    assert lines.count("version = 2") == 1


@pytest.mark.parametrize("text", ["[t]\n# end", "[t]\nx = 1 # end", "# c\n[t]\nx = 1"])
def test_keys_and_tables_after_an_unterminated_last_line(text):
    doc = Document(text)
    doc.set(("t", "y"), 2)
    doc.set(("u", "z"), 3)
    doc.set(("version",), 2)
    assert _reparses(doc) == dict(loads(text + "\n"), version=2, t=dict(loads(text + "\n")["t"], y=2), u={"z": 3})


# -- b) inline tables that hold the tables we edit ------------------------------

INLINE = (
    "version = 2\n"
    "[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n"
    "  default_runtime_name = 'runc' # site default\n"
    "  runtimes = { runc = { runtime_type = 'io.containerd.runc.v2', options = { SystemdCgroup = true, Root = 0x1F } } }\n"
    "  snapshotter = \"overlayfs\"\n"
)
RUNC_TEXT = "runc = { runtime_type = 'io.containerd.runc.v2', options = { SystemdCgroup = true, Root = 0x1F } }"


def test_new_runtime_goes_into_the_inline_runtimes_table():
    doc = Document(INLINE)
    nvidia = {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"}}
    assert doc.set(RUNTIMES + ("nvidia",), nvidia) is True
    data = _reparses(doc)
    assert data["plugins"][CRI]["containerd"]["runtimes"]["nvidia"] == nvidia
    assert RUNC_TEXT in doc.text            # the other runtime: same bytes (literal string, hex)
    assert "[plugins" in doc.text and doc.text.count("[") == INLINE.count("[")  # no header added
    assert doc.set(RUNTIMES + ("nvidia",), nvidia) is False


def test_keys_inside_inline_tables_are_set_and_deleted_in_place():
    doc = Document(INLINE)
    assert doc.set(RUNTIMES + ("runc", "options", "BinaryName"), "/x")
    assert "Root = 0x1F, BinaryName = \"/x\" }" in doc.text
    assert doc.set(RUNTIMES + ("runc", "options", "SystemdCgroup"), False)
    assert "SystemdCgroup = false, Root = 0x1F" in doc.text
    assert doc.delete(RUNTIMES + ("runc", "options", "SystemdCgroup"))
    assert "options = { Root = 0x1F, BinaryName = \"/x\" }" in doc.text
    assert doc.delete(RUNTIMES + ("runc", "options", "BinaryName"))
    assert "options = { Root = 0x1F }" in doc.text
    assert doc.delete(RUNTIMES + ("runc",))
    assert "runtimes = {}" in doc.text
    assert doc.set(RUNTIMES + ("nvidia", "runtime_type"), "x")
    assert "runtimes = { nvidia = { runtime_type = \"x\" } }" in doc.text
    _reparses(doc)
    assert doc.text.endswith("  snapshotter = \"overlayfs\"\n")
    assert "default_runtime_name = 'runc' # site default\n" in doc.text


def test_empty_tables_and_dotted_keys_inside_inline_tables():
    doc = Document("runtimes = {}\nr = { a.b = 1 }\n")
    assert doc.set(("runtimes", "nvidia"), {"a": {"b": 1}})
    assert doc.set(("r", "a", "c"), 2)
    assert doc.set(("r", "x"), {})
    assert doc.text == "runtimes = { nvidia = { a = { b = 1 } } }\nr = { a.b = 1, a.c = 2, x = {} }\n"
    assert doc.delete(("r", "a"))
    assert doc.text.endswith("r = { x = {} }\n")


def test_containerd_config_with_inline_runtimes_is_configured():
    from ansible_collections.gpuops.nvidia.plugins.module_utils._container_runtime import configure_containerd

    p = dict(runtime="containerd", runtime_name="nvidia", runtime_path="/usr/bin/nvidia-container-runtime",
             set_as_default=True, enable_cdi=True, runtime_options={}, runtime_config={},
             config_path="/etc/containerd/config.toml")
    text, dropin, _info = configure_containerd(INLINE, p)
    assert dropin is None
    data = tomllib.loads(text)
    c = data["plugins"][CRI]["containerd"]
    assert c["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert c["runtimes"]["runc"]["options"] == {"SystemdCgroup": True, "Root": 31}
    assert c["default_runtime_name"] == "nvidia"
    assert RUNC_TEXT in text


@pytest.mark.parametrize("path,value", [
    (("runtimes", "runc", "x"), 1),        # runtimes is an array here
    (("t", "v", "w"), 1),                  # t.v is a string
    (("t",), 1),                           # a table cannot become a value
])
def test_what_cannot_be_edited_is_refused_and_nothing_changes(path, value):
    text = "runtimes = [ { name = 'runc' } ]\nt = { v = 'x', w = [\n  1, # one\n] }\n"
    doc = Document(text)
    with pytest.raises(TomlEditError):
        doc.set(path, value)
    assert doc.text == text and doc.data == tomllib.loads(text)


def test_a_failing_multi_key_edit_is_undone_whole():
    text = "[a]\nx = 1\nt = 5\n"
    doc = Document(text)
    with pytest.raises(TomlEditError):
        doc.set(("a",), {"new": 1, "t": {"y": 2}})
    assert doc.text == text and doc.data == {"a": {"x": 1, "t": 5}}


# -- c) multi-line arrays ----------------------------------------------------------

ML_ARRAY = "args = [\n    \"--a\", # first\n    \"--b\",\n  ]"


def test_multiline_array_in_inline_table_survives_neighbour_edits():
    text = "[r]\nopts = { BinaryName = \"/x\", " + ML_ARRAY + " }\n"
    doc = Document(text)
    assert doc.set(("r", "opts", "BinaryName"), "/y")
    assert ML_ARRAY in doc.text
    assert doc.set(("r", "opts", "SystemdCgroup"), True)
    assert ML_ARRAY in doc.text
    assert doc.delete(("r", "opts", "BinaryName"))
    assert doc.text == "[r]\nopts = { " + ML_ARRAY + ", SystemdCgroup = true }\n"
    _reparses(doc)


def test_multiline_array_survives_edits_of_its_table():
    text = "[r]\nx = 1\n" + ML_ARRAY + "\ny = 2\n"
    doc = Document(text)
    assert doc.set(("r",), {"x": 5, "args": ["--a", "--b"], "z": 3}) is True
    assert doc.text == "[r]\nx = 5\n" + ML_ARRAY + "\ny = 2\nz = 3\n"


def test_growing_and_shrinking_a_multiline_array_keeps_its_layout():
    text = "imports = [\n  \"/etc/containerd/conf.d/*.toml\", # site drop-ins\n  \"/opt/x.toml\",\n]\n"
    doc = Document(text)
    assert doc.set(("imports",), ["/etc/containerd/conf.d/*.toml", "/opt/x.toml", "/etc/nvidia.toml"])
    assert doc.text == ("imports = [\n  \"/etc/containerd/conf.d/*.toml\", # site drop-ins\n  \"/opt/x.toml\",\n"
                        "  \"/etc/nvidia.toml\",\n]\n")
    assert doc.set(("imports",), ["/etc/containerd/conf.d/*.toml", "/opt/x.toml"])
    assert doc.text == text
    assert doc.set(("imports",), ["/opt/x.toml"])
    assert doc.text == "imports = [\n  \"/opt/x.toml\",\n]\n"
    doc = Document("imports = [\"/a\", # c\n  \"/b\"\n]\n")
    assert doc.set(("imports",), ["/a", "/b", "/c"])
    assert _reparses(doc)["imports"] == ["/a", "/b", "/c"]
    assert "# c\n" in doc.text
    doc = Document("imports = [ \"/a\" ]  # why\n")
    assert doc.set(("imports",), ["/a", "/b"])
    assert doc.text == "imports = [ \"/a\", \"/b\" ]  # why\n"


# -- d) line endings ------------------------------------------------------------------

CRLF = ("# containerd\r\nversion = 2\r\n\r\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\r\n"
        "  runtimes = { runc = { runtime_type = \"io.containerd.runc.v2\" } }\r\n"
        "  list = [\r\n    1, # one\r\n    2,\r\n  ]\r\n[other]\r\nk = \"\"\"\r\nline\r\n\"\"\"\r\n")


def _bare_lf(text):
    return text.replace("\r\n", "").count("\n")


def test_crlf_file_stays_crlf_through_every_kind_of_edit():
    doc = Document(CRLF)
    doc.set(("root_key",), 1)                                   # root key
    doc.set(("plugins", CRI, "containerd", "snapshotter"), "x")  # key in a table
    doc.set(RUNTIMES + ("nvidia",), {"runtime_type": "y"})       # inside an inline table
    doc.set(("plugins", CRI, "registry", "config_path"), "/r")   # new table
    doc.set(("brand", "new"), {"a": 1, "b": {"c": 2}})          # new tables at the end
    doc.set(("plugins", CRI, "containerd", "list"), [1, 2, 3])  # a multi-line array grows
    doc.delete(("other",))
    assert _bare_lf(doc.text) == 0, doc.text
    _reparses(doc)
    assert doc.data["brand"] == {"new": {"a": 1, "b": {"c": 2}}}


def test_crlf_file_without_final_newline_and_lf_files_stay_as_they_are():
    doc = Document("a = 1\r\n# end")
    doc.set(("b",), 2)
    doc.set(("t", "x"), 1)
    assert _bare_lf(doc.text) == 0 and _reparses(doc) == {"a": 1, "b": 2, "t": {"x": 1}}
    doc = Document("a = 1\n")
    doc.set(("t", "x"), 1)
    assert "\r" not in doc.text


def test_crlf_inside_multiline_strings_reads_as_lf_like_tomllib():
    assert loads("k = \"\"\"\r\nline\r\n\"\"\"\r\n") == tomllib.loads("k = \"\"\"\r\nline\r\n\"\"\"\r\n") == {"k": "line\n"}


# -- e) invalid TOML is rejected (toml-test regressions) --------------------------------

@pytest.mark.parametrize("bad", [
    b"a = 0b_1\n", b"a = 0x_1\n", b"a = 03.14\n", b"a = -03.14\n", b"a = +03.14\n",
    b"d = 1997-09-0909:09:09\n", b"d = 1987-07-0517:45:00Z\n", b"d = 1985-06-18 17:04:07+12:60\n",
    b"d = 1985-06-18 17:04:07+24:00\n", b"d = 1985-02-30\n", b"d = 1985-06-18T\n", b"t = 24:00:00\n",
    b"[[tbl]]\n[tbl]\n", b"[tbl]\n[[tbl]]\n", b"a = []\n[[a]]\n",
    b"tab = { inner = { dog = \"best\" }, inner.cat = \"worst\" }\n",
    b"tbl = { fruit = { apple.color = \"red\" }, fruit.apple.texture = { smooth = true } }\n",
    b"s = 'null\r'\n", b"s = 'del\x7f'\n", b"s = '''del\x7f'''\n", b"s = \"\"\"us\x1f\"\"\"\n", b"s = \"\"\"cr\r\"\"\"\n",
    b"# comment with a lone CR \r here\n", b"a = \"\xc3\"\n", b"# \xed\xa0\x80\n", b"\xfe\xff\x00#\x00\n",
    b"a = 1\r", b"a = \"\\e\"\n", b"a = 1979-05-27 07:32\n",
])
def test_invalid_toml_is_rejected(bad):
    with pytest.raises(TomlError):
        loads(bad)
    with pytest.raises((tomllib.TOMLDecodeError, UnicodeDecodeError)):
        tomllib.loads(bad.decode("utf-8"))


@pytest.mark.parametrize("good", [
    "[[arr]]\n[arr.subtab]\nval=1\n[[arr]]\n[arr.subtab]\nval=2\n",
    "# comment ends in CRLF\r\nkey = \"\"\"\\\r\n  folded\"\"\"\r\n",
    "[[a]]\n[[a.b]]\n[a.b.c]\nd = 1\n[[a]]\n[[a.b]]\n[a.b.c]\nd = 2\n",
    "d = 1979-05-27 # a date, then a comment\nt = 1979-05-27 07:32:00.999999999Z\n",
    "\ufeffa = 1\n",
])
def test_valid_toml_reads_like_tomllib(good):
    assert loads(good) == tomllib.loads(good.lstrip("\ufeff"))
    assert loads(good.encode("utf-8")) == loads(good)


@pytest.mark.parametrize("path,value", [(("a", 1), "x"), (("a",), {2: "x"}), (("a",), None), (("a",), b"x"), (("a",), {1, 2})])
def test_values_toml_cannot_hold_are_refused_without_a_traceback(path, value):
    doc = Document("a = 'kept'\n" if path == ("a",) else "")
    before = doc.text
    with pytest.raises(TomlEditError):
        doc.set(path, value)
    assert doc.text == before
