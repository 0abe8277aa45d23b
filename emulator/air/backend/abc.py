# SPDX-License-Identifier: MIT
"""The backend interface, as mlir-air's air.backend.abc spells it."""

import abc
from typing import TypeVar

CompiledArtifact = TypeVar("CompiledArtifact")
Invoker = TypeVar("Invoker")


class AirBackend(abc.ABC):
    """A backend compiles an AIR module and loads it into something callable."""

    @abc.abstractmethod
    def compile(self, module):
        """Compile the module into an artifact that `load` understands."""

    @abc.abstractmethod
    def load(self, artifact):
        """Turn an artifact into a callable invoker."""


class AirBackendError(Exception):
    """An exception raised by AIR backends."""

    def __init__(self, message):
        super().__init__(message)
