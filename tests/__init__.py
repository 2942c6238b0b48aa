"""ortckpt's test suite, a package so its modules share helpers by plain imports.

The import roots are the repository (``tests.*``) and ``scripts/`` (``ort_oracle``,
``make_fixtures``): pytest's ``pythonpath`` in pyproject.toml sets both for the suite, and
``tests.helpers.ort.run_module`` gives the same two to the modules it runs under ORT's side venvs.
Shared code lives in ``tests/helpers/``; fixtures in ``tests/conftest.py`` and ``tests/ort/conftest.py``.
"""
