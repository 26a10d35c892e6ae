"""Imports the gearman3 package (PyPI), patched for Python >= 3.9.

gearman3 0.2.1 still calls array.fromstring(), which Python 3.9 removed; the patch gives
its receive buffer that method (as frombytes) and keeps slices of the same type. Nothing
about the protocol is changed."""

import array
import types

import gearman  # noqa: F401  (re-exported)
import gearman.connection


class _Buffer(array.array):
    def fromstring(self, data):
        self.frombytes(data)

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return _Buffer(self.typecode, item) if isinstance(index, slice) else item


if not hasattr(array.array, "fromstring"):
    gearman.connection.array = types.SimpleNamespace(array=_Buffer)
