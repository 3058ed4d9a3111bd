"""The package imports without a GPU and documents every public name."""

from __future__ import annotations

import inspect

import courier
import courier.deep_ep as deep_ep


def test_import_names() -> None:
    for name in courier.__all__:
        assert hasattr(courier, name), name
    assert issubclass(courier.Error, Exception)
    assert deep_ep.Error is courier.Error
    assert issubclass(courier.CallRefused, courier.Error)
    assert deep_ep.CallRefused is courier.CallRefused


def test_docstrings_and_hints_on_public_names() -> None:
    missing = []
    for module in (courier, deep_ep):
        for name in module.__all__:
            value = getattr(module, name)
            if callable(value) and not (value.__doc__ or "").strip():
                missing.append(f"{module.__name__}.{name}")
    for name, member in inspect.getmembers(deep_ep.Buffer):
        if name.startswith("_"):
            continue
        if callable(member) and not (member.__doc__ or "").strip():
            missing.append(f"Buffer.{name}")
        if inspect.isfunction(member):
            hints = inspect.signature(member).return_annotation
            assert hints is not inspect.Signature.empty, f"Buffer.{name} has no return hint"
    assert not missing, f"no docstring: {missing}"


def test_package_carries_its_launcher_and_plugins() -> None:
    import os

    path = courier.courier_run_path()
    assert path is not None and os.access(path, os.X_OK)
    plugins = os.path.join(courier.package_dir, "lib", "courier")
    if os.path.isdir(plugins):  # an installed wheel (a build tree keeps them elsewhere)
        names = os.listdir(plugins)
        assert "libcourier-gpu-host.so" in names and "libcourier-nic-ofi.so" in names, names
