#!/usr/bin/env python3
"""check-layers.py — fails on any use of a layer above its user.

The layers, bottom to top, are those of ARCHITECTURE.md:

    kernels  lib/util  backends  lib/device  lib/mem  lib/graph  lib/exec
    lib/data  lib/train  tools

A file may use its own layer and those below it. The contracts anyone may
include are the public header (lib/dlrt.h, lib/dlrt/), the backend contract
(lib/device/backend.h) and the kernel table (kernels/kernel_table.h);
config.h is the build's.

Two readings of the tree:
  includes  every `#include "..."` of the sources, resolved to a file;
  symbols   (with --build DIR) every object file's undefined symbols (nm -u),
            matched to the layer whose objects define them (nm --defined-only).
            A public function is judged by where it is defined, so a call
            through the public header to a higher layer is caught too.

Usage: check-layers.py [--tap] [--build DIR] [SRCDIR]
Prints each upward use as "USER uses LAYER: what"; exits 1 if there is any.
With --tap, prints TAP (one point per reading).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

LAYERS = ["kernels", "lib/util", "backends", "lib/device", "lib/mem", "lib/graph",
          "lib/exec", "lib/data", "lib/train", "tools"]
RANK = {name: i for i, name in enumerate(LAYERS)}
CONTRACTS = {"lib/dlrt.h", "lib/device/backend.h",
             "kernels/kernel_table.h"}
SOURCE_EXT = (".c", ".h", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(rel):
    """The layer of a path relative to the source root, or None."""
    if rel in CONTRACTS or rel.startswith("lib/dlrt/"):
        return None
    for name in sorted(LAYERS, key=len, reverse=True):
        if rel == name or rel.startswith(name + "/"):
            return name
    return None


def sources(root):
    for top in ("lib", "backends", "kernels", "tools"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def resolve(root, user, name):
    """The file an include names: beside the user, then on the build's -I path."""
    for base in (os.path.dirname(user), "lib", "kernels"):
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.exists(os.path.join(root, cand)):
            return cand
    return None


def include_uses(root):
    found = []
    for rel in sources(root):
        user = layer_of(rel)
        if user is None:
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for name in INCLUDE.findall(text):
            target = resolve(root, rel, name)
            if target is None:
                continue  # config.h, generated files
            used = layer_of(target)
            if used is not None and RANK[used] > RANK[user]:
                found.append("%s uses %s: #include \"%s\" in %s" % (user, used, name, rel))
    return found


def source_of(root, rel):
    """The source an object was compiled from (automake names objects
    [TARGET-]STEM.o beside their source), or None for a stale object."""
    folder, name = os.path.split(rel.replace("/.libs/", "/"))
    stem = name[:-2]
    cuts = [0] + [i + 1 for i, ch in enumerate(stem) if ch == "-"]
    for cut in cuts:
        for ext in (".c", ".cu"):
            if os.path.exists(os.path.join(root, folder, stem[cut:] + ext)):
                return os.path.join(folder, stem[cut:] + ext)
    return None


def objects(root, build):
    """(layer, path) of every object file of the library and the tools whose
    source still exists (an object left behind by a moved file is not read)."""
    for dirpath, _, files in os.walk(build):
        for f in sorted(files):
            if not f.endswith(".o"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, build)
            if rel.endswith("/.libs/" + f) and os.path.exists(
                    os.path.join(os.path.dirname(dirpath), f)):
                continue  # libtool's PIC twin of an object beside it
            layer = layer_of(rel.replace("/.libs/", "/"))
            if layer is not None and source_of(root, rel):
                yield layer, path


def nm(args, path):
    out = subprocess.run(["nm"] + args + [path], capture_output=True, text=True,
                         check=False).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def symbol_uses(root, build):
    definer = {}
    users = []
    for layer, path in objects(root, build):
        for sym in nm(["-g", "--defined-only"], path):
            definer.setdefault(sym, layer)
        users.append((layer, path))
    found = []
    for layer, path in users:
        for sym in nm(["-u"], path):
            used = definer.get(sym)
            if used is not None and RANK[used] > RANK[layer]:
                found.append("%s uses %s: %s in %s" % (layer, used, sym,
                                                     os.path.relpath(path, build)))
    return found, len(users)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tap", action="store_true")
    ap.add_argument("--build", help="a built tree whose object files to read")
    ap.add_argument("srcdir", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    opt = ap.parse_args()
    root = os.path.abspath(opt.srcdir)

    results = [("no upward #include in lib, backends, kernels and tools", include_uses(root),
                None)]
    if opt.build:
        if not shutil.which("nm"):
            results.append(("no upward use of a symbol", [], "nm is not installed"))
        else:
            found, n_obj = symbol_uses(root, opt.build)
            skip = None if n_obj else "no object files under %s (build first)" % opt.build
            results.append(("no upward use of a symbol in %d object files" % n_obj, found, skip))

    bad = 0
    if opt.tap:
        print("1..%d" % len(results))
    for i, (desc, found, skip) in enumerate(results, 1):
        for line in found:
            print(("# " if opt.tap else "") + line)
        if opt.tap:
            if skip:
                print("ok %d - %s # SKIP %s" % (i, desc, skip))
            else:
                print("%s %d - %s" % ("not ok" if found else "ok", i, desc))
        bad += len(found)
    if not opt.tap:
        print("%d upward uses" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
