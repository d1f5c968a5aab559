"""Name -> class registries for policies (and other plug-ins). Registration is by decorator; no if/elif chains."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from .errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """A named set of plug-in factories.

    A factory is a class (or callable) taking keyword parameters. Dynamic families (``pwr_200_fgd_800``) register
    a resolver that parses a name into a factory.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, Callable[..., T]] = {}
        self._resolvers: list[tuple[str, Callable[[str], Callable[..., T] | None]]] = []

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._items:
                raise ValueError(f"duplicate {self.kind} '{name}'")
            self._items[name] = factory
            return factory

        return deco

    def register_family(self, pattern: str, resolver: Callable[[str], Callable[..., T] | None]) -> None:
        """Names matching a family (described by `pattern` for listings) are built by `resolver`."""
        self._resolvers.append((pattern, resolver))

    def factory(self, name: str) -> Callable[..., T]:
        if name in self._items:
            return self._items[name]
        for _pattern, resolver in self._resolvers:
            found = resolver(name)
            if found is not None:
                return found
        raise UnknownNameError(self.kind, name, self.names(with_patterns=True))

    def create(self, name: str, **params: Any) -> T:
        return self.factory(name)(**params)

    def names(self, with_patterns: bool = False) -> list[str]:
        out = sorted(self._items)
        if with_patterns:
            out += [p for p, _ in self._resolvers]
        return out

    def __contains__(self, name: str) -> bool:
        try:
            self.factory(name)
        except UnknownNameError:
            return False
        return True

    def __iter__(self) -> Iterator[tuple[str, Callable[..., T]]]:
        return iter(sorted(self._items.items()))
