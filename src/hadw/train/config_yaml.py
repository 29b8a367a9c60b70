"""The strict YAML of hadw's configs: duplicate keys refused, alias bombs bounded, `${...}` literal unless asked
for, `key=value` overrides parsed as YAML; every way a file or an override can be wrong is a one-line ConfigError.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from hadw.train.config_schema import Config, ConfigError

# A real config holds a few hundred values; far more is a YAML alias bomb ("billion laughs").
MAX_YAML_VALUES = 100_000
MAX_CONFIG_BYTES = 1 << 20
_DOTTED_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class _DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: object, line: int, first: int):
        super().__init__(f"duplicate key {key!r} (first at line {first})")
        self.key, self.line, self.first = key, line, first


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader (no Python tags: a !!python/object never runs) that refuses a key given twice in
    one mapping, where YAML would silently keep the last. Merge keys (`<<: *base`) are YAML: the mapping gets
    base's keys, and its own keys override them (it was refused, with advice about quoting that did not apply)."""

    def construct_mapping(self, node, deep=False):
        own = [key_node for key_node, _ in node.value if key_node.tag != _MERGE_TAG]
        if isinstance(node, yaml.MappingNode):  # `<<: *base` (a YAML merge key): base's keys, the mapping's own win
            self.flatten_mapping(node)
        seen: dict[object, int] = {}
        for key_node in own:  # a key given twice by hand, not one that overrides a merged key
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
            if first != key_node.start_mark.line + 1:
                raise _DuplicateKeyError(key, key_node.start_mark.line + 1, first)
        return super().construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _StrictLoader.construct_mapping)
# YAML 1.2 floats (1e-6 without a dot), as OmegaConf's own loader reads them
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
        r"|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text -> Python data, safely: no Python tags, no duplicate keys, no alias bomb, no stack overflow.
    Raises ConfigError naming `where` (a file, an override) and the line."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader
    except _DuplicateKeyError as err:
        raise ConfigError(
            f"{where}:{err.line}: duplicate key {err.key!r} (first at line {err.first}); give each "
            "key once (YAML would silently keep the last)"
        ) from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to be a config") from None
    _check_size(data, where)
    return data


def _check_size(data: Any, where: str) -> None:
    """ConfigError when data expands to more than MAX_YAML_VALUES values (aliases count each time used)."""
    stack, count = [data], 0
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_YAML_VALUES:
            raise ConfigError(
                f"{where}: expands to more than {MAX_YAML_VALUES} values (repeated YAML aliases, an alias bomb); "
                "write the values out"
            )
        if isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item


def _literal(data: Any) -> Any:
    """Every `${` in a string escaped for OmegaConf (`\\${`), so it stays literal text."""
    if isinstance(data, str):
        return data.replace("${", "\\${")
    if isinstance(data, dict):
        return {k: _literal(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_literal(v) for v in data]
    return data


def _override(item: str, interpolate: bool):
    """One `key=value` override as an OmegaConf mapping. The value is YAML (numbers, lists, booleans); text
    that is not YAML (`{question} Answer:`) is taken as a string, except an unclosed list."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key=value (e.g. train.steps=50)")
    _refuse_control_characters(item)
    key, value = item.split("=", 1)
    key = key.strip()
    if not _DOTTED_KEY.fullmatch(key):
        raise ConfigError(f"override {item!r}: {key!r} is not a dotted key like train.steps")
    try:
        parsed = yaml.load(value, Loader=_StrictLoader) if value.strip() else ""  # a SafeLoader
        _check_size(parsed, f"override {item!r}")
    except (yaml.YAMLError, RecursionError) as err:
        if value.lstrip().startswith("["):
            problem = getattr(err, "problem", None) or type(err).__name__
            raise ConfigError(f"override {item!r}: not a valid YAML list ({problem}); write e.g. {key}=[1,2]") from None
        parsed = value  # e.g. data.template={question} Answer:
    if isinstance(parsed, float) and value.strip().lower() in (".nan", "nan"):
        parsed = math.nan
    source = OmegaConf.create()
    try:
        OmegaConf.update(source, key, parsed if interpolate else _literal(parsed), force_add=True)
    except Exception as err:
        problem = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"override {item!r}: {problem}") from None
    _check_sections(OmegaConf.to_container(source, resolve=False), f"override {item!r}")
    return source


def _refuse_control_characters(item: str) -> None:
    """ConfigError for a newline, tab or other control character in a `key=value` override: YAML would fold a
    newline into a space, strip or reject a tab, so the value would change without a word."""
    for column, char in enumerate(item, start=1):
        if unicodedata.category(char) in ("Cc", "Zl", "Zp"):
            raise ConfigError(
                f"override {item!r}: a control character {char!r} at column {column}; allowed: printable text (write "
                'a newline or tab as \\n or \\t inside double quotes, key="a\\nb", or set the value in a YAML file)'
            )


def _check_sections(data: Any, where: str, node: Any = Config, prefix: str = "") -> None:
    """ConfigError when a section (train, data.fields, ...) is given a value instead of its keys."""
    import typing

    if not isinstance(data, dict) or not is_dataclass(node):
        return
    hints = typing.get_type_hints(node)
    for key, value in list(data.items()):
        section = hints.get(key) if isinstance(key, str) else None
        if section is None or not is_dataclass(section):
            continue
        if value is None:  # `train:` with nothing under it: an empty section
            del data[key]
            continue
        if not isinstance(value, dict):
            keys = ", ".join(f.name for f in fields(section))
            raise ConfigError(
                f"{where}: {prefix}{key} is a section ({keys}), not a value; set one of its keys, e.g. "
                f"{prefix}{key}.{fields(section)[0].name}=..."
            )
        _check_sections(value, where, section, f"{prefix}{key}.")


def _expected(key: str) -> str:
    """What the Config field at dotted `key` holds, in words."""
    import typing

    node: Any = Config
    for part in key.split("."):
        hints = typing.get_type_hints(node) if is_dataclass(node) else {}
        if part not in hints:
            return "another type"
        node = hints[part]
    if is_dataclass(node):
        return f"a section of keys ({', '.join(f.name for f in fields(node))})"
    return f"a {getattr(node, '__name__', None) or node}"


def _value_at(source, key: str) -> Any:
    try:
        return OmegaConf.to_container(OmegaConf.select(source, key, default=None), resolve=False)
    except Exception:
        return OmegaConf.select(source, key, default=None)


def _yaml_error(path: str, err: yaml.YAMLError) -> str:
    """One line: where the YAML broke and the usual cause (an unquoted value with {, }, : or #)."""
    mark = getattr(err, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return (
        f"{where}: not valid YAML ({problem}); quote values that contain {{ }} : or #, "
        'e.g. template: "{question} Answer:"'
    )


def _load_yaml(path: Path, interpolate: bool = False):
    """The YAML file as an OmegaConf mapping; every way it can be wrong is a one-line ConfigError."""
    if path.is_dir():
        raise ConfigError(f"config file {path} is a directory; pass a YAML file")
    if not path.is_file():
        what = "not a regular file" if path.exists() else "not found"
        raise ConfigError(f"config file {what}: {path}" + ("; pass a YAML file" if path.exists() else ""))
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {path} is {path.stat().st_size} bytes; a config is at most {MAX_CONFIG_BYTES}")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8-sig")  # a UTF-8 BOM is accepted
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {err.object[err.start]:#x})") from None
    except OSError as err:
        raise ConfigError(f"config file {path}: {err.strerror}") from None
    try:
        data = parse_yaml(text, str(path))
    except yaml.YAMLError as err:
        raise ConfigError(_yaml_error(str(path), err)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections (model:, data:, ...), got a {type(data).__name__}")
    _check_sections(data, str(path))
    try:
        return OmegaConf.create(data if interpolate else _literal(data))
    except Exception as err:  # e.g. non-string keys
        raise ConfigError(f"{path}: {str(err).splitlines()[0]}") from None
