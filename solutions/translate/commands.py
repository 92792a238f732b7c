"""The command line, `python -m solutions.translate train | translate`: a bad input is one line on stderr and
exit status 2 (solutions.cli)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import resource
import sys

import sacrebleu
import torch

from solutions.cli import UsageError, number
from solutions.data import load_data
from solutions.translate.checkpoints import (
    _cpu_state,
    _from_saved,
    _tokenizer_from_text,
    _tokenizer_text,
    check_resume,
    read_checkpoint,
    save_checkpoint,
)
from solutions.translate.config import (
    CONFIG_RULES,
    PAPER_BASE,
    PAPER_SIZES,
    Config,
    budget_text,
    config_for,
    config_problems,
    paper_config,
)
from solutions.translate.data import prepare_data
from solutions.translate.inference import decoding_args, evaluate_bleu, score_test, translate_batch
from solutions.translate.loop import train


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def run_training(args) -> dict:
    """The `train` command: load, prepare, train, save, score greedy and beam on the test split. Under
    `torchrun` every process trains (solutions.distributed.init_from_env) and rank 0 alone prints, writes the
    files and scores; the other ranks return {}."""
    from solutions import distributed

    if args.threads:
        torch.set_num_threads(args.threads)
    rank, world, device = distributed.init_from_env(args.device)
    try:
        results = _run_training(args, rank, world, device)
    except BaseException:
        distributed.close(meet=False)
        raise
    distributed.close()
    return results


def default_config(device: str, size: str | None = None, world: int = 1, **overrides) -> Config:
    """The Config a `train` command starts from before its flags: the paper's with --size (its 25,000 tokens a
    step shared by the processes x accumulate, a week's budget so that the step budget stops first), else
    config_for(device).
    Example: default_config("cpu").dropout -> 0.0; default_config("cpu", "base").max_tokens
    -> 25000"""
    if size:
        overrides.setdefault("max_tokens",
                             PAPER_BASE["max_tokens"] // (world * overrides.get("accumulate", 1)))
        # a week: the step budget (100,000 or 300,000) stops first
        overrides.setdefault("minutes", 7 * 24 * 60.0)
        return paper_config(device, size, **overrides)
    return config_for(device, **overrides)


def config_from_args(args, world: int = 1, device: str = "cpu", resume: dict | None = None) -> Config:
    """The Config of a `train` command: the checkpoint's own with --resume (a change that alters the steps is
    refused by train()), the paper's with --size, else config_for(device); any Config flag given overrides it.
    With --size and no --max-tokens, the paper's 25,000 tokens per step are shared by the processes x
    accumulate.
    Example: config_from_args(build_parser().parse_args(["train", "--size", "base", "--accumulate", "2"]),
                              world=4)
             -> d_model 512, warmup 4000, max_steps 100000, max_tokens 3125 (8 batches of 3,125 a step)"""
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(Config)
                 if f.name != "device" and getattr(args, f.name, None) is not None}
    if resume is not None:
        known = {f.name for f in dataclasses.fields(Config)}
        saved = Config(**{k: v for k, v in resume["config"].items() if k in known})
        return dataclasses.replace(saved, device=device, **overrides)
    return default_config(device, args.size, world, **overrides)


def _run_training(args, rank: int, world: int, device: str) -> dict:
    """run_training on one process: the config, the data, train, then (rank 0) save, score and report."""
    say = print if rank == 0 else (lambda *a, **kw: None)
    config, resume, out = _training_config(args, world, device)
    torch.manual_seed(config.seed)
    name, splits, data = _training_data(args, config, resume, rank, world, say)
    checkpoint = out / "checkpoint.pt" if args.checkpoint_every or args.resume else None
    model, history = train(config, data, progress=not args.quiet, checkpoint=checkpoint,
                           checkpoint_every=args.checkpoint_every, resume=resume)
    if rank != 0:
        return {}
    save_checkpoint(out / "model.pt", model, data.tokenizer, config, history)
    scored, note = _score_and_write(args, config, model, data, history, splits["test"], out, world)
    results = {"data": name, **scored}
    results["peak_memory_mb"] = peak_memory_mb()
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    _print_results(name, config, history, results, note, world, out)
    return results


def _training_config(args, world: int, device: str):
    """(config, the --resume checkpoint or None, the --out folder), each refused in one line when wrong."""
    resume = read_checkpoint(args.resume, "resume", map_location=device,
                             label="--resume") if args.resume else None
    config = config_from_args(args, world, device, resume)
    problems = config_problems(config)
    if problems:
        raise UsageError("; ".join(problems))
    if resume is not None:  # before any work; train() checks it again (and the data's batches)
        check_resume(config, resume)
    out = pathlib.Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: a file, not a folder; give a folder for model.pt and the results")
    return config, resume, out


def _training_data(args, config: Config, resume, rank: int, world: int, say):
    """(corpus name, splits, PreparedData): rank 0 downloads and learns the BPE first, the others take its
    vocabulary; a resumed run keeps the checkpoint's."""
    if rank != 0:  # rank 0 downloads into the cache first; the others then read it
        torch.distributed.barrier()
    name, splits = load_data(args.data, synthetic_sizes=(args.synthetic_train, 500, 500))
    if rank == 0 and world > 1:
        torch.distributed.barrier()
    say(f"data: {name}, " + ", ".join(f"{k} {len(v[0])}" for k, v in splits.items()), flush=True)
    say(f"config: {config}"
        + (f"\n{world} processes (torchrun), {world * config.accumulate} batches of at most "
                               f"{config.max_tokens} tokens per step" if world > 1 else ""), flush=True)
    say(budget_text(config), flush=True)
    tokenizer = _tokenizer_from_text(resume["tokenizer"]["saved"]) if resume is not None else None
    if tokenizer is None and world > 1:  # rank 0 learns the BPE, the others take its vocabulary
        box = [None]
        if rank == 0:
            data = prepare_data(config, splits, progress=not args.quiet)
            box = [_tokenizer_text(data.tokenizer)]
        torch.distributed.broadcast_object_list(box, src=0)
        tokenizer = _tokenizer_from_text(box[0])
    data = prepare_data(config, splits, tokenizer=tokenizer, progress=not args.quiet and rank == 0)
    return name, splits, data


def _score_and_write(args, config: Config, model, data, history: dict, test, out: pathlib.Path, world: int):
    """Decode and score the test split (greedy and beam), write the translations; with an average, score the
    weights not kept too. Returns (results.json's fields after "data", score_test's note)."""
    test_de, test_en = test
    if args.max_test:
        test_de, test_en = test_de[:args.max_test], test_en[:args.max_test]
    # decoding within the training's own time (--decode-seconds): a one-minute run is not followed by minutes
    # of decoding an undertrained model to the length limit
    budget = history["seconds"] if args.decode_seconds is None else (args.decode_seconds or None)
    scored = score_test(model, data.tokenizer, test_de, test_en, config, seconds=budget,
                        progress=not args.quiet)
    results = {"config": dataclasses.asdict(config), "processes": world, "epochs": history["epochs"],
               "steps": history["steps"], "train_seconds": history["seconds"],
               "target_tokens_per_s": history["mean_tokens_per_s"], "val_loss": history["val_loss"],
               "test_sentences": scored["sentences"], "test_sentences_available": len(test_de)}
    for method in ("greedy", "beam"):
        results[f"{method}_bleu"], results[f"{method}_seconds"] = (scored[method]["bleu"],
                                                                   scored[method]["seconds"])
        (out / f"test.{method}.en").write_text("\n".join(scored[method]["hypotheses"]) + "\n",
                                               encoding="utf-8")
    if "last_state" in history:  # averaged: the weights not kept too, to measure what the average gave
        results["kept"] = history["kept"]
        results["val_loss_averaged"] = history["val_loss_averaged"]
        other = "last_state" if history["kept"] == "average" else "averaged_state"
        kept = _cpu_state(model)
        model.load_state_dict(history[other])
        src = test_de[:scored["sentences"]]
        results["greedy_bleu_last_alone" if other == "last_state"
                else "greedy_bleu_averaged"] = evaluate_bleu(
            model, data.tokenizer, src, scored["references"], "greedy", **decoding_args(config))
        model.load_state_dict(kept)
    return results, scored["note"]


def _print_results(name: str, config: Config, history: dict, results: dict, note: str, world: int,
                   out: pathlib.Path) -> None:
    """The run's summary on stdout: steps and speed, test BLEU, what the average gave, memory and the file."""
    print(f"\ndata {name}: {history['epochs']:.2f} epochs, {history['steps']} steps in "
          f"{history['seconds']:.0f} s, {history['mean_tokens_per_s']:.0f} target tokens/s"
          + (f" ({world} processes)" if world > 1 else ""))
    print(f"test BLEU (sacreBLEU, {results['test_sentences']} sentences): greedy "
          f"{results['greedy_bleu']:.2f} ({results['greedy_seconds']:.0f} s), beam {config.beam_size} "
          f"{results['beam_bleu']:.2f} ({results['beam_seconds']:.0f} s)")
    if note:
        print(note + " (--decode-seconds 0: no limit)")
    if "greedy_bleu_last_alone" in results:
        print(f"the average of the last {history['averaged']} snapshots against the last weights alone: "
              f"greedy {results['greedy_bleu']:.2f} against {results['greedy_bleu_last_alone']:.2f}")
    elif "greedy_bleu_averaged" in results:
        print("the last weights (kept: they validate better) against the average of the last "
              f"{history['averaged']} snapshots: greedy {results['greedy_bleu']:.2f} against "
              f"{results['greedy_bleu_averaged']:.2f}")
    print(f"peak memory {results['peak_memory_mb']:.0f} MB; checkpoint {out / 'model.pt'}")


def _read_lines(path: str, what: str) -> list[str]:
    """The lines of a UTF-8 text file (standard input for "-"), or UsageError saying why not."""
    if path == "-":
        return sys.stdin.read().splitlines()
    file = pathlib.Path(path)
    if not file.is_file():
        raise UsageError(f"{what} {path}: " + ("a folder, not a file" if file.is_dir() else "no such file"))
    try:
        return file.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise UsageError(f"{what} {path}: not UTF-8 text ({e.reason} at byte {e.start}); give a text file, "
                         "one sentence a line") from None


def run_translate(args) -> list[str]:
    """The `translate` command: the sentences (arguments, --input FILE, or standard input) translated by the
    model that `train` saved (OUT/model.pt holds the weights, the config and the tokenizer), one line each on
    stdout. A blank line stays blank. --bleu REFERENCES: sacreBLEU's score of them on stderr, so that stdout
    stays one translation a line (`> out.en` keeps only translations)."""
    from solutions.cli import check_device

    check_device(args.device)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.sentences and args.input:
        raise UsageError("give the sentences as arguments or with --input FILE, not both")
    if args.sentences:
        lines = [" ".join(s.split()) for s in args.sentences]  # one argument, one line: no newline inside
    elif args.input:
        lines = _read_lines(args.input, "--input")
    elif sys.stdin is None or sys.stdin.isatty():
        raise UsageError("no sentences to translate: give them as arguments, with --input FILE, or on "
                         "standard input (echo 'Ein Hund läuft.' | python -m solutions.translate translate "
                         "--model ...)")
    else:
        lines = sys.stdin.read().splitlines()
    references = _read_lines(args.bleu, "--bleu") if args.bleu else None
    if references is not None and len(references) != len(lines):
        raise UsageError(f"--bleu {args.bleu}: {len(references)} reference lines for {len(lines)} sentences; "
                         "give one reference a sentence, in the same order")
    model, tokenizer, config = _from_saved(read_checkpoint(args.model, "model", device, label="--model"),
                                           device)
    beam_size = config.beam_size if args.beam_size is None else args.beam_size
    alpha = config.alpha if args.alpha is None else args.alpha
    method = "greedy" if beam_size == 1 else "beam"
    todo = [i for i, line in enumerate(lines) if line.strip()]
    hyps = translate_batch(model, tokenizer, [lines[i] for i in todo], method, beam_size, alpha,
                           args.batch_tokens or config.eval_batch_tokens,
                           max_output=(config.max_output_ratio, config.max_output_extra))
    out = [""] * len(lines)
    for i, hyp in zip(todo, hyps):
        out[i] = hyp
    if out:
        sys.stdout.write("\n".join(out) + "\n")
        sys.stdout.flush()
    if references is not None:
        metric = sacrebleu.metrics.BLEU()
        score = metric.corpus_score(out, [references])
        print(f"sacreBLEU ({metric.get_signature()}): {score}", file=sys.stderr, flush=True)
    return out


PROG = "python -m solutions.translate"


def build_parser(argv=None) -> argparse.ArgumentParser:
    """The command line: `train` and its flags (one per Config field, its default that of the config the run
    will use: config_for(--device), or paper_config with --size), and `translate`. argv: the arguments the
    parser will read (their --device, --size and --accumulate choose the defaults that --help states); None:
    sys.argv."""
    from solutions.cli import Parser, device_name, pre_parse

    early = pre_parse(argv, "--device", "--size", "--accumulate")
    device = early.get("device", "")
    try:
        device = device_name(device)
    except argparse.ArgumentTypeError:  # none given, or one the parser will refuse
        device = "cuda" if torch.cuda.is_available() else "cpu"
    size = early.get("size") if early.get("size") in PAPER_SIZES else None
    accumulate = int(early["accumulate"]) if early.get("accumulate",
                                                       "").isdigit() and int(early["accumulate"]) else 1
    defaults = default_config(device, size, **({"accumulate": accumulate} if accumulate != 1 else {}))
    source = (f"paper_config({device!r}, {size!r}), max_tokens {defaults.max_tokens} (25,000 / accumulate), "
              "minutes a week" if size else f"config_for({device!r})")

    import solutions.translate as package  # its docstring's first paragraph describes the command

    parser = Parser(prog=PROG, description=package.__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="{train,translate}")
    _add_train_command(commands, device, defaults, source)
    _add_translate_command(commands, device)
    return parser


def _add_train_command(commands, device: str, defaults: Config, source: str) -> None:
    """`train`'s flags: the run's own, then one per Config field with `defaults`' values (solutions.cli)."""
    from solutions.cli import add_config_flags, device_name

    p = commands.add_parser("train", help="train, save a checkpoint, print test BLEU (also under torchrun)",
                            description="Train a model, save OUT/model.pt, score the test split.")
    p.add_argument("--data", default="multi30k",
                   help='"multi30k", "synthetic", "wmt14" (de-en), "wmt14-en-de" (the paper\'s direction), '
                        'or a Multi30k mirror (URL or folder) (default: multi30k)')
    p.add_argument("--out", default="runs/translate",
                   help="folder for model.pt, results.json, test translations (default: runs/translate)")
    p.add_argument("--device", type=device_name, default=None,
                   help=f"cpu, cuda or cuda:N; picks config_for(device) (default: {device}: cuda when there "
                        "is one)")
    p.add_argument("--size", choices=sorted(PAPER_SIZES), default=None,
                   help="the paper's base or big model with its optimizer, warmup 4000 and step budget "
                        "(paper_config); max_tokens defaults to 25,000 / (processes x accumulate) (default: "
                        "none, the device's own model)")
    p.add_argument("--checkpoint-every", type=number(int, 0), default=0, metavar="N",
                   help="write OUT/checkpoint.pt every N steps and when the run stops (0: none), for "
                        "--resume (default: 0)")
    p.add_argument("--resume", default=None, metavar="CHECKPOINT",
                   help="continue from a checkpoint.pt (its settings; --minutes, --steps, --max-epochs may "
                        "change) (default: none)")
    p.add_argument("--synthetic-train", type=number(int, 1), default=20000, metavar="N",
                   help="training pairs of the synthetic corpus (default: 20000)")
    p.add_argument("--max-test", type=number(int, 0), default=0, metavar="N",
                   help="score only the first N test sentences (0: all) (default: 0)")
    p.add_argument("--decode-seconds", type=number(float, 0), default=None, metavar="S",
                   help="decode the test split (greedy and beam) within about S seconds: the first sentences "
                        "that fit, said when not all (0: no limit) (default: the training's own time)")
    p.add_argument("--threads", type=number(int, 0), default=0, metavar="N",
                   help="CPU threads for PyTorch (0: its default, one per core; 1 is faster on a busy "
                        "machine) (default: 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (default: false)")
    add_config_flags(p, defaults, CONFIG_RULES, skip=("device",), aliases={"max_steps": ["--steps"]},
                     source=source)


def _add_translate_command(commands, device: str) -> None:
    """`translate`'s arguments: the sentences or a file, the model, the decoding."""
    from solutions.cli import device_name

    t = commands.add_parser("translate", help="translate with a trained model.pt, one line a sentence",
                            description="Translate sentences (arguments, --input FILE, or standard input) "
                                        "with the model that train saved, one translation a line on stdout.")
    t.add_argument("sentences", nargs="*", metavar="SENTENCE",
                   help="sentences to translate, one argument each")
    t.add_argument("--model", required=True, metavar="MODEL_PT",
                   help="OUT/model.pt (or OUT/checkpoint.pt) written by train: weights, config and tokenizer")
    t.add_argument("--input", metavar="FILE", help="a file of sentences, one a line ('-': standard input)")
    t.add_argument("--beam-size", type=number(int, 1), default=None, metavar="K",
                   help="beam search with K hypotheses; 1: greedy decoding (default: the model's config, 4)")
    t.add_argument("--alpha", type=number(float, 0), default=None,
                   help="beam search's length penalty (default: the model's config: 1.0 for the CPU model, "
                        "0.6 for the GPU's)")
    t.add_argument("--bleu", metavar="REFERENCE_FILE",
                   help="score the translations against these references (one a line) with sacreBLEU; the "
                        "score line goes to stderr, so that stdout stays one translation a line")
    t.add_argument("--device", type=device_name, default=None,
                   help=f"cpu, cuda or cuda:N (default: {device}: cuda when there is one)")
    t.add_argument("--batch-tokens", type=number(int, 1), default=None, metavar="N",
                   help="source tokens per decoding batch (default: the model's config)")


def main(argv=None):
    """The command line; a bad input is one line on stderr and exit status 2 (solutions.cli)."""
    from solutions import cli

    def command(argv):
        args = build_parser(argv).parse_args(argv)
        if args.command == "translate":
            return run_translate(args)
        cli.check_device(args.device)
        return run_training(args)

    return cli.run(PROG, command, argv)


if __name__ == "__main__":
    main()
