"""pytest at the repository's root: what nbval (--nbval-lax, in pyproject.toml) does not collect under lessons/.
Lessons 14 and 15 train a model for minutes; tests/test_translate_notebook.py and tests/test_experiments_notebook.py
run them with small parameters (papermill) and check what their prose says."""
collect_ignore = ["lessons/14_translate.ipynb", "lessons/15_experiments.ipynb"]
