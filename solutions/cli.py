"""The one argument layer of the course's command lines (`python -m solutions.translate`, `python -m
solutions.experiments`): a bad input is one line on stderr that says what was wrong and what to do, exit
status 2 (argparse's convention), never a traceback.

- `Parser`: argparse's parser whose errors are one line (argparse prints the usage first).
- `boolean`, `number`, `device_name`: argument types that refuse what they cannot read ("--norm-first maybe",
  "--minutes -1", "--device tpu") instead of guessing.
- `add_config_flags`: one flag per field of a configuration dataclass, its help the comment beside the field
  and its default the value of the configuration the run will use (`config_for(device)`), so --help states the
  truth.
- `UsageError`: raised by the library where the input is wrong (a file that is no checkpoint of this course, a
  resume with other settings); `run` turns it, and a failed download, into the one line.

It does not check what only the run can know (a GPU's memory, a corpus's content): those fail where they
happen.

Example: python -m solutions.translate train --minutes -1
         -> "python -m solutions.translate train: error: argument --minutes: must be > 0, got -1
             (see ... --help)"
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import math
import re
import sys


class UsageError(ValueError):
    """A bad input, said in one line: what was wrong and what to do. A ValueError, so that library callers who
    catch ValueError keep working."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, but an error is one line (no usage block):
    `prog: error: message (see prog --help)`."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def fail(prog: str, message: str) -> None:
    """Print `prog: error: message` on stderr and exit with status 2 (a bad input, as argparse does)."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def run(prog: str, main, argv=None):
    """main(argv), with UsageError and a failed download (solutions.data.DataDownloadError) turned into one
    line and exit status 2. Anything else is a bug and keeps its traceback."""
    from solutions.data import DataDownloadError

    try:
        return main(argv)
    except (UsageError, DataDownloadError) as e:
        fail(prog, " ".join(str(e).split()))


TRUE, FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def boolean(text: str) -> bool:
    """A strict boolean: true/yes/1/on or false/no/0/off (any case); anything else is an error.
    Example: boolean("False") -> False; boolean("maybe") -> error "expected true or false, got 'maybe'" """
    if text.lower() in TRUE:
        return True
    if text.lower() in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false (or yes/no, 1/0), got {text!r}")


def number(kind, low=None, high=None, *, low_open: bool = False, high_open: bool = False):
    """An argument type: `kind` (int or float) within [low, high] (an open end with low_open / high_open).
    Example: number(float, 0, low_open=True)("-1") -> error "must be > 0, got -1" """
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if kind is float and not math.isfinite(value):  # nan, inf: no limit or size is meant by them
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if low is not None and (value <= low if low_open else value < low):
            raise argparse.ArgumentTypeError(f"must be {'>' if low_open else '>='} {low:g}, got {text}")
        if high is not None and (value >= high if high_open else value > high):
            raise argparse.ArgumentTypeError(f"must be {'<' if high_open else '<='} {high:g}, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def device_name(text: str) -> str:
    """An argument type: "cpu", "cuda" or "cuda:N". Whether a GPU is there is checked by `check_device`.
    Example: device_name("tpu") -> error "expected cpu or cuda (cuda:N for the N-th GPU), got 'tpu'" """
    if re.fullmatch(r"cpu|cuda(:\d+)?", text):
        return text
    raise argparse.ArgumentTypeError(f"expected cpu or cuda (cuda:N for the N-th GPU), got {text!r}")


def check_device(device: str | None) -> None:
    """Raise UsageError when `device` names a GPU that this PyTorch cannot use."""
    import torch

    if device is None or not device.startswith("cuda"):
        return
    if not torch.cuda.is_available():
        build = "a CPU-only build of PyTorch" if torch.version.cuda is None else "no GPU or driver visible"
        raise UsageError(f"--device {device}: this PyTorch cannot use a GPU ({build}); "
                         "give --device cpu, or leave --device out to use a GPU only when there is one")
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise UsageError(f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s), "
                         f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")


def pre_parse(argv, *flags: str) -> dict:
    """The values of a few flags, read before the parser is built (the defaults of the others depend on them).
    Unknown or malformed values are left for the real parser to refuse.
    Example: pre_parse(["train", "--device",
    "cuda"], "--device") -> {"device": "cuda"}"""
    found, argv = {}, list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(argv):
        for flag in flags:
            key = flag.lstrip("-").replace("-", "_")
            if arg == flag and i + 1 < len(argv):
                found[key] = argv[i + 1]
            elif arg.startswith(flag + "="):
                found[key] = arg.split("=", 1)[1]
    return found


def field_comments(cls) -> dict[str, str]:
    """The comment beside each field of a dataclass (and its continuation lines), read from the source: the
    one
    place the reason for each default is written.
    Example: field_comments(Config)["d_model"] -> "half the paper's
    width: ..." """
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    names = {f.name for f in dataclasses.fields(cls)}
    comments: dict[str, str] = {}
    current, indent = None, 0
    for line in lines:
        field = re.match(r"(\s+)(\w+)\s*:[^=]+=[^#]*(?:#\s*(.*))?$", line)
        if field and field.group(2) in names:
            current, indent = field.group(2), len(field.group(1))
            comments[current] = (field.group(3) or "").strip()
        elif current and re.match(r"\s+#", line) and len(line) - len(line.lstrip()) > indent:
            # a continuation
            comments[current] += " " + line.strip().lstrip("#").strip()
        else:  # code, or a section's own comment ("# data") at the fields' indentation
            current = None
    return comments


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def add_config_flags(parser: argparse.ArgumentParser, config, rules: dict, skip=(), aliases=None,
                     source: str = "") -> None:
    """One flag per field of the dataclass instance `config` (--d-model for d_model), default None (so that
    the run knows which were given) and help "... (default: V)" where V is config's value: `config` must be
    the configuration the run will use. rules[field]: an argument type (number(...), boolean) or a tuple of
    choices; a field without one takes its default's type. aliases: {field: [extra flag names]}. source: where
    the defaults come from, said once in the group's title."""
    comments = field_comments(type(config))
    group = parser.add_argument_group("settings (one per Config field; defaults: "
                                      f"{source or type(config).__name__})")
    for f in dataclasses.fields(config):
        if f.name in skip:
            continue
        value = getattr(config, f.name)
        rule = rules.get(f.name)
        kind = {}
        if isinstance(rule, tuple):
            kind = dict(choices=rule)
        elif rule is not None:
            kind = dict(type=rule)
        elif isinstance(value, bool):
            kind = dict(type=boolean)
        else:
            kind = dict(type=type(value))
        metavar = f.name.upper()
        if kind.get("type") is boolean:
            metavar = "{true,false}"
        elif "choices" in kind:
            metavar = "{" + ",".join(kind["choices"]) + "}"
        help_text = comments.get(f.name, "")
        # the comment explains the class's default
        if f.default is not dataclasses.MISSING and f.default != value:
            help_text += (f" (so says Config, whose own default is {f.default!r}; "
                          f"{source or 'this run'} sets another)")
        help_text = help_text.replace("%", "%%")
        group.add_argument(flag_name(f.name), *((aliases or {}).get(f.name, [])), dest=f.name, default=None,
                           metavar=metavar, help=f"{help_text} (default: {value!r})".strip(), **kind)


def help_defaults(help_text: str) -> dict[str, str]:
    """{flag: what its help says after "default: "} for every option of an argparse help text, so a test can
    compare what --help states with the configuration.
    Example: {"--d-model": "256", "--norm-first": "True", ...}"""
    blocks, out = [], {}
    for line in help_text.splitlines():
        if re.match(r"\s{1,8}--?\w", line):
            blocks.append(line)
        elif blocks and line.startswith(" ") and line.strip():
            blocks[-1] += " " + line.strip()
        else:
            blocks.append("")
    for block in blocks:
        flag = re.match(r"\s*(?:-\w, )?(--[\w-]+)", block)
        found = re.findall(r"\(default: ([^()]*(?:\([^()]*\)[^()]*)*)\)", block)
        if flag and found:
            out[flag.group(1)] = found[-1]
    return out
