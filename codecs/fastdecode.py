"""Generated decoders for well-formed events: one specialized function per attrs class.

The strict cattrs converter stays the authority: a generated decoder accepts only input it
can check cheaply with exact types (the JSON orjson produces), builds the same values the
converter would, and gives up (`NotFast`, or any error) on everything else, so that the
caller runs the converter, whose typed errors are the ones reported. The decoders are
generated from the attrs fields' annotations when the codec module is imported.

A decoder is one flat function per top-level class (or per tagged-union member): nested
attrs classes are decoded inline in their parent's body, the fields a tag selects are
decoded inline for each tag value (`variants`), and an object holding only its required
keys skips the look-ups of its optional ones. Calls remain only at tagged unions and
arrays of objects, where the member is chosen per item.
"""

from __future__ import annotations

import itertools
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin

import attrs
import cattrs

from .jsonvalue import MAX_SAFE_INT, FrozenDict, freeze_object

Decode = Callable[[Any], Any]
Variants = Mapping[Any, type]
"""For a field chosen by an earlier field's value: the class each selector value names."""

_ABSENT = object()
_INLINE_DEPTH = 4
"""Nested attrs classes deeper than this are decoded by a call, not inline."""
_INT_CHECK = f"not -{MAX_SAFE_INT} <= {{var}} <= {MAX_SAFE_INT}"


class NotFast(Exception):
    """The input is not one the generated decoder vouches for: use the checked path."""


def _plain_init(cls: type) -> bool:
    """Whether `cls.__init__` does nothing but store its arguments in slots (no converter,
    validator, pre/post-init hook or cached hash), so a decoder may fill the slots itself."""
    if hasattr(cls, "__attrs_pre_init__") or hasattr(cls, "__attrs_post_init__"):
        return False
    if "_attrs_cached_hash" in getattr(cls, "__slots__", ()):
        return False
    for field in attrs.fields(cls):
        if field.converter is not None or field.validator is not None or not field.init:
            return False
        owner = next((klass for klass in cls.__mro__ if field.name in vars(klass)), None)
        if owner is None or not isinstance(vars(owner)[field.name], types.MemberDescriptorType):
            return False
    return True


def _filler(cls: type) -> type | None:
    """A subclass of the frozen slotted `cls` that adds no slot and lets its instances'
    slots be assigned, or None where that does not hold.

    A decoder makes a bare instance of it (`filler()`, no `__init__` run), fills it with
    plain attribute stores (what the interpreter does fastest: each frozen-class slot setter
    is a call through a method wrapper, twice the cost of a whole plain store), then sets its
    `__class__` to `cls`, which CPython allows because the layouts are the same: what the
    caller gets is an instance of `cls` and nothing else. Checked once here, on an instance
    built that way.
    """
    names = [field.name for field in attrs.fields(cls)]
    filler = type(
        f"{cls.__name__}Filler",
        (cls,),
        # Both setattr slots overridden by object's: the type then stores attributes the
        # generic way (a __delattr__ left to the frozen class would keep the slow path).
        # object's __init__ too: `filler()` then makes a bare instance, cheaper than a call
        # of object.__new__ (which checks its caller's type for a safe base first).
        {
            "__slots__": (),
            "__setattr__": object.__setattr__,
            "__delattr__": object.__delattr__,
            "__init__": object.__init__,
        },
    )
    markers = [object() for _ in names]
    try:
        probe: Any = filler()
        for name, marker in zip(names, markers, strict=True):
            setattr(probe, name, marker)
        probe.__class__ = cls
    except (TypeError, AttributeError):
        return None
    same = all(getattr(probe, name) is marker for name, marker in zip(names, markers, strict=True))
    return filler if type(probe) is cls and same else None


def _modelled(cls: type) -> bool:
    """Whether the builder decodes `cls` itself (every field set by `__init__`, no default
    factory); other classes go to the converter's own hook as a whole."""
    attrs.resolve_types(cls)
    return all(
        field.init and not isinstance(field.default, attrs.Factory)  # type: ignore[arg-type]
        for field in attrs.fields(cls)
    )


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
        self._names: dict[tuple[Any, Any], str] = {}
        self._sources: list[str] = []
        self._globals: dict[str, Any] = {"NotFast": NotFast, "freeze_object": freeze_object}
        self._fillers: dict[type, type | None] = {}
        self._counter = itertools.count()
        # Loads decode in worker threads: generation (names registered, sources pending, one
        # exec) must not interleave, or a thread finds a name not yet compiled.
        self._generating = threading.RLock()

    def decoder(self, tp: Any) -> Decode:
        """The generated decoder of the type `tp` (an attrs class or a tagged union: a dict
        in, an instance out); raises NotFast (or any error) where the converter must decide.
        """
        with self._generating:
            if isinstance(tp, type) and attrs.has(tp):
                name = self._class_function(tp, None)
            else:
                name = self._item_function(tp)
            self._compile()
            decode: Decode = self._globals[name]
            return decode

    def variants(self, cls: type, field: str, classes: Variants) -> dict[Any, Decode]:
        """One decoder of the attrs class `cls` per key of `classes`, the one for a key
        decoding `field` as the class `classes` gives for it, inline. The caller looks the
        decoder up by the value of the field that selects it (a value with none is a
        KeyError: the converter decides); each decoder still checks every field itself."""
        with self._generating:
            names = {
                value: self._class_function(cls, None, (field, chosen))
                for value, chosen in classes.items()
            }
            self._compile()
            return {value: self._globals[name] for value, name in names.items()}

    # generation ---------------------------------------------------------------------

    def _compile(self) -> None:
        if not self._sources:
            return
        source = "\n\n".join(self._sources)
        self._sources.clear()
        exec(compile(source, "<actorloop generated decoders>", "exec"), self._globals)

    def _filler(self, cls: type) -> type | None:
        """`_filler(cls)`, made once per class however many decoders build it inline."""
        if cls not in self._fillers:
            self._fillers[cls] = _filler(cls)
        return self._fillers[cls]

    def _default(self, value: Any) -> str:
        """An expression for a field's default: a literal for None, bools, ints and strings
        (a constant load), else a module constant."""
        if value is None or type(value) in (bool, int, str):
            return repr(value)
        return self._constant(value, "default")

    def _constant(self, value: Any, prefix: str = "k") -> str:
        name = f"_{prefix}{next(self._counter)}"
        self._globals[name] = value
        return name

    def _class_function(
        self, cls: type, tag_key: str | None, chosen: tuple[str, type] | None = None
    ) -> str:
        """Generate `def d_N(o)` for `cls`; with `tag_key` the dict also carries the union
        tag (checked by the union dispatch already); `chosen` decodes one field as a given
        class."""
        key = (cls, tag_key if chosen is None else chosen)
        found = self._names.get(key)
        if found is not None:
            return found
        name = f"d{next(self._counter)}_{cls.__name__}"
        self._names[key] = name
        if not _modelled(cls):
            # Not modelled here: let the converter decide the whole class.
            hook = self._constant(self._converter.get_structure_hook(cls), "h")
            self._sources.append(
                f"def {name}(o):\n    return {hook}(o, {self._constant(cls, 'c')})"
            )
            return name
        body = self._class_body(cls, "o", "    ", tag_key, chosen, (cls,))
        self._sources.append("\n".join([f"def {name}(o):", *body, "    return o"]))
        return name

    def _class_body(
        self,
        cls: type,
        var: str,
        pad: str,
        tag_key: str | None,
        chosen: tuple[str, type] | None,
        inlining: tuple[type, ...],
    ) -> list[str]:
        """Lines that check the dict in `var` as `cls` and rebind `var` to the instance
        (fields are read into `var_0`, `var_1`, ... first)."""
        fields = attrs.fields(cls)
        # Every required key is read (a missing one raises); with only those present the
        # optional ones take their defaults unread, else each one found is counted: any
        # other key makes the count differ from len().
        required = sum(field.default is attrs.NOTHING for field in fields)
        required += tag_key is not None
        lines = [f"{pad}if type({var}) is not dict:", f"{pad}    raise NotFast"]
        optional = []
        for index, field in enumerate(fields):
            value = f"{var}_{index}"
            if field.default is not attrs.NOTHING:
                optional.append((value, field))
                continue
            lines.append(f"{pad}{value} = {var}[{field.name!r}]")
            if chosen is not None and field.name == chosen[0]:
                lines.extend(self._check_class(value, chosen[1], pad, inlining))
            else:
                lines.extend(self._check(value, field.type, pad, inlining))
        if not optional:
            lines += [f"{pad}if len({var}) != {required}:", f"{pad}    raise NotFast"]
        else:
            lines.append(f"{pad}if len({var}) == {required}:")
            for value, field in optional:
                lines.append(f"{pad}    {value} = {self._default(field.default)}")
            count = f"{var}_n"
            lines += [f"{pad}else:", f"{pad}    {count} = {required}"]
            inner = pad + "    "
            for value, field in optional:
                lines += [
                    f"{inner}{value} = {var}.get({field.name!r}, ABSENT)",
                    f"{inner}if {value} is ABSENT:",
                    f"{inner}    {value} = {self._default(field.default)}",
                    f"{inner}else:",
                    f"{inner}    {count} += 1",
                    *self._check(value, field.type, inner + "    ", inlining),
                ]
            lines += [f"{inner}if len({var}) != {count}:", f"{inner}    raise NotFast"]
            self._globals["ABSENT"] = _ABSENT
        values = [f"{var}_{index}" for index in range(len(fields))]
        filler = self._filler(cls) if fields and _plain_init(cls) else None
        if not fields:
            # No state: every instance is equal, so the decoder hands out one.
            lines.append(f"{pad}{var} = {self._constant(cls(), 'only')}")
        elif filler is None:
            pairs = list(zip(values, fields, strict=True))
            positional = [value for value, field in pairs if not field.kw_only]
            keyword = [f"{field.alias}={value}" for value, field in pairs if field.kw_only]
            arguments = ", ".join(positional + keyword)
            lines.append(f"{pad}{var} = {self._constant(cls, 'c')}({arguments})")
        else:
            instance = f"{var}_r"
            lines.append(f"{pad}{instance} = {self._constant(filler, 'filler')}()")
            for field, value in zip(fields, values, strict=True):
                lines.append(f"{pad}{instance}.{field.name} = {value}")
            lines.append(f"{pad}{instance}.__class__ = {self._constant(cls, 'c')}")
            lines.append(f"{pad}{var} = {instance}")
        return lines

    def _check_class(self, var: str, cls: type, pad: str, inlining: tuple[type, ...]) -> list[str]:
        """Lines decoding the dict in `var` as the attrs class `cls`: inline, or a call where
        the class is recursive, too deep or decided by the converter."""
        if cls in inlining or len(inlining) > _INLINE_DEPTH or not _modelled(cls):
            return [f"{pad}{var} = {self._class_function(cls, None)}({var})"]
        return self._class_body(cls, var, pad, None, None, (*inlining, cls))

    def _check(self, var: str, tp: Any, pad: str, inlining: tuple[type, ...]) -> list[str]:
        """Lines that check `var` against `tp` and rebind it to the structured value."""
        if tp is str or tp is bool:
            return [f"{pad}if type({var}) is not {tp.__name__}:", f"{pad}    raise NotFast"]
        if tp is int:
            return [
                f"{pad}if type({var}) is not int or {_INT_CHECK.format(var=var)}:",
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
                inner = self._check(var, rest[0], pad + "    ", inlining)
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
                return self._check_array(var, args[0], pad)
        if isinstance(tp, type) and attrs.has(tp):
            return self._check_class(var, tp, pad, inlining)
        call = self._call(tp, var)
        if call is not None:
            return [f"{pad}{var} = {call}"]
        # Anything else: the converter's own hook for the type (what cattrs would call).
        hook = self._constant(self._converter.get_structure_hook(tp), "h")
        return [f"{pad}{var} = {hook}({var}, {self._constant(tp, 't')})"]

    def _check_array(self, var: str, item_type: Any, pad: str) -> list[str]:
        """Lines checking `var` as a JSON array of `item_type` and rebinding it to a tuple."""
        lines = [f"{pad}if type({var}) is not list:", f"{pad}    raise NotFast"]
        if item_type is str or item_type is bool or item_type is int:
            # Scalars are checked in place and the list copied once: no call per item.
            item = f"{var}_i"
            check = f"type({item}) is not {item_type.__name__}"
            if item_type is int:
                check += f" or {_INT_CHECK.format(var=item)}"
            return [
                *lines,
                f"{pad}for {item} in {var}:",
                f"{pad}    if {check}:",
                f"{pad}        raise NotFast",
                f"{pad}{var} = tuple({var})",
            ]
        call = self._call(item_type, "item")
        if call is None:
            call = f"{self._item_function(item_type)}(item)"
        one = self._call(item_type, f"{var}[0]") or f"{self._item_function(item_type)}({var}[0])"
        # Most arrays of blocks hold one: a one-tuple skips the comprehension's frame.
        return [
            *lines,
            f"{pad}if len({var}) == 1:",
            f"{pad}    {var} = ({one},)",
            f"{pad}else:",
            f"{pad}    {var} = tuple([{call} for item in {var}])",
        ]

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
        body = self._check("x", tp, "    ", ())
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
