"""What only the suite needs, on top of the rigs (``rigs``, beside the product, which the bench
and the chaos runner share): the shared fixtures, a pytest plugin (``tests.support.fixtures``,
which ``tests/conftest.py`` loads; this package does not import it), the ledger tests' Redis
backends, and the suite's own settings and skip-or-fail policy.

``from tests.support import ...`` works wherever the project root is on ``sys.path`` (under
``python -m pytest`` from the root, ``tests`` is a namespace package).

- ``suite``: the tests' ``DRES_ENV``, ``TESTS`` (their directory, whose ``sample_tools`` the
  workers load), ``IN_CI``, ``require_sdk``
- ``backends``: ``Backend``, the ledger tests' Redis backends (fakeredis, redis-server, cluster)
- ``fixtures``: the fixtures (see its docstring)
"""

from tests.support.backends import Backend
from tests.support.suite import DRES_ENV, IN_CI, TESTS, require_sdk

__all__ = ["DRES_ENV", "IN_CI", "TESTS", "Backend", "require_sdk"]
