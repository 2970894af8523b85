#!/usr/bin/env python3
"""Content keys for clang-tidy (scripts/lint.sh): one line "KEY FILE" per source file given.

A file's key is a SHA-256 over everything clang-tidy's verdict on it depends on: clang-tidy's
version, the .clang-tidy profile, the file's compile command, and the path and content of every
file the compiler read for it (the file and each header, system headers included, from the
build's dependency log). Paths are written relative to the source tree, so a clone elsewhere
computes the same keys. A file whose key is listed in scripts/tidy_clean.txt was found clean with
exactly these inputs, so lint.sh need not run clang-tidy on it again; any change to any input
changes the key.

A file without a compile command or without dependency information (not built yet) gets the key
"-", which never matches.

Usage: tidy_keys.py SOURCE_DIR BUILD_DIR FILE...
"""
import hashlib
import json
import os
import shlex
import subprocess
import sys


def main():
    src = os.path.realpath(sys.argv[1])
    build = os.path.realpath(sys.argv[2])
    files = sys.argv[3:]
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True,
                             text=True).stdout
    with open(os.path.join(src, ".clang-tidy"), "rb") as f:
        profile = f.read()
    with open(os.path.join(build, "compile_commands.json")) as f:
        commands = {os.path.realpath(os.path.join(e["directory"], e["file"])): e
                    for e in json.load(f)}
    content_hash = {}

    def digest(path):
        if path not in content_hash:
            try:
                with open(path, "rb") as f:
                    content_hash[path] = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                content_hash[path] = "missing"
        return content_hash[path]

    def relative(path):
        return "$SRC" + path[len(src):] if path.startswith(src + "/") else path

    for name in files:
        path = os.path.realpath(os.path.join(src, name))
        entry = commands.get(path)
        if entry is None:
            print("-", name)
            continue
        argv = shlex.split(entry["command"])
        while argv and os.path.basename(argv[0]) == "ccache":
            argv = argv[1:]
        output = argv[argv.index("-o") + 1] if "-o" in argv else ""
        deps = subprocess.run(["ninja", "-C", build, "-t", "deps", output], capture_output=True,
                              text=True)
        lines = deps.stdout.splitlines()
        if deps.returncode != 0 or not lines or "(VALID)" not in lines[0]:
            print("-", name)
            continue
        key = hashlib.sha256()
        key.update(version.encode())
        key.update(profile)
        command = " ".join(argv).replace(build, "$BUILD").replace(src, "$SRC")
        key.update(command.encode())
        for line in lines[1:]:
            dep = line.strip()
            if not dep:
                continue
            dep = os.path.realpath(os.path.join(entry["directory"], dep))
            key.update(f"\n{relative(dep)} {digest(dep)}".encode())
        print(key.hexdigest(), name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
