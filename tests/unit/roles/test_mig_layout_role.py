"""The mig_layout role run for real by ansible-playbook (connection local) against the NVML simulator
(tests/unit/fixtures/pynvml_sim stands in for ``pynvml`` in the module's process; the GPUs' state lives
in a JSON file between runs): apply, rerun changed=0, check mode, refusal with nothing written, the
boot-time unit verified by systemd-analyze and its ExecStart run after a simulated reboot, absent."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import ansible_command

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
PLAYBOOK = ansible_command("ansible-playbook")
SIM_PATH = os.path.join(REPO, "tests", "unit", "fixtures", "pynvml_sim")
sys.path.insert(0, os.path.join(REPO, "tests", "unit"))
import nvml_sim  # noqa: E402

CONFIGS = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-balanced": [{"device-filter": "0x233510DE", "devices": "all", "mig-enabled": True,
                      "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}],
    "all-1g.18gb": [{"device-filter": ["0x233510DE"], "devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}],
    "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 8}}],
}}


@pytest.fixture
def lab(tmp_path):
    state = tmp_path / "gpus.json"
    sim = nvml_sim.NvmlSim([{"table": nvml_sim.load_table("h200-141gb")}, {"table": nvml_sim.load_table("h200-141gb")}])
    state.write_text(json.dumps(sim.dump()))
    dirs = {k: str(tmp_path / k) for k in ("etc", "libexec", "systemd")}
    return {"tmp": tmp_path, "state": state, "dirs": dirs}


def env_for(lab):
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                PYTHONPATH=os.pathsep.join([SIM_PATH] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
                GPUOPS_NVML_SIM_STATE=str(lab["state"]), ANSIBLE_NOCOLOR="1",
                ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")


def play(lab, config, *args, state="present", configs=None, **extra_vars):
    book = lab["tmp"] / "play.yml"
    book.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n"
        "  roles:\n    - role: gpuops.nvidia.mig_layout\n")
    extra = lab["tmp"] / "vars.json"
    extra.write_text(json.dumps({
        "mig_layout_state": state, "mig_layout_config": config, "mig_layout_configs": configs or CONFIGS,
        "mig_layout_config_dir": lab["dirs"]["etc"], "mig_layout_libexec_dir": lab["dirs"]["libexec"],
        "mig_layout_unit_dir": lab["dirs"]["systemd"], "mig_layout_service_manager": "none",
        "mig_layout_python": sys.executable, "ansible_python_interpreter": sys.executable, **extra_vars}))
    res = subprocess.run([PLAYBOOK, "-i", "localhost,", str(book), "-e", "@" + str(extra)] + list(args),
                         env=env_for(lab), capture_output=True, text=True, timeout=300, check=False)
    m = re.search(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", res.stdout)
    assert m, res.stdout + res.stderr
    return res, int(m.group(2)), int(m.group(4))


def gpus(lab):
    sim = nvml_sim.NvmlSim.from_dump(json.loads(lab["state"].read_text()))
    return [sim.state(i) for i in range(2)]


def layout(states):
    return [(cur, sorted(g[0] for g in gis)) for cur, _pending, gis in states]


def writes_logged(lab):
    path = str(lab["state"]) + ".calls"
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line)[0] for line in fh if json.loads(line)[0] in nvml_sim.WRITE_CALLS]


def snapshot(lab):
    out = {}
    for d in lab["dirs"].values():
        for root, _dirs, files in os.walk(d):
            for f in files:
                with open(os.path.join(root, f), "rb") as fh:
                    out[os.path.join(root, f)] = fh.read()
    return out


BALANCED = ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]


def test_apply_rerun_check_refuse_boot_and_absent(lab):
    res, changed, failed = play(lab, "all-balanced")
    assert failed == 0 and changed >= 5, res.stdout
    assert layout(gpus(lab)) == [(True, BALANCED), (True, BALANCED)]
    etc = lab["dirs"]["etc"]
    with open(os.path.join(etc, "config.json"), encoding="utf-8") as fh:
        assert json.load(fh) == CONFIGS
    with open(os.path.join(etc, "selected.env"), encoding="utf-8") as fh:
        assert "MIG_CONFIG=all-balanced\n" in fh.read()
    n_writes = len(writes_logged(lab))

    # rerun: nothing changes, no NVML write
    res, changed, failed = play(lab, "all-balanced")
    assert (changed, failed) == (0, 0), res.stdout
    assert len(writes_logged(lab)) == n_writes

    # check mode with another layout: reported, nothing written (files or NVML)
    before = snapshot(lab)
    res, changed, failed = play(lab, "all-1g.18gb", "--check", "--diff")
    assert failed == 0 and changed >= 1, res.stdout
    assert "1g.18gb@6" in res.stdout  # the diff shows the planned layout
    assert snapshot(lab) == before and len(writes_logged(lab)) == n_writes
    assert layout(gpus(lab)) == [(True, BALANCED), (True, BALANCED)]

    # a layout the GPUs cannot hold: refused before anything is written
    res, changed, failed = play(lab, "too-big")
    assert failed == 1 and changed == 0
    assert "GPU 0 (NVIDIA H200" in res.stdout and "'1g.18gb': 8 asked, the GPU holds at most 7" in res.stdout
    assert snapshot(lab) == before and len(writes_logged(lab)) == n_writes

    # a config name that would reach the unit's environment file as shell: refused by the role
    res, changed, failed = play(lab, "all-balanced; reboot")
    assert failed == 1 and "a config name is 1-63 letters" in res.stdout
    assert snapshot(lab) == before

    # the unit: systemd's own verifier, then its ExecStart after a reboot (instances gone, mode kept)
    unit = os.path.join(lab["dirs"]["systemd"], "gpuops-mig-layout.service")
    with open(unit, encoding="utf-8") as fh:
        text = fh.read()
    assert re.search(r"^After=.*nvidia-persistenced\.service", text, re.M)
    assert re.search(r"^Before=.*containerd\.service.*kubelet\.service", text, re.M)
    if shutil.which("systemd-analyze"):
        ver = subprocess.run(["systemd-analyze", "verify", "--man=no", unit], capture_output=True, text=True, check=False,
                             timeout=60)
        # systemd-analyze exits 0 on unknown keys and bad values, only warning: any line about our unit fails
        problems = [ln for ln in (ver.stdout + ver.stderr).splitlines() if "gpuops-mig-layout" in ln]
        assert ver.returncode == 0 and not problems, ver.stdout + ver.stderr
    sim = nvml_sim.NvmlSim.from_dump(json.loads(lab["state"].read_text()))
    sim.reboot()
    lab["state"].write_text(json.dumps(sim.dump()))
    assert layout(gpus(lab)) == [(True, []), (True, [])]
    exec_start = re.search(r"^ExecStart=(.*)$", text, re.M).group(1).replace("${MIG_CONFIG}", "all-balanced")
    boot = subprocess.run(shlex.split(exec_start), env=env_for(lab), capture_output=True, text=True, timeout=120,
                          check=False)
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert json.loads(boot.stdout)["changed"] is True
    assert layout(gpus(lab)) == [(True, BALANCED), (True, BALANCED)]

    # absent: the boot-time files go, the GPUs keep their layout
    res, changed, failed = play(lab, "all-balanced", state="absent")
    assert failed == 0 and changed >= 1
    assert snapshot(lab) == {}
    assert layout(gpus(lab)) == [(True, BALANCED), (True, BALANCED)]
    res, changed, failed = play(lab, "all-balanced", state="absent")
    assert (changed, failed) == (0, 0)


def test_no_config_chosen_leaves_the_gpus_alone(lab):
    res, changed, failed = play(lab, "")
    assert (changed, failed) == (0, 0) and "no MIG config chosen" in res.stdout
    assert writes_logged(lab) == [] and snapshot(lab) == {}


# -- pynvml for mig_layout_python (issue 33): refused before any change, or installed with pip ----------------------

def flat(res):
    """The play's output with the callback's line wrapping undone."""
    return " ".join(res.stdout.split())


def _python_without_pynvml(tmp_path, python, name="python-nvml"):
    """``python`` as the boot-time apply would run it: no PYTHONPATH (the NVML simulator the module gets stays out),
    and -S for the test environment's own Python, whose site-packages hold the real nvidia-ml-py."""
    wrapper = tmp_path / name
    wrapper.write_text("#!/bin/sh\nexec env -u PYTHONPATH %s %s\"$@\"\n" % (python, "-S " if python == sys.executable else ""))
    wrapper.chmod(0o755)
    return str(wrapper)


def _wheel_of_installed(dist, out_dir):
    """A wheel of the distribution installed here (the real nvidia-ml-py of the test environment), for pip to install
    from a local directory: no index is reached."""
    import base64
    import hashlib
    import importlib.metadata
    import zipfile

    d = importlib.metadata.distribution(dist)
    skip = ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json")
    files = [f for f in d.files if "__pycache__" not in str(f) and os.path.basename(str(f)) not in skip]
    info = next(str(f).split("/", maxsplit=1)[0] for f in d.files if ".dist-info/" in str(f))
    path = os.path.join(out_dir, "%s-%s-py3-none-any.whl" % (d.metadata["Name"].replace("-", "_"), d.version))
    record = []
    with zipfile.ZipFile(path, "w") as zf:
        for f in files:
            data = f.read_binary() if hasattr(f, "read_binary") else open(str(f.locate()), "rb").read()
            zf.writestr(str(f), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (f, digest, len(data)))
        record.append("%s/RECORD,," % info)
        zf.writestr(info + "/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    """A Python with pip and without pynvml, and a local wheel directory holding nvidia-ml-py."""
    pytest.importorskip("pynvml")
    base = tmp_path_factory.mktemp("nvml")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300, capture_output=True)
    wheels = base / "wheels"
    wheels.mkdir()
    _wheel_of_installed("nvidia-ml-py", str(wheels))
    return {"python": str(venv / "bin" / "python"), "wheels": str(wheels), "base": base}


def _imports_pynvml(python):
    res = subprocess.run(["env", "-u", "PYTHONPATH", python, "-c", "import pynvml"], capture_output=True, timeout=60,
                         check=False)
    return res.returncode == 0


def test_without_pynvml_the_role_refuses_before_any_change(lab):
    python = _python_without_pynvml(lab["tmp"], sys.executable)
    for args in ((), ("--check",)):
        res, changed, failed = play(lab, "all-balanced", *args, mig_layout_python=python)
        assert (changed, failed) == (0, 1), res.stdout
        assert "mig_layout: pynvml is not importable by %s" % sys.executable in flat(res)
        assert "`%s -m pip install nvidia-ml-py`" % sys.executable in flat(res)
        assert "mig_layout_nvml_install=pip or package" in flat(res) and "nothing was changed on the GPUs" in flat(res)
        assert "Plan the MIG layout" not in res.stdout                 # refused before the plan
        assert snapshot(lab) == {} and writes_logged(lab) == []
    assert layout(gpus(lab)) == [(False, []), (False, [])]


def test_a_python_that_does_not_run_is_named(lab):
    res, changed, failed = play(lab, "all-balanced", mig_layout_python=str(lab["tmp"] / "no-python"))
    assert (changed, failed) == (0, 1) and "did not run the pynvml check" in flat(res), res.stdout
    assert snapshot(lab) == {} and writes_logged(lab) == []


def test_pip_installs_nvidia_ml_py_for_mig_layout_python(lab, bare_venv):
    python = _python_without_pynvml(lab["tmp"], bare_venv["python"])
    assert not _imports_pynvml(bare_venv["python"])
    pip = {"mig_layout_python": python, "mig_layout_nvml_install": "pip",
           "mig_layout_nvml_pip_extra_args": ["--no-index", "--find-links=" + bare_venv["wheels"]]}

    # check mode: the install is reported, nothing installed, nothing planned or written
    res, changed, failed = play(lab, "all-balanced", "--check", **pip)
    assert failed == 0 and changed == 1, res.stdout
    assert "would install it; the MIG layout is planned (and applied) once it is there" in flat(res)
    assert not _imports_pynvml(bare_venv["python"])
    assert snapshot(lab) == {} and writes_logged(lab) == []

    # for real: installed with pip into that Python, checked again, then the layout
    res, changed, failed = play(lab, "all-balanced", **pip)
    assert failed == 0 and changed >= 6, res.stdout
    assert _imports_pynvml(bare_venv["python"])
    assert layout(gpus(lab)) == [(True, BALANCED), (True, BALANCED)]

    # a rerun: pip has nothing to do, nor has NVML
    n_writes = len(writes_logged(lab))
    res, changed, failed = play(lab, "all-balanced", **pip)
    assert (changed, failed) == (0, 0), res.stdout
    assert len(writes_logged(lab)) == n_writes


@pytest.mark.parametrize("var,value", [
    ("mig_layout_nvml_install", "yes"),
    ("mig_layout_nvml_pip_package", "nvidia-ml-py --index-url=http://mirror.example"),
    ("mig_layout_nvml_pip_package", "-r/etc/shadow"),
    ("mig_layout_nvml_pip_index_url", "file:///srv/wheels"),
    ("mig_layout_nvml_pip_index_url", "https://mirror.example/simple --trusted-host=x"),
    ("mig_layout_nvml_pip_extra_args", ["--no-index", "x y"]),
    ("mig_layout_nvml_pip_extra_args", ["wheel.whl"]),
    ("mig_layout_nvml_package", "python3-pynvml; reboot"),
])
def test_bad_nvml_install_inputs_are_refused_by_the_role(var, value):
    from role_render import Role

    role = Role("mig_layout")
    task = role.task("validate.yml", "Check the inputs that reach the unit file and the boot-time command line")

    def holds(**overrides):
        templar = role.templar(mig_layout_config="all-balanced", **dict(task["vars"], **overrides))
        check = task["ansible.builtin.assert"]
        return (all(templar.evaluate_conditional(c) for c in check["that"]), templar.template(check["fail_msg"]))

    ok, msg = holds(**{var: value})
    assert not ok and "mig_layout_nvml_install none|pip|package" in msg
    assert holds(mig_layout_nvml_install="pip", mig_layout_nvml_pip_package="nvidia-ml-py>=12.535,<14",
                 mig_layout_nvml_pip_index_url="https://mirror.example/pypi/simple",
                 mig_layout_nvml_pip_extra_args=["--break-system-packages", "--find-links=/srv/wheels"])[0]
    assert holds()[0]
