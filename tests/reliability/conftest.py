"""The reliability suite drives the same real daemon and workspace harness as the other suites."""

from tests.e2e.conftest import daemon  # noqa: F401 - shared fixtures
from tests.service.conftest import h  # noqa: F401
