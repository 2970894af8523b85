"""A CPython workload for the checkpoint tests: appends "line N" (N = 1, 2, ...) to PATH, one line
every --every-ms, through one file object opened once and kept open for the whole run ("-" writes
to stdout). A restarted interpreter would start again at line 1; a restored one continues.

Usage: python3 seq_writer.py PATH [--every-ms N]
"""
import sys
import time


def main():
    path = sys.argv[1]
    every_s = 0.01
    if len(sys.argv) == 4 and sys.argv[2] == "--every-ms":
        every_s = int(sys.argv[3]) / 1000.0
    out = sys.stdout if path == "-" else open(path, "a", buffering=1)
    n = 0
    while True:
        n += 1
        out.write("line %d\n" % n)
        out.flush()
        time.sleep(every_s)


main()
