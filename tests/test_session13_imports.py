"""Session 13: the operator factories' imports leave the package's submodules reachable."""

from __future__ import annotations

import importlib
import pkgutil
import types

import rafrx.operators


def test_every_operators_submodule_is_the_packages_attribute_of_its_name() -> None:
    # `import rafrx.operators._aggregate as m` and mock.patch("rafrx.operators._aggregate.X")
    # read the package's attribute: an alias named like a submodule hid it.
    names = [m.name for m in pkgutil.iter_modules(rafrx.operators.__path__)]
    assert "_aggregate" in names
    assert "_execute_tools" in names
    for name in names:
        module = importlib.import_module(f"rafrx.operators.{name}")
        attribute = getattr(rafrx.operators, name)
        assert isinstance(attribute, types.ModuleType), f"rafrx.operators.{name} is {attribute!r}"
        assert attribute is module
