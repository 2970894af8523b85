"""The reading end of the pipe test: reads one number a line from stdin, checks that each is
one more than the last, and prints "got N" for each. A gap or repeat prints "GAP expected X got Y"
and exits 4; the end of its input prints "EOF" and exits 5. It reads slower than `seq` writes, so
the pipe between them is full whenever the tree is checkpointed.

Usage: seq 1 1000000000 | python3 pipe_consumer.py
"""
import sys
import time


def main():
    expected = 1
    for line in sys.stdin:
        n = int(line)
        if n != expected:
            print("GAP expected %d got %d" % (expected, n), flush=True)
            sys.exit(4)
        print("got %d" % n, flush=True)
        expected += 1
        time.sleep(0.002)
    print("EOF", flush=True)
    sys.exit(5)


main()
