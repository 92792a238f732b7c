"""The argument layer of the benchmarks that must not import the course: solutions.cli's one-line errors
and a whole-number type, without its import of solutions (and PyTorch). bpe.py measures subword-nmt's peak
memory in a process of its own; kernel_start.py forks a warm process in which nothing of the course is
imported. The other benchmarks use solutions.cli itself."""
import argparse


class Parser(argparse.ArgumentParser):
    """As solutions.cli.Parser: an error is one line, `prog: error: message (see prog --help)`, exit
    status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def whole(low: int):
    """An argument type: a whole number >= low."""
    def parse(text: str) -> int:
        if not text.isdigit() or int(text) < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}")
        return int(text)
    return parse
