"""Beam size and length penalty for a trained model, chosen on the validation set, never on the test set.

    python benchmarks/tune_decoding.py runs/cpu15/model.pt --data ../shared/data/multi30k \
        [--beams 1 4 6] [--alphas 0.6 1.0] [--json results/tune.json]

Decodes Multi30k's validation set (1,014 sentences) with every beam size and length penalty asked for
(beam 1 is greedy decoding, which has no penalty), prints each one's sacreBLEU, then scores the test set
(test_2016_flickr) once, with the setting that was best on validation, beside greedy and the model's own
setting (its config's beam_size and alpha), so that the gain the tuning gives on unseen data is what it
prints. The decoding is the lesson's own (solutions.translate.evaluate_bleu).
"""
from __future__ import annotations

import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from solutions.cli import Parser, number  # noqa: E402
from solutions.data import load_data  # noqa: E402
from solutions.translate import decoding_args, evaluate_bleu, load_checkpoint  # noqa: E402


def score(model, tokenizer, config, src, ref, beam: int, alpha: float) -> tuple[float, float]:
    """(sacreBLEU, seconds) of decoding src with beam `beam` (1: greedy) and length penalty `alpha`."""
    args = {**decoding_args(config), "beam_size": beam, "alpha": alpha}
    t0 = time.time()
    bleu = evaluate_bleu(model, tokenizer, src, ref, "greedy" if beam == 1 else "beam", **args)
    return bleu, time.time() - t0


def main(argv=None) -> None:
    ap = Parser(prog="python benchmarks/tune_decoding.py", description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", help="a model.pt that train wrote")
    ap.add_argument("--data", default="multi30k",
                    help="multi30k, or a Multi30k mirror (URL or folder) (default: multi30k)")
    ap.add_argument("--beams", type=number(int, 1), nargs="+", default=[1, 4, 6],
                    help="beam sizes (1: greedy; default: 1 4 6)")
    ap.add_argument("--alphas", type=number(float, 0), nargs="+", default=[0.6, 1.0],
                    help="length penalties (default: 0.6 1.0)")
    ap.add_argument("--json", help="also write every score to this file")
    args = ap.parse_args(argv)
    model, tokenizer, config = load_checkpoint(args.checkpoint)
    _, splits = load_data(args.data)
    (val_de, val_en), (test_de, test_en) = splits["val"], splits["test"]
    results = {}
    for beam in args.beams:
        for alpha in ([0.0] if beam == 1 else args.alphas):
            results[beam, alpha] = score(model, tokenizer, config, val_de, val_en, beam, alpha)
            print(f"validation  beam {beam} alpha {alpha:.1f}: {results[beam, alpha][0]:.2f} "
                  f"({results[beam, alpha][1]:.0f} s)", flush=True)
    best = max(results, key=lambda k: results[k][0])
    print(f"best on validation: beam {best[0]}, alpha {best[1]:.1f}")
    test = {}
    for name, (beam, alpha) in {"greedy": (1, 0.0), "the model's setting": (config.beam_size, config.alpha),
                                "best on validation": best}.items():
        bleu, seconds = score(model, tokenizer, config, test_de, test_en, beam, alpha)
        test[name] = {"beam": beam, "alpha": alpha, "bleu": bleu}
        print(f"test  {name:<20} beam {beam} alpha {alpha:.1f}: {bleu:.2f} ({seconds:.0f} s)", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "checkpoint": args.checkpoint, "seed": config.seed,
            "validation": [{"beam": b, "alpha": a, "bleu": r[0]} for (b, a), r in results.items()],
            "best_on_validation": {"beam": best[0], "alpha": best[1]}, "test": test}, indent=1) + "\n")


if __name__ == "__main__":
    main()
