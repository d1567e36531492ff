"""``python -m fabricsim`` runs the command-line interface (the same as the ``fabricsim`` command)."""
from fabricsim.cli import main

if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess in tests/test_packaging.py
    main(prog_name="fabricsim")
