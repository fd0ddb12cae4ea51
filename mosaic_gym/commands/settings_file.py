"""Settings from a file (``--config FILE``): TOML, YAML or JSON whose keys are the settings' names, checked against
:class:`algos.learn.config.TrainConfig` and :class:`~algos.learn.config.PGConfig` (a misspelt key names its close
match, a value of the wrong type names the type). Read by ``mosaic train`` and by ``mosaic eval|rollout --config``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from pathlib import Path
from typing import Any, Mapping

MAX_BYTES = 2**20  # the largest settings file read (1 MiB)


def read_settings(path: str | Path, flags: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings in a TOML, YAML or JSON file, checked: each key a setting's name (``pg`` and ``env_kwargs``
    tables), each value of its type (``"none"`` for None, as TOML has no null). A :class:`ConfigError` of one line
    naming the file and the key, and the close match of a misspelt one (among the settings and ``flags``, a flag's
    dest -> the setting it sets), otherwise."""
    from algos.learn.config import ConfigError

    path = Path(path)
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BYTES + 1)  # (bounded: a settings file is a few KB, /dev/zero is endless)
    except OSError as err:
        raise ConfigError(f"--config {path}: cannot read it ({err.strerror or err})") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"--config {path}: more than {MAX_BYTES // 2**20} MiB; a settings file is a few KB")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"--config {path}: not UTF-8 text (byte {err.start})") from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        elif suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise ConfigError(f"--config {path}: reading YAML needs PyYAML (pip install pyyaml); or write the "
                                  f"settings as TOML") from None
            data = yaml.safe_load(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            raise ConfigError(f"--config {path}: give a .toml, .yaml, .yml or .json file")
    except ConfigError:
        raise
    except Exception as err:  # tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(f"--config {path} is not valid {suffix[1:].upper()}: {first}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: the settings must be a table of names and values, not a "
                          f"{type(data).__name__}")
    names = _names()
    return {name: _checked(path, name, value, names[name].type)
            for name, value in _flat(path, data, names, flags or {}).items()}


def _names() -> dict[str, Any]:
    """Every setting a file may give -> its field (``env_kwargs``: the whole dict)."""
    from algos.learn.config import PGConfig, TrainConfig

    names = {f.name: f for f in dataclasses.fields(TrainConfig) if f.name not in ("pg", "resume")}
    names.update({f"pg.{f.name}": f for f in dataclasses.fields(PGConfig)})
    return names


def _flat(path: Path, data: dict[str, Any], names: Mapping[str, Any], flags: Mapping[str, str]) -> dict[str, Any]:
    """``{"pg": {"lr": 1}}`` -> ``{"pg.lr": 1}`` (env_kwargs stays one dict), every name known."""
    from algos.learn.config import ConfigError

    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key == "pg" and isinstance(value, dict):
            flat.update({f"pg.{k}": v for k, v in value.items()})
        else:
            flat[str(key)] = value
    for name in flat:
        if name not in names:
            raise ConfigError(f"--config {path}: {name!r} is not a setting{_close_match(name, names, flags)}")
    return flat


def _close_match(name: str, names, by_dest: Mapping[str, str]) -> str:
    """`` (did you mean 'pg.lr'?)`` for a misspelt setting, a flag's dest or a flag's name (``by_dest``: a flag's
    dest -> the setting it sets); else ``""``."""
    bare = name.lstrip("-").replace("-", "_")
    if bare in by_dest:
        return f" (did you mean {by_dest[bare]!r}?)"
    pool = {**{n: n for n in names}, **{n.split(".", 1)[1]: n for n in names if "." in n},
            **by_dest}
    match = difflib.get_close_matches(bare, pool, n=1, cutoff=0.6)
    return f" (did you mean {pool[match[0]]!r}?)" if match else f"; settings: {', '.join(sorted(names))}"


_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "list": (list,), "dict": (dict,)}


def _checked(path: Path, name: str, value: Any, kind: Any) -> Any:
    """``value`` when it is of the setting's type ``kind`` (``"none"``: None where None is allowed); a one-line
    ConfigError otherwise."""
    from algos.learn.config import ConfigError

    kinds = [k.strip() for k in str(kind).split("|")]
    if "None" in kinds and (value is None or (isinstance(value, str) and value.lower() == "none")):
        return None
    allowed = tuple(t for k in kinds for t in _TYPES.get(k, ()))
    if isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed):
        return value
    raise ConfigError(f"--config {path}: {name} = {value!r} is not {' or '.join(kinds)}")
