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

The debug preset builds in unity mode (CMAKE_UNITY_BUILD: a target's sources compiled a batch at a
time), where compile_commands.json names the batches, not the files. A file compiled in a batch
gets the command it would have on its own (the batch's, with the file's own object and source:
the same flags, so the same key as in a build without batches), and the files it reads from the
compiler's own list for that command (-M). With --commands DIR the commands used are written to
DIR/compile_commands.json, one per file, for clang-tidy -p.

Usage: tidy_keys.py [--commands DIR] SOURCE_DIR BUILD_DIR FILE...
"""
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

UNITY_INCLUDE = re.compile(r'^#include "(.*)"$')


def per_file_entries(src, build, entries):
    """The entries of compile_commands.json with each unity batch replaced by one entry per file
    it includes: the batch's command with the file's own object (as CMake names it without
    batches: CMakeFiles/TARGET.dir/PATH.o, PATH under the target's source directory, ".." as
    "__") and source. own_object says whether the file's dependencies are in ninja's log."""
    for e in entries:
        unity = os.path.join(e["directory"], e["file"])
        match = re.search(r"^(.*)/CMakeFiles/([^/]+\.dir)/Unity/unity_\w+\.cxx$", unity)
        if not match:
            yield dict(e, own_object=True)
            continue
        scope, target = match.groups()  # the target's build directory, TARGET.dir
        source_dir = os.path.join(src, os.path.relpath(scope, build))
        with open(unity) as f:
            sources = [m.group(1) for m in map(UNITY_INCLUDE.match, f.read().splitlines()) if m]
        argv = shlex.split(e["command"])
        for source in sources:
            rel = os.path.relpath(source, source_dir).replace("..", "__")
            own = list(argv)
            own[own.index("-c") + 1] = source
            own[own.index("-o") + 1] = os.path.relpath(
                os.path.join(scope, "CMakeFiles", target, rel + ".o"), e["directory"])
            yield {"directory": e["directory"], "file": source, "own_object": False,
                   "command": " ".join(shlex.quote(a) for a in own)}


def compiler_deps(entry, argv):
    """The files the compiler reads for ENTRY's command, as ninja -t deps would list them."""
    args = list(argv)
    i = args.index("-o")
    del args[i:i + 2]
    with tempfile.NamedTemporaryFile(suffix=".d") as d:
        run = subprocess.run(args + ["-M", "-MF", d.name], cwd=entry["directory"],
                             capture_output=True, text=True)
        if run.returncode != 0:
            return None
        text = open(d.name).read().replace("\\\n", " ")
    return text.split(":", 1)[1].split() if ":" in text else None


def main():
    args = sys.argv[1:]
    commands_dir = None
    if args and args[0] == "--commands":
        commands_dir, args = args[1], args[2:]
    src = os.path.realpath(args[0])
    build = os.path.realpath(args[1])
    files = args[2:]
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True,
                             text=True).stdout
    with open(os.path.join(src, ".clang-tidy"), "rb") as f:
        profile = f.read()
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    commands = {os.path.realpath(os.path.join(e["directory"], e["file"])): e
                for e in per_file_entries(src, build, entries)}
    if commands_dir:
        with open(os.path.join(commands_dir, "compile_commands.json"), "w") as f:
            json.dump([{k: e[k] for k in ("directory", "file", "command")}
                       for e in commands.values()], f, indent=1)
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
        if entry["own_object"]:
            deps = subprocess.run(["ninja", "-C", build, "-t", "deps", output],
                                  capture_output=True, text=True)
            lines = deps.stdout.splitlines()
            if deps.returncode != 0 or not lines or "(VALID)" not in lines[0]:
                print("-", name)
                continue
        else:
            read = compiler_deps(entry, argv)
            if not read:
                print("-", name)
                continue
            lines = ["(from the compiler)"] + read
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
