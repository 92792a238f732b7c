"""BPE: solutions.learn_bpe / apply_bpe against subword-nmt, measured in one run.

    python benchmarks/bpe.py [--merges 10000] [--data /path/to/multi30k]

Learns merges on Multi30k train, German and English together (from the local mirror when present,
else the synthetic corpus), checks that both give identical merges, then segments every word of the
corpus with both. Each measurement runs in its own process, so its peak memory (the operating system's
ru_maxrss) is its own. Prints a table and the ratios ours / subword-nmt (time: lower is better).
"""
from __future__ import annotations

import argparse
import gzip
import io
import json
import pathlib
import resource
import subprocess
import sys
import time

from _args import Parser, whole  # not solutions.cli: see _args.py

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "multi30k"


def corpus(data: str) -> tuple[list[str], str]:
    folder = pathlib.Path(data)
    if (folder / "train.de.gz").exists():
        lines = []
        for name in ("train.de.gz", "train.en.gz"):
            with gzip.open(folder / name, "rt", encoding="utf-8") as f:
                lines += f.read().splitlines()
        return lines, f"Multi30k train de+en ({len(lines)} lines, {folder})"
    sys.path.insert(0, str(ROOT))
    from solutions.data import synthetic_corpus
    pairs = synthetic_corpus(29000, seed=0)
    lines = [de for de, _ in pairs] + [en for _, en in pairs]
    return lines, f"synthetic corpus ({len(lines)} lines; no Multi30k at {folder})"


def child(impl: str, task: str, data: str, merges: int, codes: str | None) -> dict:
    lines, _ = corpus(data)
    words = [w for line in lines for w in line.strip("\r\n ").split(" ") if w]
    if impl == "ours":
        sys.path.insert(0, str(ROOT))
        from solutions import apply_bpe, learn_bpe
        if task == "learn":
            start = time.perf_counter()
            result = learn_bpe(lines, merges)
            seconds = time.perf_counter() - start
            out = [list(m) for m in result]
        else:
            learned = [tuple(m) for m in json.loads(pathlib.Path(codes).read_text())]
            start = time.perf_counter()
            cache: dict = {}
            out = 0
            for w in words:  # the same caching as subword-nmt's BPE: each distinct word once
                if w not in cache:
                    cache[w] = apply_bpe(w, learned)
                out += len(cache[w])
            seconds = time.perf_counter() - start
    else:
        from subword_nmt.apply_bpe import BPE
        from subword_nmt.learn_bpe import learn_bpe as snmt_learn
        if task == "learn":
            text = io.StringIO("\n".join(lines) + "\n")
            buf = io.StringIO()
            import contextlib
            start = time.perf_counter()
            with contextlib.redirect_stderr(io.StringIO()):
                snmt_learn(text, buf, merges)
            seconds = time.perf_counter() - start
            out = [line.split(" ") for line in buf.getvalue().splitlines()[1:]]
        else:
            learned = json.loads(pathlib.Path(codes).read_text())
            bpe = BPE(io.StringIO("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in learned)))
            start = time.perf_counter()
            out = sum(len(bpe.segment_tokens([w])) for w in words)
            seconds = time.perf_counter() - start
    return {"seconds": seconds, "result": out,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def measure(impl, task, data, merges, codes=None) -> dict:
    cmd = [sys.executable, __file__, "--child", impl, task, "--data", data, "--merges", str(merges)]
    if codes:
        cmd += ["--codes", codes]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def main() -> None:
    p = Parser(prog="python benchmarks/bpe.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--merges", type=whole(1), default=10000, help="merges to learn (default: 10000)")
    p.add_argument("--data", default=str(DEFAULT_DATA),
                   help=f"a Multi30k folder (default: {DEFAULT_DATA}; the synthetic corpus when it is "
                   "not there)")
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)  # one timed run, in a process of its own
    p.add_argument("--codes", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1], a.data, a.merges, a.codes)))
        return
    _, description = corpus(a.data)
    print(f"corpus: {description}; {a.merges} merges")
    ours, theirs = measure("ours", "learn", a.data, a.merges), measure("subword-nmt", "learn", a.data,
                                                                       a.merges)
    same = [tuple(m) for m in ours["result"]] == [tuple(m) for m in theirs["result"]]
    codes = pathlib.Path("/tmp") / f"bpe-bench-{a.merges}.json"
    codes.write_text(json.dumps(ours["result"]))
    ours_apply, theirs_apply = measure("ours", "apply", a.data, a.merges, str(codes)), \
        measure("subword-nmt", "apply", a.data, a.merges, str(codes))
    print(f"{'task':28s} {'ours s':>9s} {'subword-nmt s':>14s} {'ratio':>7s} {'ours MB':>8s} {'snmt MB':>8s}")
    for task, o, t in (("learn_bpe", ours, theirs), ("apply_bpe (every word)", ours_apply, theirs_apply)):
        print(f"{task:28s} {o['seconds']:9.2f} {t['seconds']:14.2f} {o['seconds'] / t['seconds']:7.2f} "
              f"{o['peak_mb']:8.0f} {t['peak_mb']:8.0f}")
    print(f"identical merges: {same} ({len(ours['result'])} vs {len(theirs['result'])}); "
          f"subwords in the corpus: ours {ours_apply['result']}, subword-nmt {theirs_apply['result']}")
    print(f"RATIO learn_bpe time ours/subword-nmt = {ours['seconds'] / theirs['seconds']:.2f} (target <= "
          "1.0)")


if __name__ == "__main__":
    main()
