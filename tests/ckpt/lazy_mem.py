"""Workload for bench/lazy_pause.sh and lazy_faults_test.sh: holds SIZE MiB whose every page is
distinct and appends "gen G sum S t T" to OUT every PERIOD seconds, where S is the CRC-32 of the
MiB window that generation G just changed. On SIGUSR1 it appends "full gen G crc C" over the
whole buffer.
`check` mode replays the same generations and verifies every line a run wrote, so a page that
went missing or arrived in the wrong place across a move, or a generation repeated or skipped,
is caught.

  python3 lazy_mem.py run SIZE_MIB OUT [PERIOD] [--rewrite PCT] [ARG...]
  python3 lazy_mem.py check SIZE_MIB OUT [--after-rewind]

Further arguments of `run` are ignored (tests tag their processes with them). --rewrite PCT
(default 0) also rewrites that percentage of the pages per second, a run of pages
after the last one each generation (one word per page, the generation's number), as a job that
keeps writing its memory while it moves; the run's first line says how many pages a generation
rewrites, so `check` replays them too.

--after-rewind checks only what follows the last rewind, if any (a move that failed and resumed at
the source: the moved copy's lines are lost work, and may be wrong if it ran with missing pages).
"""
import array
import signal
import sys
import time
import zlib

MIB = 1 << 20
PAGE = 4096


class Memory:
    def __init__(self, mib, rewrite=0):
        self.buf = bytearray(mib * MIB)  # filled a MiB at a time: no second copy of it
        pattern = bytes(range(256)) * (MIB // 256)
        for i in range(mib):
            self.buf[i * MIB:(i + 1) * MIB] = pattern
        self.words = memoryview(self.buf).cast("Q")
        self.pages = len(self.buf) // PAGE
        self.words[0::PAGE // 8] = array.array("Q", range(1, self.pages + 1))
        self.rewrite = min(rewrite, self.pages)  # pages rewritten per generation

    def rewrite_pages(self, gen):
        """Writes gen into word 2 of the `rewrite` pages after the previous generation's."""
        left = self.rewrite
        page = ((gen - 1) * self.rewrite) % self.pages
        while left > 0:
            n = min(left, self.pages - page)
            first = page * (PAGE // 8) + 2
            self.words[first:first + n * (PAGE // 8):PAGE // 8] = array.array("Q", [gen]) * n
            left -= n
            page = 0

    def step(self, gen):
        """Changes one page chosen by gen (and the run of pages to rewrite); returns the CRC of
        the MiB around the one page."""
        self.rewrite_pages(gen)
        page = (gen * 7919) % self.pages
        self.words[page * (PAGE // 8) + 1] = gen
        lo = (page * PAGE) // MIB * MIB
        return zlib.crc32(self.buf[lo:lo + MIB])

    def full(self):
        return zlib.crc32(self.buf)


def run(mib, out, period, rewrite_pct):
    mem = Memory(mib, int(mib * MIB // PAGE * rewrite_pct / 100 * period))
    gen = 0
    full_wanted = []
    signal.signal(signal.SIGUSR1, lambda *_: full_wanted.append(1))
    with open(out, "a", buffering=1) as f:
        if mem.rewrite:
            f.write(f"rewrite {mem.rewrite} pages a generation\n")
        while True:
            gen += 1
            s = mem.step(gen)
            f.write(f"gen {gen} sum {s} t {time.time():.6f}\n")
            if full_wanted:
                full_wanted.clear()
                f.write(f"full gen {gen} crc {mem.full()}\n")
            time.sleep(period)


def check(mib, out, after_rewind=False):
    text = open(out).read().splitlines()
    rewrite = 0
    if text and text[0].startswith("rewrite "):
        rewrite = int(text.pop(0).split()[1])
    mem = Memory(mib, rewrite)
    gen = 0
    lines = fulls = 0
    rewind = None
    if after_rewind:
        # A move that failed and resumed at the source: lines from the copy that ran meanwhile
        # are lost work; the source's lines from its own last generation on must be right.
        gens = [int(l.split()[1]) for l in text if l.startswith("gen ")]
        rewind = max((i for i in range(1, len(gens)) if gens[i] <= gens[i - 1]), default=None)
    if after_rewind and rewind is not None:
        for g in range(1, gens[rewind]):
            mem.step(g)
        gen = gens[rewind] - 1
        seen = 0
        for i, l in enumerate(text):
            seen += l.startswith("gen ")
            if seen == rewind + 1:
                text = text[i:]
                break
        print(f"check: resumed at generation {gen + 1} after generation {gens[rewind - 1]}")
    for line in text:
        w = line.split()
        if w[0] == "full":
            if int(w[2]) != gen or int(w[4]) != mem.full():
                sys.exit(f"check: bad full CRC at gen {w[2]}: {line.strip()}")
            fulls += 1
            continue
        g, s = int(w[1]), int(w[3])
        if g != gen + 1:
            sys.exit(f"check: generation {g} follows {gen} (repeated or skipped)")
        gen = g
        if mem.step(gen) != s:
            sys.exit(f"check: memory differs at gen {gen}")
        lines += 1
    print(f"check: {lines} generations in order, sums match, {fulls} full-memory CRCs match")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        rest = sys.argv[4:]
        period = float(rest[0]) if rest and not rest[0].startswith("-") else 0.5
        rewrite = float(rest[rest.index("--rewrite") + 1]) if "--rewrite" in rest else 0.0
        run(int(sys.argv[2]), sys.argv[3], period, rewrite)
    else:
        check(int(sys.argv[2]), sys.argv[3], "--after-rewind" in sys.argv[4:])
