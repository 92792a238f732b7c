"""The submission reader on its own (autograder/submission.py): what `cell_facts` reads of a code cell without
running it, and the graded cells a lesson expects. Nothing is graded here."""
import pytest

from autograder.submission import MAX_FACTS, cell_facts, expected_cells, lessons


@pytest.mark.parametrize("source, defines", [
    ("def softmax(x):\n    y = 1\n    return y", ["softmax"]),
    ("class Attention:\n    pass\nA, (b, c) = 1, (2, 3)\nd: int = 4\ne += 1",
     ["Attention", "A", "b", "c", "d", "e"]),
    ("import torch.nn as nn\nimport numpy.linalg\nfrom math import *", ["nn", "numpy"]),
    ("if True:\n    f = 1\nelse:\n    g = 2\ntry:\n    h = 3\nexcept Exception:\n    i = 4",
     ["f", "g", "h", "i"]),
    ("%time x = 1\n!pip install y\nz = 2", ["z"]),
    ("%%bash\nx=1", []),
    ("def broken(:\nsoftmax = 1\nclass K:", ["broken", "softmax", "K"]),  # read by its lines
])
def test_the_names_a_cell_binds_at_its_top_level(source, defines):
    assert cell_facts(source)["defines"] == defines


@pytest.mark.parametrize("source, reached", [
    ("from solutions.masks import padding_mask as pm", [["solutions.masks.padding_mask", ["pm"]]]),
    ("import solutions as s\nmask = s.masks.causal_mask",
     [["solutions", ["s"]], ["solutions.masks.causal_mask", ["mask"]]]),
    ("from solutions import *", [["solutions.*", ["*"]]]),
    ("def softmax(x):\n    return solutions.softmax(x)", [["solutions.softmax", ["softmax"]]]),
])
def test_what_a_cell_reaches_in_solutions_and_for_which_names(source, reached):
    assert cell_facts(source)["solutions"] == reached


def test_the_words_of_its_strings_only_where_they_name_solutions():
    facts = cell_facts('exec(open("../solutions/masks.py").read())')
    assert "solutions" in facts["words"] and "masks" in facts["words"]
    assert cell_facts('print("solutions are below")  # solutions')["words"] == ["are", "below", "solutions"]
    assert "words" not in cell_facts('x = "masks"')
    assert cell_facts('x = "solutions"')["words"] == ["solutions"]
    assert cell_facts('y = "masks" # solutions')["words"] == []  # named only outside a string


def test_a_cell_that_does_not_parse_is_still_read_for_solutions():
    facts = cell_facts("from solutions.masks import (padding_mask as pm,\n")
    assert facts["solutions"] == [["solutions.masks", []], ["solutions.masks.padding_mask", ["pm"]]]


def test_the_facts_of_one_cell_are_bounded():
    source = "\n".join(f"name_{i} = {i}" for i in range(3 * MAX_FACTS))
    assert len(cell_facts(source)["defines"]) == MAX_FACTS


def test_a_lessons_expected_cells_are_its_check_cells_in_order_with_their_points():
    stem, _, checks = lessons()[0]
    expected = expected_cells(stem)
    assert [gid for gid, _, _ in expected] == checks
    assert all(name == gid[len("check_"):] and points > 0 for gid, name, points in expected), expected
    assert expected_cells(None) == [] and expected_cells("no_such_lesson") == []
