"""Notebooks under nbval (`pytest --nbval notebooks`) start from a generated tiny checkpoint.

The first use of the book's model writes it into the cache and says so on stderr; under nbval that line
would be an output the committed chapter does not have. Generating it before the first notebook runs
keeps every chapter's compared outputs the same on a fresh machine as on a warm one.
"""


def pytest_sessionstart(session):
    if getattr(session.config.option, "nbval", False) or getattr(session.config.option, "nbval_lax", False):
        from minillm.checkpoints import default_model_path

        default_model_path()
