"""Recipes: YAML files into typed dataclasses, ``--set key=value`` overrides, ``--dry-run``;
and the library's one dict -> dataclass loader (:func:`from_dict`), which also revives the
stored records of :mod:`unified.types` (``Record.from_dict`` calls it).

Every config section is a dataclass. Loading is strict: an unknown key is an error that
names the file, the line and the section, says "did you mean" and lists the valid keys; a value of the wrong type
is an error that names the field and the expected type; a number outside the bounds a field
declares (:func:`bounded`: ``max_steps >= 1``, ``learning_rate > 0``, no NaN) is an error that
names the field, the bound and the value. :func:`flag_type` turns the same bounds into an
argparse ``type`` for a CLI flag, so ``--limit -1`` is a usage error naming flag and value.

Modules (import the names below from ``unified.config``):

- :mod:`~unified.config.errors`: :class:`ConfigError`, :class:`ConfigNameError`;
- :mod:`~unified.config.yamlfile`: reading a recipe file with the line of every key, YAML 1.2 booleans;
- :mod:`~unified.config.loader`: :func:`from_dict` / :func:`to_dict`, :func:`bounded`, the ``VARIANT`` hook;
- :mod:`~unified.config.deprecations`: older forms that still load with one deprecation line (the
  ``UPGRADE``, ``RENAMED`` and ``RENAMED_PATHS`` hooks);
- :mod:`~unified.config.overrides`: ``--set`` (named list entries, the ``NEW_ENTRY`` hook) and
  :func:`load_config`;
- :mod:`~unified.config.cli`: the common flags, :func:`flag_type`, a one-line-error ``ArgumentParser``.

Typical CLI use::

    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_recipe_arguments(parser)
    args = parser.parse_args()
    cfg = load_config(WarmupConfig, args.recipe, args.set)
    if args.dry_run:
        print(dump_yaml(cfg))
"""

from unified.config.cli import ArgumentParser, add_recipe_arguments, flag_type
from unified.config.deprecations import RENAMED_ATTRIBUTE, RENAMED_PATHS_ATTRIBUTE, UPGRADE_ATTRIBUTE
from unified.config.errors import ConfigError, ConfigNameError
from unified.config.loader import VARIANT_ATTRIBUTE, bounded, check_bounds, dump_yaml, from_dict, to_dict
from unified.config.overrides import NEW_ENTRY_ATTRIBUTE, apply_overrides, load_config, mark_overrides
from unified.config.yamlfile import load_yaml_text, read_yaml

__all__ = [
    "NEW_ENTRY_ATTRIBUTE", "RENAMED_ATTRIBUTE", "RENAMED_PATHS_ATTRIBUTE", "UPGRADE_ATTRIBUTE", "VARIANT_ATTRIBUTE",
    "ArgumentParser", "ConfigError", "ConfigNameError", "add_recipe_arguments", "apply_overrides", "bounded",
    "check_bounds", "dump_yaml", "flag_type", "from_dict", "load_config", "load_yaml_text", "mark_overrides",
    "read_yaml", "to_dict",
]
