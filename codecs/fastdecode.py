"""Generated decoders for well-formed events: one specialized function per attrs class.

The strict cattrs converter stays the authority: a generated decoder accepts only input it
can check cheaply with exact types (the JSON orjson produces), builds the same values the
converter would, and gives up (`NotFast`, or any error) on everything else, so that the
caller runs the converter, whose typed errors are the ones reported. The decoders are
generated from the attrs fields' annotations when the codec module is imported.
"""

from __future__ import annotations

import itertools
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin

import attrs
import cattrs

from actorloop.codecs.jsonvalue import MAX_SAFE_INT, FrozenDict, freeze_object

Decode = Callable[[Any], Any]
ChosenBy = Mapping[str, tuple[str, Mapping[Any, Decode]]]
"""Fields decoded by the decoder another field's value names: field → (field, decoders)."""


_ABSENT = object()


class NotFast(Exception):
    """The input is not one the generated decoder vouches for: use the checked path."""


def _slot_setters(cls: type) -> tuple[Any, ...] | None:
    """The slot setters of each field when `cls.__init__` does nothing but store its
    arguments (no converter, validator, pre/post-init hook or cached hash); else None."""
    if hasattr(cls, "__attrs_pre_init__") or hasattr(cls, "__attrs_post_init__"):
        return None
    if "_attrs_cached_hash" in getattr(cls, "__slots__", ()):
        return None
    setters = []
    for field in attrs.fields(cls):
        if field.converter is not None or field.validator is not None or not field.init:
            return None
        owner = next((klass for klass in cls.__mro__ if field.name in vars(klass)), None)
        slot = None if owner is None else vars(owner)[field.name]
        if not isinstance(slot, types.MemberDescriptorType):
            return None
        setters.append(slot.__set__)
    return tuple(setters)


class DecoderBuilder:
    """Builds one decoder per (class, union tag key) into a single generated module.

    `tagged` maps a tagged union's member set to (tag key, tag by member class) as the
    converter configures it. A type the builder does not model is decoded through the
    converter's own structure hook for it, exactly as cattrs' generated class hook would.
    """

    def __init__(
        self,
        converter: cattrs.Converter,
        tagged: Mapping[frozenset[type], tuple[str, Mapping[type, str]]],
    ) -> None:
        self._converter = converter
        self._tagged = tagged
        self._names: dict[tuple[Any, str | None], str] = {}
        self._sources: list[str] = []
        self._globals: dict[str, Any] = {
            "NotFast": NotFast,
            "MAX": MAX_SAFE_INT,
            "freeze_object": freeze_object,
            "ABSENT": _ABSENT,
            "NEW": object.__new__,
        }
        self._counter = itertools.count()
        # Loads decode in worker threads: generation (names registered, sources pending, one
        # exec) must not interleave, or a thread finds a name not yet compiled.
        self._generating = threading.RLock()

    def decoder(self, tp: Any, chosen_by: ChosenBy | None = None) -> Decode:
        """The generated decoder of the type `tp` (an attrs class or a tagged union: a dict
        in, an instance out); raises NotFast (or any error) where the converter must decide.

        `chosen_by` maps a field of the class to (an earlier field, decoders by its value):
        that field is decoded by the decoder its selector's value names (a value with none
        fails, for the converter to decide).
        """
        with self._generating:
            if isinstance(tp, type) and attrs.has(tp):
                name = self._class_function(tp, None, chosen_by or {})
            else:
                name = self._item_function(tp)
            self._compile()
            decode: Decode = self._globals[name]
            return decode

    # generation ---------------------------------------------------------------------

    def _compile(self) -> None:
        if not self._sources:
            return
        source = "\n\n".join(self._sources)
        self._sources.clear()
        exec(compile(source, "<actorloop generated decoders>", "exec"), self._globals)

    def _constant(self, value: Any, prefix: str = "k") -> str:
        name = f"_{prefix}{next(self._counter)}"
        self._globals[name] = value
        return name

    def _class_function(
        self,
        cls: type,
        tag_key: str | None,
        chosen_by: ChosenBy | None = None,
    ) -> str:
        """Generate `def d_N(o)` for `cls`; with `tag_key` the dict also carries the union
        tag (checked by the union dispatch already)."""
        chosen_by = chosen_by or {}
        key = (cls, tag_key if not chosen_by else f"chosen {id(chosen_by)}")
        found = self._names.get(key)
        if found is not None:
            return found
        name = f"d{next(self._counter)}_{cls.__name__}"
        self._names[key] = name
        attrs.resolve_types(cls)
        fields = attrs.fields(cls)
        # Every required key is read (a missing one raises) and each optional one found is
        # counted: any other key makes the count differ from len(o).
        required = sum(field.default is attrs.NOTHING for field in fields)
        lines = [
            f"def {name}(o):",
            "    if type(o) is not dict:",
            "        raise NotFast",
            f"    n = {required + (tag_key is not None)}",
        ]
        positional: list[str] = []
        keyword: list[str] = []
        for index, field in enumerate(fields):
            if not field.init or isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
                # Not modelled here: let the converter decide the whole class.
                hook = self._constant(self._converter.get_structure_hook(cls), "h")
                self._sources.append(
                    f"def {name}(o):\n    return {hook}(o, {self._constant(cls, 'c')})"
                )
                return name
            var = f"v{index}"
            if field.name in chosen_by:
                selector, table = chosen_by[field.name]
                chooser = f"v{[f.name for f in fields].index(selector)}"
                decoders = self._constant(table, "by")
                lines.append(f"    {var} = {decoders}[{chooser}](o[{field.name!r}])")
            elif field.default is attrs.NOTHING:
                lines.append(f"    {var} = o[{field.name!r}]")
                lines.extend(self._check(var, field.type, "    "))
            else:
                default = self._constant(field.default, "default")
                lines.append(f"    {var} = o.get({field.name!r}, ABSENT)")
                lines.append(f"    if {var} is ABSENT:")
                lines.append(f"        {var} = {default}")
                lines.append("    else:")
                lines.append("        n += 1")
                lines.extend(self._check(var, field.type, "        "))
            (keyword if field.kw_only else positional).append(
                f"{field.alias}={var}" if field.kw_only else var
            )
        lines.append("    if len(o) != n:")
        lines.append("        raise NotFast")
        setters = _slot_setters(cls)
        if setters is None:
            lines.append(
                f"    return {self._constant(cls, 'c')}({', '.join(positional + keyword)})"
            )
        else:
            lines.extend(self._construct(cls, setters, [f"v{i}" for i in range(len(fields))]))
        self._sources.append("\n".join(lines))
        return name

    def _construct(self, cls: type, setters: tuple[Any, ...], values: list[str]) -> list[str]:
        lines = [f"    r = NEW({self._constant(cls, 'c')})"]
        for setter, value in zip(setters, values, strict=True):
            lines.append(f"    {self._constant(setter, 's')}(r, {value})")
        lines.append("    return r")
        return lines

    def _check(self, var: str, tp: Any, pad: str) -> list[str]:
        """Lines that check `var` against `tp` and rebind it to the structured value."""
        if tp is str or tp is bool:
            return [f"{pad}if type({var}) is not {tp.__name__}:", f"{pad}    raise NotFast"]
        if tp is int:
            return [
                f"{pad}if type({var}) is not int or not -MAX <= {var} <= MAX:",
                f"{pad}    raise NotFast",
            ]
        if tp is FrozenDict:
            return [f"{pad}{var} = freeze_object({var})"]
        origin = get_origin(tp)
        if origin is Literal and all(type(arg) is str for arg in get_args(tp)):
            allowed = self._constant(frozenset(get_args(tp)), "literal")
            return [
                f"{pad}if type({var}) is not str or {var} not in {allowed}:",
                f"{pad}    raise NotFast",
            ]
        if origin is Union or origin is types.UnionType:
            members = get_args(tp)
            rest = tuple(member for member in members if member is not type(None))
            if type(None) in members and len(rest) == 1:
                inner = self._check(var, rest[0], pad + "    ")
                return [f"{pad}if {var} is not None:", *inner]
            if type(None) in members and frozenset(rest) in self._tagged:
                table, tag_key = self._union_table(rest)
                return [
                    f"{pad}if {var} is not None:",
                    f"{pad}    {var} = {table}[{var}[{tag_key!r}]]({var})",
                ]
        if origin is tuple:
            args = get_args(tp)
            if len(args) == 2 and args[1] is Ellipsis:
                call = self._call(args[0], "item")
                if call is None:
                    call = f"{self._item_function(args[0])}(item)"
                return [
                    f"{pad}if type({var}) is not list:",
                    f"{pad}    raise NotFast",
                    f"{pad}{var} = tuple([{call} for item in {var}])",
                ]
        call = self._call(tp, var)
        if call is not None:
            return [f"{pad}{var} = {call}"]
        # Anything else: the converter's own hook for the type (what cattrs would call).
        hook = self._constant(self._converter.get_structure_hook(tp), "h")
        return [f"{pad}{var} = {hook}({var}, {self._constant(tp, 't')})"]

    def _call(self, tp: Any, arg: str) -> str | None:
        """An expression decoding `arg` as an attrs class or a tagged union (a bad tag or a
        non-object fails with KeyError or TypeError), or None for other types."""
        if isinstance(tp, type) and attrs.has(tp):
            return f"{self._class_function(tp, None)}({arg})"
        members = get_args(tp)
        if get_origin(tp) in (Union, types.UnionType) and frozenset(members) in self._tagged:
            table, tag_key = self._union_table(members)
            return f"{table}[{arg}[{tag_key!r}]]({arg})"
        return None

    def _item_function(self, tp: Any) -> str:
        key = (tp, "item")
        found = self._names.get(key)
        if found is not None:
            return found
        name = f"i{next(self._counter)}"
        self._names[key] = name
        body = self._check("x", tp, "    ")
        self._sources.append("\n".join([f"def {name}(x):", *body, "    return x"]))
        return name

    def _union_table(self, members: tuple[type, ...]) -> tuple[str, str]:
        """(the name of a dict from tag to member decoder, the tag key) for a tagged union."""
        key = (frozenset(members), "union")
        found = self._names.get(key)
        tag_key, tags = self._tagged[frozenset(members)]
        if found is not None:
            return found, tag_key
        table = self._constant({}, "tags")
        self._names[key] = table
        by_tag = {tags[member]: self._class_function(member, tag_key) for member in members}
        # Filled when the generated module runs, after every member's function exists.
        entries = ", ".join(f"{tag!r}: {function}" for tag, function in by_tag.items())
        self._sources.append(f"{table}.update({{{entries}}})")
        return table, tag_key
