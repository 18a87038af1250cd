"""Stand-in for ansible-test's pip bootstrap script (get-pip.py).

ansible-test downloads get-pip.py from a host this build environment cannot reach.
This file does the same job with what is reachable: pip from the interpreter's own
``ensurepip`` wheel, then ``pip install`` of the requested packages (e.g. pip==24.2)
from PyPI.  `make test-sanity` copies it to ~/.ansible/test/cache/get_pip_<ver>.py.
"""
import runpy
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.argv = ["pip", "install", "--quiet"] + args
runpy.run_module("pip", run_name="__main__", alter_sys=True)
