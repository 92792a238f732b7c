"""`python -m solutions.translate train | translate ...`: the command line of solutions.translate.commands."""
from solutions.translate.commands import main

main()
