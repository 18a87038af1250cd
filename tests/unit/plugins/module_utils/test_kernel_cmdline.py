"""Pure-logic tests for gpuops.nvidia kernel_cmdline."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _kernel_cmdline as k


def test_split_keeps_quoted_values():
    assert k.split_cmdline('BOOT_IMAGE=/vmlinuz root=UUID=x ro dyndbg="file a.c +p"  quiet\n') == [
        "BOOT_IMAGE=/vmlinuz", "root=UUID=x", "ro", 'dyndbg="file a.c +p"', "quiet"]


@pytest.mark.parametrize("tokens,args,state,expected", [
    (["ro", "quiet"], ["intel_iommu=on", "iommu=pt"], "present", ["ro", "quiet", "intel_iommu=on", "iommu=pt"]),
    (["ro", "iommu=nopt", "quiet"], ["iommu=pt"], "present", ["ro", "iommu=pt", "quiet"]),
    (["iommu=pt", "ro", "iommu=pt"], ["iommu=pt"], "present", ["iommu=pt", "ro", "iommu=pt"]),
    (["iommu=nopt", "ro", "iommu=pt"], ["iommu=pt"], "present", ["ro", "iommu=pt"]),
    (["ro", "intel_iommu=on", "iommu=pt"], ["intel_iommu"], "absent", ["ro", "iommu=pt"]),
    (["ro", "iommu=pt"], ["iommu=nopt"], "absent", ["ro", "iommu=pt"]),
    (["ro", "iommu=pt"], ["iommu=pt"], "absent", ["ro"]),
])
def test_apply_args(tokens, args, state, expected):
    assert k.apply_args(tokens, args, state) == expected


def test_unmet_and_reboot():
    running = ["BOOT_IMAGE=/boot/vmlinuz", "ro", "console=ttyS0"]
    assert k.unmet(running, ["intel_iommu=on", "iommu=pt"], "present") == ["intel_iommu=on", "iommu=pt"]
    running += ["intel_iommu=on", "iommu=pt"]
    assert k.unmet(running, ["intel_iommu=on", "iommu=pt"], "present") == []
    assert k.unmet(running, ["intel_iommu"], "absent") == ["intel_iommu"]
    assert k.unmet(running, ["intel_iommu=off"], "absent") == []


@pytest.mark.parametrize("bad", ["a b", "x='y'", "", "=on", "foo=\"bar"])
def test_validate_rejects(bad):
    with pytest.raises(k.CmdlineError, match="malformed"):
        k.validate_args([bad])


def test_validate_rejects_duplicate_keys():
    with pytest.raises(k.CmdlineError, match="more than once: iommu"):
        k.validate_args(["iommu=pt", "iommu=on"])


def test_grub_dropin_roundtrip_and_idempotence():
    text, configured = k.plan_grub(None, ["console=ttyS0,115200"], ["intel_iommu=on", "iommu=pt"], "present")
    # the addition is one single-quoted shell word (issue 15, defect 4)
    assert text.endswith('GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT}"\' intel_iommu=on iommu=pt\'\n')
    assert configured == ["console=ttyS0,115200", "intel_iommu=on", "iommu=pt"]
    assert k.parse_grub_dropin(text) == ["intel_iommu=on", "iommu=pt"]
    again, _cfg = k.plan_grub(text, ["console=ttyS0,115200"], ["intel_iommu=on", "iommu=pt"], "present")
    assert again == text
    # adding another argument keeps ours
    more, _cfg = k.plan_grub(text, [], ["vfio-pci.ids=10de:2331"], "present")
    assert k.parse_grub_dropin(more) == ["intel_iommu=on", "iommu=pt", "vfio-pci.ids=10de:2331"]


def test_grub_absent_removes_dropin_when_empty():
    text, _cfg = k.plan_grub(None, [], ["intel_iommu=on", "iommu=pt"], "present")
    gone, configured = k.plan_grub(text, ["quiet"], ["intel_iommu", "iommu=pt"], "absent")
    assert gone is None and configured == ["quiet"]


def test_grub_present_already_in_base_writes_nothing():
    text, configured = k.plan_grub(None, ["quiet", "iommu=pt"], ["iommu=pt"], "present")
    assert text is None and configured == ["quiet", "iommu=pt"]


def test_grub_refuses_foreign_removal():
    with pytest.raises(k.CmdlineError, match="set outside"):
        k.plan_grub(None, ["quiet", "iommu=pt"], ["iommu"], "absent")


def test_grub_overrides_base_value_last_wins():
    base = ["console=ttyS0", "intel_iommu=off"]
    text, configured = k.plan_grub(None, base, ["intel_iommu=on", "iommu=pt"], "present")
    assert k.parse_grub_dropin(text) == ["intel_iommu=on", "iommu=pt"]
    assert k.effective(configured)["intel_iommu"] == "intel_iommu=on"
    assert k.overridden(base, ["intel_iommu=on", "iommu=pt"]) == ["intel_iommu=on"]
    # running kernel booted with both: the last one counts
    assert k.unmet(["intel_iommu=off", "intel_iommu=on", "iommu=pt"], ["intel_iommu=on"], "present") == []
    assert k.unmet(["intel_iommu=on", "intel_iommu=off"], ["intel_iommu=on"], "present") == ["intel_iommu=on"]


def test_cmdline_file():
    new, tokens = k.plan_cmdline_file("root=UUID=x ro quiet\n", ["intel_iommu=on"], "present")
    assert new == "root=UUID=x ro quiet intel_iommu=on\n"
    same, _tokens = k.plan_cmdline_file(new, ["intel_iommu=on"], "present")
    assert same == new


def test_detect(tmp_path):
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/grub").write_text("")
    tools = {"update-grub": "/usr/sbin/update-grub"}
    assert k.detect_bootloader(str(tmp_path), tools.get) == "grub"
    (tmp_path / "boot/loader/entries").mkdir(parents=True)
    tools["grubby"] = "/usr/sbin/grubby"
    assert k.detect_bootloader(str(tmp_path), tools.get) == "grubby"
    assert k.detect_bootloader(str(tmp_path / "nothing"), {}.get) is None


# --- issue 15, defect 4: nothing given as an argument is ever run by the shell that sources the drop-in ----

import os  # noqa: E402
import subprocess  # noqa: E402

HOSTILE = [
    "x=$(touch PWNED)",                 # space outside quotes, and command substitution
    "x=$(touch${IFS}PWNED)",            # command substitution without a space
    "x=`touch PWNED`",                  # backticks
    'x="$(touch PWNED)"',               # command substitution inside a double-quoted value
    'x="`touch PWNED`"',
    "x=${HOME}",                        # parameter expansion (GRUB expands $ too)
    "iommu=pt\n",                       # a trailing newline ($ in a regex matches before it)
    "iommu=pt\ntouch PWNED",            # newline injection
    'x="a\nb"',                         # newline inside quotes
    "x=a;touch PWNED",
    "x=a|b", "x=a&b", "x=<a", "x=a>b", "x=(a)",
    "x=a\\b", 'x="a\\"b"',              # backslashes
    "x='a'", "x=\"a'b\"",               # single quotes
    "x=a\tb", "x=\x01", "x=\x7f",       # control characters
    'x=a"b c"', '"x=a b"', 'x="a b', 'x="a"b"',  # quotes anywhere but around the whole value
    "x=a b",                            # space outside quotes
    "--",                               # ends the kernel's parameters
    "ké=1", "x=é",                      # not ASCII
]


@pytest.mark.parametrize("bad", HOSTILE)
def test_validate_refuses_shell_and_grub_syntax(bad):
    with pytest.raises(k.CmdlineError, match="malformed") as exc:
        k.validate_args([bad])
    assert repr(bad) in str(exc.value)


@pytest.mark.parametrize("good", [
    "intel_iommu=on", "iommu=pt", "quiet", "vfio-pci.ids=10de:2335,10de:22ba", "console=ttyS0,115200n8",
    "root=UUID=0b7e-11", "crashkernel=1G-4G:192M,4G-64G:256M", "video=HDMI-A-1:1920x1080@60", "acpi_osi=!Windows",
    "memmap=64K#0x1000", "console=", 'x=""', 'dyndbg="file a.c +p"',
    'nvidia.NVreg_RegistryDwords="PerfLevelSrc=0x2222;PowerMizerEnable=0x1"', 'acpi_osi="!Windows 2012"',
])
def test_validate_accepts_kernel_syntax(good):
    k.validate_args([good])


def source_dropin(tmp_path, text, default="quiet splash"):
    """Source ``text`` with /bin/sh as grub-mkconfig does; return GRUB_CMDLINE_LINUX_DEFAULT afterwards."""
    path = tmp_path / "90-gpuops-kernel-cmdline.cfg"
    path.write_text(text)
    script = 'GRUB_CMDLINE_LINUX_DEFAULT="$2"; . "$1" || exit 97; printf "%s" "$GRUB_CMDLINE_LINUX_DEFAULT"'
    res = subprocess.run(["/bin/sh", "-c", script, "sh", str(path), default], cwd=str(tmp_path),
                         capture_output=True, text=True, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                                              "HOME": str(tmp_path)},
                         check=False)
    assert res.returncode == 0 and res.stderr == "", res
    return res.stdout


def test_sourced_dropin_holds_quoted_values_verbatim(tmp_path):
    args = ["intel_iommu=on", 'dyndbg="file a.c +p"', 'nvidia.NVreg_RegistryDwords="A=1;B=2"', 'x=""']
    k.validate_args(args)
    text, configured = k.plan_grub(None, ["quiet", "splash"], args, "present")
    assert source_dropin(tmp_path, text) == 'quiet splash ' + " ".join(args)
    assert k.parse_grub_dropin(text) == args
    assert configured == ["quiet", "splash"] + args
    again, _cfg = k.plan_grub(text, ["quiet", "splash"], args, "present")
    assert again == text


@pytest.mark.parametrize("hostile", [
    ["x=$(touch PWNED)"], ["x=`touch PWNED`"], ['x="$(touch PWNED)"'], ["x='; touch PWNED; '"],
    ["x=\"'\"; touch PWNED; \"'\""], ["x=a\ntouch PWNED"], ['x=a"; touch PWNED; "'], ["x=${IFS}$(touch PWNED)\\"],
])
def test_rendered_dropin_never_runs_what_it_holds(tmp_path, hostile):
    """Even tokens that bypass validation are data, never code, to the shell that sources the file."""
    text = k.render_grub_dropin(hostile)
    assert source_dropin(tmp_path, text) == "quiet splash " + " ".join(hostile)
    assert not (tmp_path / "PWNED").exists()


def test_old_format_dropin_is_read_and_rewritten():
    old = (k.HEADER + "# Sourced by grub-mkconfig after /etc/default/grub; run update-grub after changes.\n"
           'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} intel_iommu=on iommu=pt"\n')
    assert k.parse_grub_dropin(old) == ["intel_iommu=on", "iommu=pt"]
    new, configured = k.plan_grub(old, [], ["intel_iommu=on", "iommu=pt"], "present")
    assert new != old and k.parse_grub_dropin(new) == ["intel_iommu=on", "iommu=pt"]


def test_foreign_token_in_our_dropin_is_refused():
    forged = k.render_grub_dropin(["intel_iommu=on", "x=$(id)"])
    with pytest.raises(k.CmdlineError, match=r"malformed.*x=\$\(id\)"):
        k.plan_grub(forged, [], ["iommu=pt"], "present")


def test_quoted_value_is_met_as_the_kernel_reports_it():
    """GRUB hands a value with spaces to the kernel as "key=a b" (whole parameter quoted); the kernel's
    next_arg() strips either form of quoting, so both are the same parameter."""
    running = ["BOOT_IMAGE=/vmlinuz", '"dyndbg=file a.c +p"']
    assert k.unmet(running, ['dyndbg="file a.c +p"'], "present") == []
    assert k.unmet(['dyndbg="file a.c +p"'], ['dyndbg="file b.c +p"'], "present") == ['dyndbg="file b.c +p"']
    assert k.unmet(running, ["dyndbg"], "absent") == ["dyndbg"]


# --- ownership records: what an owner added, and only that, goes on absent --------------------------------

def _plan(before, args, state, entries=(), others=()):
    return k.plan_owned(list(before), list(args), state, [dict(e) for e in entries], set(others))


def test_owned_present_records_only_what_was_not_configured():
    # the user's own intel_iommu=on was configured before the owner asked for it
    p = _plan(["ro", "quiet", "intel_iommu=on"], ["intel_iommu=on", "iommu=pt"], "present")
    assert p["entries"] == [{"arg": "iommu=pt", "replaced": None}]
    assert p["kept"] == ["intel_iommu=on"] and p["ops"] == [(["intel_iommu=on", "iommu=pt"], "present")]


def test_owned_present_records_the_value_it_replaces_and_is_stable():
    p = _plan(["ro", "intel_iommu=off"], ["intel_iommu=on", "iommu=pt"], "present")
    assert p["entries"] == [{"arg": "intel_iommu=on", "replaced": "intel_iommu=off"},
                            {"arg": "iommu=pt", "replaced": None}]
    # second run: configured now, recorded: the record stays as it is
    again = _plan(["ro", "intel_iommu=on", "iommu=pt"], ["intel_iommu=on", "iommu=pt"], "present", p["entries"])
    assert again["entries"] == p["entries"] and again["kept"] == []
    # the owner changes its value: the original value (not its own earlier one) is what it replaced
    changed = _plan(["ro", "intel_iommu=on", "iommu=pt"], ["iommu=nopt"], "present", p["entries"])
    assert {"arg": "iommu=nopt", "replaced": None} in changed["entries"]
    assert {"arg": "iommu=pt", "replaced": None} not in changed["entries"]


def test_owned_absent_removes_only_recorded_arguments():
    entries = [{"arg": "iommu=pt", "replaced": None}]
    p = _plan(["ro", "intel_iommu=on", "iommu=pt"], ["intel_iommu=on", "iommu=pt"], "absent", entries)
    assert p["ops"] == [(["iommu=pt"], "absent")] and p["removed"] == ["iommu=pt"]
    assert p["kept"] == ["intel_iommu=on"] and p["entries"] == []
    # nothing recorded any more: a second absent removes nothing
    again = _plan(["ro", "intel_iommu=on"], ["intel_iommu=on", "iommu=pt"], "absent", p["entries"])
    assert again["ops"] == [([], "absent")] and again["removed"] == [] and again["entries"] == []


def test_owned_absent_with_no_args_removes_every_recorded_argument():
    entries = [{"arg": "intel_iommu=on", "replaced": None}, {"arg": "iommu=pt", "replaced": None}]
    p = _plan(["ro", "intel_iommu=on", "iommu=pt", "quiet"], [], "absent", entries)
    assert p["removed"] == ["intel_iommu=on", "iommu=pt"] and p["kept"] == [] and p["entries"] == []


def test_owned_absent_restores_a_replaced_value_only_when_its_key_is_gone():
    entries = [{"arg": "intel_iommu=on", "replaced": "intel_iommu=off"}]
    # grubby/systemd-boot replaced the value: it comes back
    p = _plan(["ro", "intel_iommu=on"], ["intel_iommu=on"], "absent", entries)
    assert p["ops"] == [(["intel_iommu=on"], "absent"), (["intel_iommu=off"], "present")]
    assert k.apply_args(k.apply_args(["ro", "intel_iommu=on"], ["intel_iommu=on"], "absent"),
                        ["intel_iommu=off"], "present") == ["ro", "intel_iommu=off"]
    # GRUB appended ours after /etc/default/grub's value, which is in force again by itself
    p = _plan(["ro", "intel_iommu=off", "intel_iommu=on"], ["intel_iommu=on"], "absent", entries)
    assert p["ops"] == [(["intel_iommu=on"], "absent")]


def test_owned_arguments_shared_between_owners():
    # another owner added iommu=pt: this owner shares it instead of calling it the user's
    p = _plan(["ro", "iommu=pt"], ["iommu=pt"], "present", others={"iommu=pt"})
    assert p["entries"] == [{"arg": "iommu=pt", "replaced": None}] and p["kept"] == []
    # on absent it is forgotten by this owner but stays for the other one
    p = _plan(["ro", "iommu=pt"], ["iommu=pt"], "absent", p["entries"], others={"iommu=pt"})
    assert p["removed"] == [] and p["entries"] == []


def test_owned_absent_bare_key_names_every_recorded_value():
    entries = [{"arg": "intel_iommu=on", "replaced": None}]
    p = _plan(["ro", "intel_iommu=on"], ["intel_iommu"], "absent", entries)
    assert p["removed"] == ["intel_iommu=on"] and p["kept"] == []


def test_record_roundtrip_and_refusal():
    entries = [{"arg": "intel_iommu=on", "replaced": "intel_iommu=off"}, {"arg": 'dyndbg="a b"', "replaced": None}]
    text = k.render_record("vfio", entries)
    assert k.parse_record(text, "/r/vfio.json") == entries
    assert k.render_record("vfio", []) is None and k.parse_record(None, "/r") == []
    for bad in ("{", '{"added": [{"arg": "x=$(id)"}]}', '{"owner": "vfio"}', "[1]"):
        with pytest.raises(k.CmdlineError, match="not a kernel_cmdline ownership record"):
            k.parse_record(bad, "/r/vfio.json")


def test_reboot_pending_after_owned_absent():
    running = ["ro", "intel_iommu=off", "intel_iommu=on", "iommu=pt", "vfio-pci.disable_idle_d3=1"]
    configured = ["ro", "intel_iommu=off", "vfio-pci.disable_idle_d3=1"]
    cands = ["intel_iommu=on", "iommu=pt", "vfio-pci.disable_idle_d3=1"]
    assert k.reboot_pending_absent(running, configured, cands) == ["intel_iommu=on", "iommu=pt"]
    assert k.reboot_pending_absent(configured, configured, cands) == []


def test_grub_owned_removal_leaves_the_base_copy():
    dropin = k.render_grub_dropin(["intel_iommu=on"])
    with pytest.raises(k.CmdlineError, match="set outside"):
        k.plan_grub(dropin, ["ro", "intel_iommu=on"], ["intel_iommu=on"], "absent")
    new, conf = k.plan_grub(dropin, ["ro", "intel_iommu=on"], ["intel_iommu=on"], "absent", strict=False)
    assert new is None and conf == ["ro", "intel_iommu=on"]


# --- init's arguments after "--" ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text,tokens,init", [
    ("ro quiet\n", ["ro", "quiet"], None),
    ("ro quiet -- single\n", ["ro", "quiet"], "single"),
    ("ro -- iommu=pt  a=\"b c\" -- x\n", ["ro"], 'iommu=pt  a="b c" -- x'),
    ("ro --\n", ["ro"], ""),
    ('ro dyndbg="a -- b" quiet\n', ["ro", 'dyndbg="a -- b"', "quiet"], None),
    ("ro --x=1 quiet", ["ro", "--x=1", "quiet"], None),
    ("", [], None),
])
def test_kernel_part_stops_at_a_bare_double_dash(text, tokens, init):
    assert k.kernel_part(text) == (tokens, init)
    assert k.kernel_args(k.split_cmdline(text)) == tokens


def test_cmdline_file_edits_kernel_arguments_only_and_keeps_init_verbatim():
    text = "root=UUID=x ro -- iommu=pt  single\n"
    new, tokens = k.plan_cmdline_file(text, ["iommu=pt"], "present")
    assert new == "root=UUID=x ro iommu=pt -- iommu=pt  single\n" and tokens == ["root=UUID=x", "ro", "iommu=pt"]
    assert k.plan_cmdline_file(new, ["iommu=pt"], "present") == (new, tokens)
    back, tokens = k.plan_cmdline_file(new, ["iommu"], "absent")
    assert back == "root=UUID=x ro -- iommu=pt  single\n" and tokens == ["root=UUID=x", "ro"]
    # nothing to remove: the text is kept as it is
    assert k.plan_cmdline_file(text, ["iommu=pt"], "absent") == (text, ["root=UUID=x", "ro"])
