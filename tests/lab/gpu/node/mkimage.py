#!/usr/bin/env python3
"""Make the GPU node lane's pod image from the host's own files (the machine has no registry).

One OCI image-layout archive, imported with ``ctr images import``; one layer holding:
  /pause                  the sandbox process (static, carried by the lane)
  /bin/busybox + applets  a shell and coreutils (static, carried)
  python3 + its stdlib    the host's interpreter, the shared libraries it and its extension
                          modules need (found with the host's dynamic loader, ``ld.so --list``)
  /check/_cuda.py         the collection's CUDA check (driver API, vectorAdd), run inside pods
Nothing of NVIDIA's is in the image: the driver's libraries and nvidia-smi arrive through the
CDI spec at container start, as on any GPU node.  Env mirrors NVIDIA's CUDA base images
(PATH and LD_LIBRARY_PATH include /usr/local/nvidia).

  mkimage.py --name gpuops.local/node-check:lane --pause BIN --busybox BIN --cuda-check FILE --out image.tar

With ``--validator BIN --validator-manifests DIR`` the same image also serves as the lane's stand-in for NVIDIA's
gpu-operator image (the validator role's): NVIDIA's nvidia-validator (built here from its source) in /usr/bin,
the workload manifests it reads in /opt/validator/manifests, and ``vectorAdd`` -- in NVIDIA's image a CUDA
sample; here a script running the collection's CUDA check (a vector add through the driver API), since no CUDA
compiler is at hand to build the sample.

With ``--bin``, a component image instead (the kubelet node lanes: NVIDIA's and NFD's binaries, built here
from their sources, under the names the roles render): busybox and its applets, each ``--bin`` in /usr/bin
with the shared libraries it needs, /etc/passwd, and ``--user`` as the image's user; no python, no check.

  mkimage.py --name REF --busybox BIN --bin nvidia-device-plugin --bin config-manager [--user 65534:65534] --out x.tar
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

APPLETS = ["sh", "sleep", "cat", "date", "echo", "ls", "grep", "env", "true", "false", "test", "mkdir", "id", "head", "tail",
           # what nvidia-validator runs through its PATH (NVIDIA's image has them from busybox too)
           "chroot", "stat", "lsmod", "rm"]
SKIP_STDLIB = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
               "site-packages", "dist-packages", "config-3")
LOADER = "/lib64/ld-linux-x86-64.so.2"
# glibc's libraries beside libc.so.6 that a base image carries and the driver's libraries are linked against
GLIBC_BASE = ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libresolv.so.2")


def needed_libs(paths):
    """Shared libraries of ELF files, resolved by the host's loader (no ldd needed)."""
    libs = set()
    loader = os.path.realpath(LOADER)
    for p in paths:
        try:
            out = subprocess.run([loader, "--list", p], capture_output=True, text=True, check=False).stdout
        except OSError:
            continue
        for line in out.splitlines():
            parts = line.split("=>")
            target = (parts[1] if len(parts) > 1 else parts[0]).strip().split(" (")[0].strip()
            if target.startswith("/"):
                libs.add(target)
    libs.add(LOADER)
    return libs


class Layer:
    def __init__(self):
        self.buf = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.PAX_FORMAT)
        self.names = set()

    def _dirs(self, name):
        parts = name.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.names:
                self.dir(d)

    def dir(self, name, mode=0o755):
        name = name.strip("/")
        if name in self.names:
            return
        self._dirs(name)
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode = tarfile.DIRTYPE, mode
        self.tar.addfile(ti)
        self.names.add(name)

    def file(self, name, data, mode=0o644):
        name = name.strip("/")
        if name in self.names:
            return
        self._dirs(name)
        ti = tarfile.TarInfo(name)
        ti.size, ti.mode = len(data), mode
        self.tar.addfile(ti, io.BytesIO(data))
        self.names.add(name)

    def host_file(self, path, name=None):
        """A host file, at its own path (or ``name``), symlinks followed (the content is stored)."""
        real = os.path.realpath(path)
        with open(real, "rb") as f:
            data = f.read()
        self.file(name or path, data, os.stat(real).st_mode & 0o7777)

    def link(self, name, target):
        name = name.strip("/")
        if name in self.names:
            return
        self._dirs(name)
        ti = tarfile.TarInfo(name)
        ti.type, ti.linkname = tarfile.SYMTYPE, target
        self.tar.addfile(ti)
        self.names.add(name)

    def bytes(self):
        self.tar.close()
        return self.buf.getvalue()


def python_files():
    exe = os.path.realpath(sys.executable)
    ver = "python%d.%d" % sys.version_info[:2]
    stdlib = os.path.dirname(os.__file__)
    files = []
    for dirpath, dirnames, filenames in os.walk(stdlib):
        rel = os.path.relpath(dirpath, stdlib)
        top = rel.split(os.sep)[0]
        if top != "." and top.startswith(SKIP_STDLIB):
            dirnames[:] = []
            continue
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        files += [os.path.join(dirpath, f) for f in filenames if not f.endswith(".pyc")]
    return exe, ver, stdlib, files


def build(args):
    layer = Layer()
    for d in ("proc", "sys", "dev", "tmp", "etc", "run", "var/tmp", "check", "usr/bin", "usr/local/nvidia"):
        layer.dir(d, 0o1777 if d in ("tmp", "var/tmp") else 0o755)
    # usrmerge layout like the host's (Ubuntu 24.04): /bin, /lib, /lib64 link into /usr
    for top in ("bin", "sbin", "lib", "lib64"):
        if os.path.islink("/" + top):
            layer.dir("usr/" + top)
            layer.link(top, os.readlink("/" + top))
    layer.host_file(args.pause, "pause")
    layer.host_file(args.busybox, "usr/bin/busybox")
    for a in APPLETS:
        layer.link("usr/bin/" + a, "busybox")
    exe, ver, stdlib, files = python_files()
    layer.host_file(exe, "usr/bin/" + ver)
    layer.link("usr/bin/python3", ver)
    elves = [exe] + [f for f in files if f.endswith(".so")]
    for f in files:
        layer.host_file(f)
    # what the driver's user-space needs from the image (libcuda: libdl, libpthread, librt, libm, ...;
    # nvidia-smi), found on the host; the driver's own files stay out (CDI brings them)
    extra = [f for f in args.libs_for if os.path.exists(f)]
    driver_dirs = tuple(os.path.realpath(d) + "/" for d in args.driver_dir)
    for lib in sorted(needed_libs(elves) | {x for x in needed_libs(extra) if not os.path.realpath(x).startswith(driver_dirs)}):
        layer.host_file(lib)
        real = os.path.realpath(lib)
        if real != lib:
            layer.host_file(real)
    # ctypes.util.find_library needs no ldconfig here: _cuda.py loads libcuda.so.1 by SONAME
    with open(args.cuda_check, "rb") as f:
        layer.file("check/_cuda.py", f.read(), 0o755)
    layer.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    layer.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    layer.file("etc/ld.so.conf", b"/usr/local/nvidia/lib64\n")
    if args.validator:
        layer.host_file(args.validator, "usr/bin/nvidia-validator")
        for d in ("opt", "opt/validator", "opt/validator/manifests"):
            layer.dir(d, 0o755)
        for m in sorted(os.listdir(args.validator_manifests)):
            layer.host_file(os.path.join(args.validator_manifests, m), "opt/validator/manifests/" + m)
        layer.file("usr/bin/vectorAdd", b"#!/bin/sh\n# the collection's CUDA check in place of NVIDIA's CUDA sample (see mkimage.py)\n"
                   b"exec python3 /check/_cuda.py \"$@\"\n", 0o755)
    data = layer.bytes()
    return data, len(layer.names)


def build_component(args):
    layer = Layer()
    for d in ("proc", "sys", "dev", "tmp", "etc", "run", "var/tmp", "usr/bin", "usr/local/nvidia"):
        layer.dir(d, 0o1777 if d in ("tmp", "var/tmp") else 0o755)
    for top in ("bin", "sbin", "lib", "lib64"):
        if os.path.islink("/" + top):
            layer.dir("usr/" + top)
            layer.link(top, os.readlink("/" + top))
    if args.pause:
        layer.host_file(args.pause, "pause")
    layer.host_file(args.busybox, "usr/bin/busybox")
    for a in APPLETS:
        layer.link("usr/bin/" + a, "busybox")
    for b in args.bin:
        layer.host_file(b, "usr/bin/" + os.path.basename(b))
    # the device plugin and GFD are cgo builds that dlopen NVML: glibc and the loader come along, and with them the
    # rest of glibc a base image has (NVIDIA's distroless base does) -- libnvidia-ml needs libm, libdl, libpthread
    # and librt, and without them its dlopen fails as ERROR_LIBRARY_NOT_FOUND
    libs = needed_libs(args.bin)
    libc = next((lib for lib in libs if os.path.basename(lib) == "libc.so.6"), None)
    if libc:
        libs |= {os.path.join(os.path.dirname(libc), n) for n in GLIBC_BASE
                 if os.path.exists(os.path.join(os.path.dirname(libc), n))}
    for lib in sorted(libs):
        layer.host_file(lib)
        real = os.path.realpath(lib)
        if real != lib:
            layer.host_file(real)
    # where the nvidia runtime's update-ldcache hook and the loader find the driver's libraries (as in the pod image)
    layer.file("etc/ld.so.conf", b"/usr/local/nvidia/lib64\n")
    layer.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    layer.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    return layer.bytes(), len(layer.names)


def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def oci_archive(layer, name, out, entrypoint=("/pause",), user="", env=()):
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {
            **({"Entrypoint": list(entrypoint)} if entrypoint else {}),
            **({"User": user} if user else {}),
            "Env": ["PATH=/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
                    "NVIDIA_DRIVER_CAPABILITIES=compute,utility", *env],
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [sha(layer)]},
        "history": [{"created_by": "tests/lab/gpu/node/mkimage.py (host files)"}],
    }
    cfg = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(cfg), "size": len(cfg)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": sha(layer), "size": len(layer)}],
    }
    man = json.dumps(manifest, sort_keys=True).encode()
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha(man),
                            "size": len(man), "platform": {"architecture": "amd64", "os": "linux"},
                            "annotations": {"io.containerd.image.name": name,
                                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}}]}
    with tarfile.open(out, "w") as t:
        def add(n, data):
            ti = tarfile.TarInfo(n)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for blob in (layer, cfg, man):
            add("blobs/sha256/" + sha(blob)[7:], blob)
    return sha(man)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True)
    ap.add_argument("--pause", help="the sandbox process (/pause); required without --bin")
    ap.add_argument("--busybox", required=True)
    ap.add_argument("--cuda-check", help="the CUDA check (/check/_cuda.py); required without --bin")
    ap.add_argument("--bin", action="append", default=[], help="a component binary for /usr/bin (component image)")
    ap.add_argument("--user", default="", help="the image's user (uid:gid), component images only")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE in the image's config (its ENV)")
    ap.add_argument("--validator", help="NVIDIA's nvidia-validator (static): the image also stands in for gpu-operator's")
    ap.add_argument("--validator-manifests", help="its workload manifests (gpu-operator's validator/manifests)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--libs-for", nargs="*", default=[], help="host ELF files whose shared libraries the image must hold")
    ap.add_argument("--driver-dir", nargs="*", default=["/usr/local/nvidia"], help="driver dirs whose files stay out")
    args = ap.parse_args()
    if args.bin:
        layer, n = build_component(args)
        digest = oci_archive(layer, args.name, args.out, entrypoint=("/pause",) if args.pause else (), user=args.user,
                             env=args.env)
    else:
        if not (args.pause and args.cuda_check):
            ap.error("--pause and --cuda-check are required without --bin")
        if bool(args.validator) != bool(args.validator_manifests):
            ap.error("--validator and --validator-manifests go together")
        layer, n = build(args)
        digest = oci_archive(layer, args.name, args.out, env=args.env)
    print("image %s: %d entries, layer %.1f MB, manifest %s" % (args.name, n, len(layer) / 1e6, digest))


if __name__ == "__main__":
    main()
